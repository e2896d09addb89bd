"""PostgreSQL: one index, not two, keeps a campaign's items unique and in order.

The unique constraint on (campaign, locale, case key) and the items-in-order
index of revision 0011 hold the same keys, in the database's collation and in
code-point order ("C"). Every status change of an item wrote an entry in both.
PostgreSQL's deterministic collations call two texts equal only when their
bytes are, as "C" does, so the in-order index, made unique, refuses exactly
the duplicates the constraint refused: the constraint goes, and each claim and
each completion writes one index entry less (and a campaign's items take one
index less on disk). SQLite keeps its unique constraint, whose BINARY order
already is code-point order.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TABLE = "benchmark_campaign_work"
IN_ORDER = "benchmark_campaign_items_in_order"
UNIQUE = "uq_benchmark_campaign_work_campaign_id"
KEYS = '(campaign_id, target_locale COLLATE "C", suite_case_key COLLATE "C")'


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP INDEX {IN_ORDER}")
    op.execute(f"CREATE UNIQUE INDEX {IN_ORDER} ON {TABLE} {KEYS}")
    op.drop_constraint(UNIQUE, TABLE, type_="unique")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_unique_constraint(UNIQUE, TABLE, ["campaign_id", "target_locale", "suite_case_key"])
    op.execute(f"DROP INDEX {IN_ORDER}")
    op.execute(f"CREATE INDEX {IN_ORDER} ON {TABLE} {KEYS}")
