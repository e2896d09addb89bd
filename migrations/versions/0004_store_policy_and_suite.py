"""Store each campaign's policy and suite (content-addressed) and index the hot paths.

Workers then need only a campaign id. Two partial indexes keep claim and the
lease sweep off finished rows: ``benchmark_campaign_claimable`` lists claimable
items in claim order, ``benchmark_campaign_leases`` the leased ones by expiry.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CLAIMABLE = "status IN ('pending', 'retry_wait')"
LEASED = "status = 'leased'"


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "benchmark_campaign_policies",
        sa.Column("policy_sha256", sa.Text(), nullable=False),
        sa.Column("policy_json", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.PrimaryKeyConstraint("policy_sha256", name="pk_benchmark_campaign_policies"),
    )
    op.create_table(
        "benchmark_campaign_suites",
        sa.Column("suite_sha256", sa.Text(), nullable=False),
        sa.Column("suite_json", sa.Text(), nullable=False),
        sa.Column("case_count", sa.Integer(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.PrimaryKeyConstraint("suite_sha256", name="pk_benchmark_campaign_suites"),
    )
    op.create_index(
        "benchmark_campaign_claimable",
        "benchmark_campaign_work",
        ["campaign_id", "target_locale", "suite_case_key"],
        sqlite_where=sa.text(CLAIMABLE),
        postgresql_where=sa.text(CLAIMABLE),
    )
    op.create_index(
        "benchmark_campaign_leases",
        "benchmark_campaign_work",
        ["campaign_id", "lease_expires_at"],
        sqlite_where=sa.text(LEASED),
        postgresql_where=sa.text(LEASED),
    )


def downgrade() -> None:
    op.drop_index("benchmark_campaign_leases", table_name="benchmark_campaign_work")
    op.drop_index("benchmark_campaign_claimable", table_name="benchmark_campaign_work")
    op.drop_table("benchmark_campaign_suites")
    op.drop_table("benchmark_campaign_policies")
