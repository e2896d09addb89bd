"""Limit groups shared across campaigns, and the evaluator a campaign names.

- ``benchmark_limit_groups``: caps keyed by a name (by default a campaign's
  model provider) that hold across every campaign in the group: live leases,
  claims per minute, and cost units per minute (reported by evaluators).
- ``benchmark_limit_group_usage``: the group's claims and reported costs of
  the last minute (pruned as claims go by), which the per-minute caps count.
- ``benchmark_campaigns.limit_group`` (the group a campaign belongs to;
  existing campaigns join their provider's) and ``evaluator`` (the name of the
  evaluator a fleet runs it with: a name only, mapped to code by the fleet's
  own allow-list).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "benchmark_limit_groups",
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("max_concurrent_leases", sa.Integer(), nullable=True),
        sa.Column("max_claims_per_minute", sa.Integer(), nullable=True),
        sa.Column("max_cost_per_minute", sa.Integer(), nullable=True),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        sa.PrimaryKeyConstraint("group_key", name="pk_benchmark_limit_groups"),
    )
    op.create_table(
        "benchmark_limit_group_usage",
        sa.Column("usage_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("used_at", epoch_seconds(), nullable=False),
        sa.Column("claims", sa.Integer(), nullable=False),
        sa.Column("cost_units", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("usage_id", name="pk_benchmark_limit_group_usage"),
    )
    op.create_index(
        "benchmark_limit_group_usage_recent",
        "benchmark_limit_group_usage",
        ["group_key", "used_at"],
    )
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.add_column(sa.Column("limit_group", sa.Text(), nullable=True))
        batch.add_column(sa.Column("evaluator", sa.Text(), nullable=True))
    op.create_index("benchmark_campaigns_limit_group", "benchmark_campaigns", ["limit_group"])
    campaigns = sa.table(
        "benchmark_campaigns",
        sa.column("limit_group", sa.Text()),
        sa.column("candidate_provider_id", sa.Text()),
    )
    op.execute(campaigns.update().values(limit_group=campaigns.c.candidate_provider_id))


def downgrade() -> None:
    op.drop_index("benchmark_campaigns_limit_group", table_name="benchmark_campaigns")
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.drop_column("evaluator")
        batch.drop_column("limit_group")
    op.drop_index("benchmark_limit_group_usage_recent", table_name="benchmark_limit_group_usage")
    op.drop_table("benchmark_limit_group_usage")
    op.drop_table("benchmark_limit_groups")
