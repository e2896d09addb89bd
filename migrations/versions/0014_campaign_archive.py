"""What a finished campaign keeps once it is archived (its item rows dropped).

- ``benchmark_campaigns.archived_at``: when ``CampaignService.archive`` dropped
  the campaign's items, attempt history and claim log (``NULL``: never). The
  report, its state, the policy and the suite stay.
- ``archived_items``: how many items the archive dropped (the work count).
- ``archived_results_sha256``: the digest of the ordered result digests the
  audit verified before they were dropped (what the report is bound to).
- ``archived_summary_json``: per locale and overall, items, succeeded, passed,
  pass rate and mean score of the dropped results (canonical JSON), computed at
  the report's pass score.
- ``archived_seal``: sha256 binding the facts above to the kept report's
  sha256, which ``verify`` re-checks once the results it could rebuild the
  report from are gone.

Existing campaigns are not archived. A downgrade is refused while a campaign is
archived: the older schema has no way to say that its items are gone.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.add_column(sa.Column("archived_at", epoch_seconds(), nullable=True))
        batch.add_column(sa.Column("archived_items", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("archived_results_sha256", sa.Text(), nullable=True))
        batch.add_column(sa.Column("archived_summary_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("archived_seal", sa.Text(), nullable=True))


def downgrade() -> None:
    campaigns = sa.table("benchmark_campaigns", sa.column("archived_at", epoch_seconds()))
    archived = (
        op.get_bind()
        .execute(
            sa.select(sa.func.count())
            .select_from(campaigns)
            .where(campaigns.c.archived_at.is_not(None))
        )
        .scalar_one()
    )
    if archived:
        raise RuntimeError(
            f"{archived} campaign(s) are archived (their items were dropped): revision 0013 "
            "cannot represent them; delete them (benchledger campaign delete) first"
        )
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.drop_column("archived_seal")
        batch.drop_column("archived_summary_json")
        batch.drop_column("archived_results_sha256")
        batch.drop_column("archived_items")
        batch.drop_column("archived_at")
