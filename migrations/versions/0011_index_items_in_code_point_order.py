"""PostgreSQL: an index of each campaign's items in code-point order.

Results pages, exports, comparisons and the integrity audit read a campaign's
items in (locale, case key) code-point order, which PostgreSQL spells
``COLLATE "C"``. The unique index on (campaign, locale, case key) follows the
database's own collation, so those reads sorted the whole campaign for every
page (an export of 100,000 items read it 100 times). This index serves them
in order. SQLite needs none: its unique index's BINARY order is that order.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

NAME = "benchmark_campaign_items_in_order"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE INDEX {NAME} ON benchmark_campaign_work "
            '(campaign_id, target_locale COLLATE "C", suite_case_key COLLATE "C")'
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP INDEX {NAME}")
