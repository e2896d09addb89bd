"""Campaigns that say what they measure, and every attempt's history.

- ``benchmark_campaigns.name``: an optional human name (metadata, not part of
  the policy's identity).
- ``benchmark_campaigns.candidate_provider_id``, ``candidate_model_id``,
  ``candidate_model_version``: the candidate named by the campaign's policy,
  copied so listings show and filter by it; filled here from each stored
  policy (a legacy campaign whose policy is not registered keeps ``NULL``).
- ``benchmark_campaign_work.leased_at``: when the current lease was granted;
  ``history_from``: the attempts an item had when its history began (an
  existing item's count here, 0 for every item created later), so the audit
  knows which attempts must have a row.
- ``benchmark_campaign_attempts``: one append-only row per attempt (worker,
  claimed and finished at, outcome, error code, the evaluator's duration),
  indexed by item (in the order recorded) and by campaign and finish time.
  Items finished before this revision have no history: none is invented.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OUTCOMES = ("succeeded", "failed", "retry_scheduled", "lease_expired", "released")
CANDIDATE = ("candidate_provider_id", "candidate_model_id", "candidate_model_version")

campaigns = sa.table(
    "benchmark_campaigns",
    sa.column("campaign_id", sa.Text()),
    sa.column("policy_sha256", sa.Text()),
    *(sa.column(name, sa.Text()) for name in CANDIDATE),
)
policies = sa.table(
    "benchmark_campaign_policies",
    sa.column("policy_sha256", sa.Text()),
    sa.column("policy_json", sa.Text()),
)


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def _fill_candidates() -> None:
    connection = op.get_bind()
    stored = connection.execute(
        sa.select(policies.c.policy_sha256, policies.c.policy_json).where(
            policies.c.policy_sha256.in_(sa.select(campaigns.c.policy_sha256))
        )
    ).all()
    fill = (
        campaigns.update()
        .where(campaigns.c.policy_sha256 == sa.bindparam("sha"))
        .values({name: sa.bindparam(name) for name in CANDIDATE})
    )
    rows = []
    for sha, text in stored:
        policy = json.loads(text)
        rows.append({"sha": sha, **{name: policy.get(name) for name in CANDIDATE}})
    if rows:
        connection.execute(fill, rows)


def upgrade() -> None:
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        batch.add_column(sa.Column("name", sa.Text(), nullable=True))
        for name in CANDIDATE:
            batch.add_column(sa.Column(name, sa.Text(), nullable=True))
    with op.batch_alter_table("benchmark_campaign_work", recreate="never") as batch:
        batch.add_column(sa.Column("leased_at", epoch_seconds(), nullable=True))
        batch.add_column(
            sa.Column("history_from", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
    work = sa.table(
        "benchmark_campaign_work",
        sa.column("attempts", sa.Integer()),
        sa.column("history_from", sa.Integer()),
    )
    op.execute(work.update().values(history_from=work.c.attempts))
    op.create_table(
        "benchmark_campaign_attempts",
        sa.Column("attempt_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("campaign_id", sa.Text(), nullable=False),
        sa.Column("work_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Text(), nullable=True),
        sa.Column("claimed_at", epoch_seconds(), nullable=True),
        sa.Column("finished_at", epoch_seconds(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("duration_seconds", epoch_seconds(), nullable=True),
        sa.CheckConstraint(
            "outcome IN (" + ", ".join(repr(value) for value in OUTCOMES) + ")",
            name="outcome",
        ),
        sa.CheckConstraint("attempt >= 1", name="attempt"),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["benchmark_campaigns.campaign_id"],
            name="fk_benchmark_campaign_attempts_campaign_id",
        ),
        sa.ForeignKeyConstraint(
            ["work_id"],
            ["benchmark_campaign_work.work_id"],
            name="fk_benchmark_campaign_attempts_work_id",
        ),
        sa.PrimaryKeyConstraint("attempt_id", name="pk_benchmark_campaign_attempts"),
    )
    op.create_index(
        "benchmark_campaign_attempts_work",
        "benchmark_campaign_attempts",
        ["work_id", "attempt_id"],
    )
    op.create_index(
        "benchmark_campaign_attempts_finished",
        "benchmark_campaign_attempts",
        ["campaign_id", "finished_at"],
    )
    _fill_candidates()


def downgrade() -> None:
    op.drop_index("benchmark_campaign_attempts_work", table_name="benchmark_campaign_attempts")
    op.drop_index("benchmark_campaign_attempts_finished", table_name="benchmark_campaign_attempts")
    op.drop_table("benchmark_campaign_attempts")
    with op.batch_alter_table("benchmark_campaign_work", recreate="never") as batch:
        batch.drop_column("history_from")
        batch.drop_column("leased_at")
    with op.batch_alter_table("benchmark_campaigns", recreate="never") as batch:
        for name in reversed(CANDIDATE):
            batch.drop_column(name)
        batch.drop_column("name")
