"""Legacy schema v2: one immutable report per campaign.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "benchmark_campaign_reports",
        sa.Column("campaign_id", sa.Text(), nullable=False),
        sa.Column("policy_sha256", sa.Text(), nullable=False),
        sa.Column("results_sha256", sa.Text(), nullable=False),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.Column("report_sha256", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double().with_variant(sa.REAL(), "sqlite"), nullable=False),
        sa.PrimaryKeyConstraint("campaign_id", name="pk_benchmark_campaign_reports"),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["benchmark_campaigns.campaign_id"],
            name="fk_benchmark_campaign_reports_campaign_id",
        ),
    )


def downgrade() -> None:
    op.drop_table("benchmark_campaign_reports")
