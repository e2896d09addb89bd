"""Facts the cheap reads need on the campaign row, the last integrity audit, result seals.

- ``benchmark_campaigns.max_attempts``: the campaign's attempt budget, so
  ``status()`` and ``health()`` check the report state against the campaign
  row instead of aggregating every work item's ``max_attempts``. Filled from
  the largest of the campaign's work items' (else its report state's).
- ``benchmark_campaigns.verified_at``, ``verified_ok``, ``verified_problems``:
  when ``CampaignService.verify()`` last audited the campaign and what it
  found (``NULL`` until the first audit).
- ``benchmark_campaign_work.result_seal``: sha256 binding a succeeded item's
  work id, attempt count, attempt budget and result sha256, written when the
  result is recorded; the audit recomputes it, so an attempt count edited
  behind the ledger's back is caught. Filled for every stored result.
- ``benchmark_campaign_errors``: a partial index of the items that carry an
  error code, so error counts read only those.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

HAS_ERROR = "last_error_code IS NOT NULL"
SEAL_BATCH = 1000


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def result_seal(work_id: str, attempts: int, max_attempts: int, result_sha256: str) -> str:
    """Version 1 of the seal (kept here as it was: a later change of the library's
    formula must not change what this revision wrote)."""
    text = f"benchledger-result-seal-v1:{work_id}:{attempts}:{max_attempts}:{result_sha256}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


campaigns = sa.table(
    "benchmark_campaigns",
    sa.column("campaign_id", sa.Text()),
    sa.column("max_attempts", sa.Integer()),
)
work = sa.table(
    "benchmark_campaign_work",
    sa.column("work_id", sa.Text()),
    sa.column("campaign_id", sa.Text()),
    sa.column("status", sa.Text()),
    sa.column("attempts", sa.Integer()),
    sa.column("max_attempts", sa.Integer()),
    sa.column("result_sha256", sa.Text()),
    sa.column("result_seal", sa.Text()),
)
state = sa.table(
    "benchmark_campaign_report_state",
    sa.column("campaign_id", sa.Text()),
    sa.column("max_attempts", sa.Integer()),
)


def _fill_max_attempts() -> None:
    items = (
        sa.select(sa.func.max(work.c.max_attempts))
        .where(work.c.campaign_id == campaigns.c.campaign_id)
        .scalar_subquery()
    )
    report = (
        sa.select(state.c.max_attempts)
        .where(state.c.campaign_id == campaigns.c.campaign_id)
        .scalar_subquery()
    )
    op.execute(campaigns.update().values(max_attempts=sa.func.coalesce(items, report, 1)))


def _fill_seals() -> None:
    connection = op.get_bind()
    after = ""
    while True:
        rows = connection.execute(
            sa.select(work.c.work_id, work.c.attempts, work.c.max_attempts, work.c.result_sha256)
            .where(
                work.c.status == "succeeded",
                work.c.result_sha256.is_not(None),
                work.c.work_id > after,
            )
            .order_by(work.c.work_id)
            .limit(SEAL_BATCH)
        ).all()
        if not rows:
            return
        connection.execute(
            work.update()
            .where(work.c.work_id == sa.bindparam("key"))
            .values(result_seal=sa.bindparam("seal")),
            [
                {
                    "key": row.work_id,
                    "seal": result_seal(
                        str(row.work_id),
                        int(row.attempts),
                        int(row.max_attempts),
                        str(row.result_sha256),
                    ),
                }
                for row in rows
            ],
        )
        after = rows[-1].work_id


def upgrade() -> None:
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        # NOT NULL through a default, so that SQLite adds it without rebuilding the
        # table (its rows are referenced by every work item); the fill replaces it.
        batch.add_column(
            sa.Column("max_attempts", sa.Integer(), server_default=sa.text("1"), nullable=False)
        )
        batch.add_column(sa.Column("verified_at", epoch_seconds(), nullable=True))
        batch.add_column(sa.Column("verified_ok", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("verified_problems", sa.Integer(), nullable=True))
    with op.batch_alter_table("benchmark_campaign_work", recreate="never") as batch:
        batch.add_column(sa.Column("result_seal", sa.Text(), nullable=True))
    op.create_index(
        "benchmark_campaign_errors",
        "benchmark_campaign_work",
        ["campaign_id", "last_error_code"],
        sqlite_where=sa.text(HAS_ERROR),
        postgresql_where=sa.text(HAS_ERROR),
    )
    _fill_max_attempts()
    _fill_seals()


def downgrade() -> None:
    op.drop_index("benchmark_campaign_errors", table_name="benchmark_campaign_work")
    with op.batch_alter_table("benchmark_campaign_work", recreate="never") as batch:
        batch.drop_column("result_seal")
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.drop_column("verified_problems")
        batch.drop_column("verified_ok")
        batch.drop_column("verified_at")
        batch.drop_column("max_attempts")
