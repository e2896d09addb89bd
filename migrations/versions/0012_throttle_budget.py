"""A throttled call costs an item no attempt, within a throttle budget.

- ``benchmark_campaign_work.throttles`` and ``max_throttles`` (default 100): an
  evaluator that raises ``Throttled`` (the model's provider said 429) hands its
  item back, due after the provider's ``Retry-After``, without spending an
  attempt; each such hand-back counts one throttle, and once they reach
  ``max_throttles`` a throttle counts as an ordinary retryable failure.
- ``benchmark_campaign_attempts.outcome`` allows ``throttled``: the attempt
  history records every throttled attempt.

Existing rows start with no throttle counted.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

DEFAULT_MAX_THROTTLES = 100
CHECK = "ck_benchmark_campaign_attempts_outcome"
BEFORE = ("succeeded", "failed", "retry_scheduled", "lease_expired", "released")
AFTER = (*BEFORE, "throttled")


def _one_of(values: tuple[str, ...]) -> str:
    return "outcome IN (" + ", ".join(repr(value) for value in values) + ")"


def _outcomes(values: tuple[str, ...]) -> None:
    # SQLite cannot alter a CHECK: the batch copies the table (its rows, indexes, keys).
    with op.batch_alter_table("benchmark_campaign_attempts", recreate="auto") as batch:
        batch.drop_constraint(op.f(CHECK), type_="check")
        batch.create_check_constraint(op.f(CHECK), _one_of(values))


def upgrade() -> None:
    with op.batch_alter_table("benchmark_campaign_work", recreate="never") as batch:
        batch.add_column(
            sa.Column("throttles", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        batch.add_column(
            sa.Column(
                "max_throttles",
                sa.Integer(),
                server_default=sa.text(str(DEFAULT_MAX_THROTTLES)),
                nullable=False,
            )
        )
    _outcomes(AFTER)


def downgrade() -> None:
    attempts = sa.table("benchmark_campaign_attempts", sa.column("outcome", sa.Text()))
    # A throttled attempt was handed back: the nearest older outcome is a released one.
    op.execute(
        attempts.update().where(attempts.c.outcome == "throttled").values(outcome="released")
    )
    _outcomes(BEFORE)
    with op.batch_alter_table("benchmark_campaign_work", recreate="never") as batch:
        batch.drop_column("max_throttles")
        batch.drop_column("throttles")
