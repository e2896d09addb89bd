"""Legacy schema v3: the report's own lease state, populated from existing campaigns.

Every campaign gets one state row: ``succeeded`` with one attempt when its report
exists, else ``pending`` with none; ``max_attempts`` is the smallest of its work
items', and timestamps come from the campaign (the legacy store's population rule).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STATUS_CHECK = "status IN ('pending', 'leased', 'retry_wait', 'succeeded', 'failed')"


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "benchmark_campaign_report_state",
        sa.Column("campaign_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", epoch_seconds(), nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_token", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", epoch_seconds(), nullable=True),
        sa.Column("last_error_code", sa.Text(), nullable=True),
        sa.Column("last_error_detail_hash", sa.Text(), nullable=True),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        sa.PrimaryKeyConstraint("campaign_id", name="pk_benchmark_campaign_report_state"),
        sa.CheckConstraint(STATUS_CHECK, name=op.f("ck_benchmark_campaign_report_state_status")),
        sa.CheckConstraint(
            "attempts >= 0", name=op.f("ck_benchmark_campaign_report_state_attempts")
        ),
        sa.CheckConstraint(
            "max_attempts BETWEEN 1 AND 20",
            name=op.f("ck_benchmark_campaign_report_state_max_attempts"),
        ),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["benchmark_campaigns.campaign_id"],
            name="fk_benchmark_campaign_report_state_campaign_id",
        ),
    )

    campaigns = sa.table(
        "benchmark_campaigns",
        sa.column("campaign_id"),
        sa.column("created_at"),
        sa.column("updated_at"),
    )
    work = sa.table("benchmark_campaign_work", sa.column("campaign_id"), sa.column("max_attempts"))
    reports = sa.table("benchmark_campaign_reports", sa.column("campaign_id"))
    state = sa.table(
        "benchmark_campaign_report_state",
        sa.column("campaign_id"),
        sa.column("status"),
        sa.column("attempts"),
        sa.column("max_attempts"),
        sa.column("next_attempt_at"),
        sa.column("created_at"),
        sa.column("updated_at"),
    )
    has_report = reports.c.campaign_id.is_not(None)
    population = (
        sa.select(
            campaigns.c.campaign_id,
            sa.case((has_report, "succeeded"), else_="pending"),
            sa.case((has_report, 1), else_=0),
            sa.func.min(work.c.max_attempts),
            campaigns.c.updated_at,
            campaigns.c.created_at,
            campaigns.c.updated_at,
        )
        .select_from(
            campaigns.join(work, work.c.campaign_id == campaigns.c.campaign_id).outerjoin(
                reports, reports.c.campaign_id == campaigns.c.campaign_id
            )
        )
        .group_by(
            campaigns.c.campaign_id,
            campaigns.c.created_at,
            campaigns.c.updated_at,
            reports.c.campaign_id,
        )
    )
    op.execute(
        state.insert().from_select(
            [
                "campaign_id",
                "status",
                "attempts",
                "max_attempts",
                "next_attempt_at",
                "created_at",
                "updated_at",
            ],
            population,
        )
    )


def downgrade() -> None:
    op.drop_table("benchmark_campaign_report_state")
