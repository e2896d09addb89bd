"""Index campaigns in listing order: ``CampaignService.list()`` pages by (created_at, id).

Without it, every page of ``campaign list`` sorts the whole campaigns table.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "benchmark_campaigns_created", "benchmark_campaigns", ["created_at", "campaign_id"]
    )


def downgrade() -> None:
    op.drop_index("benchmark_campaigns_created", table_name="benchmark_campaigns")
