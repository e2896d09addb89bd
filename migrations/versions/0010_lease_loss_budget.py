"""A lease lost to a dead holder costs the item (or the report) no attempt.

- ``benchmark_campaign_work.lease_losses`` and ``max_lease_losses`` (default
  10): a lease that ran out unrenewed (its worker crashed or was killed) gives
  its attempt back and counts one loss instead; at the budget the item fails
  with ``benchmark.campaign.lease_losses_spent``, so a case that kills its
  worker every time still ends.
- ``benchmark_campaign_report_state.lease_losses`` and ``max_lease_losses``:
  the same for the report's finalization lease.

Existing rows start with no loss counted.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

DEFAULT_MAX_LEASE_LOSSES = 10
TABLES = ("benchmark_campaign_work", "benchmark_campaign_report_state")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, recreate="never") as batch:
            batch.add_column(
                sa.Column("lease_losses", sa.Integer(), server_default=sa.text("0"), nullable=False)
            )
            batch.add_column(
                sa.Column(
                    "max_lease_losses",
                    sa.Integer(),
                    server_default=sa.text(str(DEFAULT_MAX_LEASE_LOSSES)),
                    nullable=False,
                )
            )


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table, recreate="never") as batch:
            batch.drop_column("max_lease_losses")
            batch.drop_column("lease_losses")
