"""Operators' controls on a campaign: cancel, and flow control for rate-limited evaluators.

- ``benchmark_campaigns.cancelled_at``: when an operator cancelled the
  campaign (``NULL``: it is not cancelled). A cancelled campaign hands out no
  work and finalizes no report; ``resume`` clears it.
- ``benchmark_campaigns.max_concurrent_leases`` and
  ``max_claims_per_minute``: flow-control caps the claim enforces (``NULL``:
  no cap; ``0`` pauses the campaign).
- ``benchmark_campaign_claims``: when each claim of a campaign with a
  claims-per-minute cap was handed out, indexed by (campaign, time), so a
  claim counts the last 60 seconds by an index range.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.add_column(sa.Column("cancelled_at", epoch_seconds(), nullable=True))
        batch.add_column(sa.Column("max_concurrent_leases", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_claims_per_minute", sa.Integer(), nullable=True))
    op.create_table(
        "benchmark_campaign_claims",
        sa.Column("claim_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("campaign_id", sa.Text(), nullable=False),
        sa.Column("claimed_at", epoch_seconds(), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["benchmark_campaigns.campaign_id"],
            name="fk_benchmark_campaign_claims_campaign_id",
        ),
        sa.PrimaryKeyConstraint("claim_id", name="pk_benchmark_campaign_claims"),
    )
    op.create_index(
        "benchmark_campaign_claims_recent",
        "benchmark_campaign_claims",
        ["campaign_id", "claimed_at"],
    )


def downgrade() -> None:
    op.drop_index("benchmark_campaign_claims_recent", table_name="benchmark_campaign_claims")
    op.drop_table("benchmark_campaign_claims")
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.drop_column("max_claims_per_minute")
        batch.drop_column("max_concurrent_leases")
        batch.drop_column("cancelled_at")
