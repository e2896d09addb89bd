"""Legacy schema v1: campaigns, their work items and the ready index.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATUS_CHECK = "status IN ('pending', 'leased', 'retry_wait', 'succeeded', 'failed')"


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "benchmark_campaigns",
        sa.Column("campaign_id", sa.Text(), nullable=False),
        sa.Column("policy_sha256", sa.Text(), nullable=False),
        sa.Column("suite_sha256", sa.Text(), nullable=False),
        sa.Column("work_count", sa.Integer(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        sa.PrimaryKeyConstraint("campaign_id", name="pk_benchmark_campaigns"),
        sa.CheckConstraint("work_count > 0", name=op.f("ck_benchmark_campaigns_work_count")),
    )
    op.create_table(
        "benchmark_campaign_work",
        sa.Column("work_id", sa.Text(), nullable=False),
        sa.Column("campaign_id", sa.Text(), nullable=False),
        sa.Column("target_locale", sa.Text(), nullable=False),
        sa.Column("suite_case_key", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", epoch_seconds(), nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_token", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", epoch_seconds(), nullable=True),
        sa.Column("last_error_code", sa.Text(), nullable=True),
        sa.Column("last_error_detail_hash", sa.Text(), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("result_sha256", sa.Text(), nullable=True),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        sa.PrimaryKeyConstraint("work_id", name="pk_benchmark_campaign_work"),
        sa.CheckConstraint(STATUS_CHECK, name=op.f("ck_benchmark_campaign_work_status")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_benchmark_campaign_work_attempts")),
        sa.CheckConstraint(
            "max_attempts BETWEEN 1 AND 20", name=op.f("ck_benchmark_campaign_work_max_attempts")
        ),
        sa.UniqueConstraint(
            "campaign_id",
            "target_locale",
            "suite_case_key",
            name="uq_benchmark_campaign_work_campaign_id",
        ),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["benchmark_campaigns.campaign_id"],
            name="fk_benchmark_campaign_work_campaign_id",
        ),
    )
    op.create_index(
        "benchmark_campaign_ready",
        "benchmark_campaign_work",
        ["campaign_id", "status", "next_attempt_at", "target_locale", "suite_case_key"],
    )


def downgrade() -> None:
    op.drop_index("benchmark_campaign_ready", table_name="benchmark_campaign_work")
    op.drop_table("benchmark_campaign_work")
    op.drop_table("benchmark_campaigns")
