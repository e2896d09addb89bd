"""Experiment studies: studies, members, reservations, candidates, receipts and audit, plus
the tables of the default adapters (run registry, material catalog, evidence, access).

The audit log is append-only: triggers refuse UPDATE and DELETE on both backends.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

DIMENSIONS = ("attempt_slots", "admitted_wall_seconds", "retained_bytes", "peak_staging_bytes")
TERMINAL_RUN_STATES = ("completed", "failed", "cancelled", "interrupted")
UNSETTLED = "state <> 'settled'"


def epoch_seconds() -> sa.types.TypeEngine[float]:
    return sa.Double().with_variant(sa.REAL(), "sqlite")


def one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def all_at_least(prefix: str, minimum: int) -> str:
    return " AND ".join(f"{prefix}{name} >= {minimum}" for name in DIMENSIONS)


def budget_columns(prefix: str) -> list[sa.Column[int]]:
    return [sa.Column(f"{prefix}{name}", sa.BigInteger(), nullable=False) for name in DIMENSIONS]


def check(table: str, name: str, sql: str) -> sa.CheckConstraint:
    return sa.CheckConstraint(sql, name=op.f(f"ck_{table}_{name}"))


def pk(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*columns, name=op.f(f"pk_{table}"))


def fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [target], name=op.f(f"fk_{table}_{column}"))


def unique(name: str, *columns: str) -> sa.UniqueConstraint:
    return sa.UniqueConstraint(*columns, name=op.f(name))


APPEND_ONLY_SQLITE = (
    "CREATE TRIGGER study_audit_log_no_{verb} BEFORE {event} ON study_audit_log "
    "BEGIN SELECT RAISE(ABORT, 'study_audit_log is append-only'); END"
)
APPEND_ONLY_PG_FUNCTION = """
CREATE FUNCTION study_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'study_audit_log is append-only';
END
$$
"""
APPEND_ONLY_PG_TRIGGER = (
    "CREATE TRIGGER study_audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE "
    "ON study_audit_log FOR EACH STATEMENT EXECUTE FUNCTION study_audit_log_append_only()"
)


def upgrade() -> None:
    t = "study_selection_policies"
    op.create_table(
        t,
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("policy_json", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        pk(t, "sha256"),
    )

    t = "studies"
    charged = " AND ".join(
        f"charged_{name} >= 0 AND charged_{name} <= limit_{name}" for name in DIMENSIONS
    )
    op.create_table(
        t,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("admission_epoch", sa.BigInteger(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("membership_revision", sa.BigInteger(), nullable=False),
        sa.Column("policy_sha256", sa.Text(), nullable=False),
        *budget_columns("limit_"),
        *budget_columns("charged_"),
        sa.Column("stop_receipt_id", sa.Text(), nullable=True),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        pk(t, "id"),
        fk(t, "policy_sha256", "study_selection_policies.sha256"),
        check(t, "state", one_of("state", ("draft", "open", "stopping", "stopped", "unknown"))),
        check(t, "counters", "admission_epoch >= 0 AND revision >= 1 AND membership_revision >= 1"),
        check(t, "limits", all_at_least("limit_", 1)),
        check(t, "charged", charged),
    )

    t = "study_trials"
    op.create_table(
        t,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("study_id", sa.Text(), nullable=False),
        sa.Column("material_sha256", sa.Text(), nullable=False),
        sa.Column("replicate", sa.BigInteger(), nullable=False),
        sa.Column("membership_revision", sa.BigInteger(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        pk(t, "id"),
        fk(t, "study_id", "studies.id"),
        check(t, "numbers", "replicate >= 0 AND membership_revision >= 2"),
        unique("uq_study_trials_material", "study_id", "material_sha256", "replicate"),
        unique("uq_study_trials_membership", "study_id", "membership_revision"),
    )

    t = "study_reservations"
    op.create_table(
        t,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("study_id", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("admission_epoch", sa.BigInteger(), nullable=False),
        sa.Column("request_key", sa.Text(), nullable=False),
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("trial_id", sa.Text(), nullable=False),
        sa.Column("parent_run_id", sa.Text(), nullable=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("request_sha256", sa.Text(), nullable=False),
        sa.Column("material_sha256", sa.Text(), nullable=False),
        *budget_columns("envelope_"),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        sa.Column("settled_at", epoch_seconds(), nullable=True),
        pk(t, "id"),
        fk(t, "study_id", "studies.id"),
        fk(t, "trial_id", "study_trials.id"),
        check(t, "state", one_of("state", ("reserved", "running", "settled", "unknown"))),
        check(t, "envelope", all_at_least("envelope_", 1)),
        check(t, "settled", "(state = 'settled') = (settled_at IS NOT NULL)"),
        check(t, "numbers", "position >= 1 AND admission_epoch >= 1"),
        unique("uq_study_reservations_request", "study_id", "request_key"),
        unique("uq_study_reservations_position", "study_id", "position"),
        unique("uq_study_reservations_run_id", "run_id"),
    )
    op.create_index(
        op.f("ix_study_reservations_unsettled"),
        t,
        ["study_id", "position"],
        sqlite_where=sa.text(UNSETTLED),
        postgresql_where=sa.text(UNSETTLED),
    )
    op.create_index(op.f("ix_study_reservations_trial"), t, ["trial_id", "run_id"])

    t = "study_candidates"
    op.create_table(
        t,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("study_id", sa.Text(), nullable=False),
        sa.Column("trial_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("checkpoint_sha256", sa.Text(), nullable=False),
        sa.Column("evaluation_sha256", sa.Text(), nullable=False),
        sa.Column("policy_sha256", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("limitations_json", sa.Text(), nullable=False),
        sa.Column("candidate_sha256", sa.Text(), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        pk(t, "id"),
        fk(t, "study_id", "studies.id"),
        fk(t, "trial_id", "study_trials.id"),
        fk(t, "run_id", "study_reservations.run_id"),
        fk(t, "policy_sha256", "study_selection_policies.sha256"),
        check(t, "decision", "decision = 'diagnostic'"),
    )
    op.create_index(op.f("ix_study_candidates_run"), t, ["run_id", "id"])

    t = "study_operation_receipts"
    op.create_table(
        t,
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("request_key", sa.Text(), nullable=False),
        sa.Column("request_sha256", sa.Text(), nullable=False),
        sa.Column("study_id", sa.Text(), nullable=True),
        sa.Column("receipt_json", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        pk(t, "actor_id", "operation", "request_key"),
    )

    t = "study_audit_log"
    op.create_table(
        t,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("subject_id", sa.Text(), nullable=False),
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("details_json", sa.Text(), nullable=False),
        sa.Column("recorded_at", epoch_seconds(), nullable=False),
        pk(t, "id"),
    )
    op.create_index(op.f("ix_study_audit_log_subject"), t, ["subject_id", "id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(APPEND_ONLY_PG_FUNCTION)
        op.execute(APPEND_ONLY_PG_TRIGGER)
    else:
        op.execute(APPEND_ONLY_SQLITE.format(verb="update", event="UPDATE"))
        op.execute(APPEND_ONLY_SQLITE.format(verb="delete", event="DELETE"))

    # -- default adapters -------------------------------------------------------------
    t = "study_access_roles"
    op.create_table(
        t,
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("granted_by", sa.Text(), nullable=False),
        sa.Column("granted_at", epoch_seconds(), nullable=False),
        pk(t, "actor_id"),
        check(t, "role", one_of("role", ("owner", "editor", "operator", "viewer"))),
    )

    t = "study_execution_grants"
    op.create_table(
        t,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("study_id", sa.Text(), nullable=False),
        sa.Column("trial_id", sa.Text(), nullable=False),
        sa.Column("material_sha256", sa.Text(), nullable=False),
        sa.Column("consumer_actor_id", sa.Text(), nullable=False),
        sa.Column("granted_by", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("expires_at", epoch_seconds(), nullable=False),
        sa.Column("consumed_at", epoch_seconds(), nullable=True),
        sa.Column("consumed_run_id", sa.Text(), nullable=True),
        pk(t, "id"),
        check(t, "consumed", "(consumed_at IS NULL) = (consumed_run_id IS NULL)"),
        check(t, "expiry", "expires_at > created_at"),
    )

    t = "study_runs"
    run_states = (
        "queued",
        "running",
        "cancelling",
        "completed",
        "failed",
        "cancelled",
        "interrupted",
        "unknown",
    )
    op.create_table(
        t,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("run_key", sa.Text(), nullable=False),
        sa.Column("request_sha256", sa.Text(), nullable=False),
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("study_id", sa.Text(), nullable=False),
        sa.Column("trial_id", sa.Text(), nullable=False),
        sa.Column("material_sha256", sa.Text(), nullable=False),
        sa.Column("parent_run_id", sa.Text(), nullable=True),
        sa.Column("approval_id", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("custody_ceased", sa.Boolean(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        sa.Column("updated_at", epoch_seconds(), nullable=False),
        pk(t, "id"),
        check(t, "state", one_of("state", run_states)),
        check(t, "ceased", f"NOT custody_ceased OR {one_of('state', TERMINAL_RUN_STATES)}"),
        unique("uq_study_runs_run_key", "run_key"),
    )
    op.create_index(op.f("ix_study_runs_state"), t, ["state"])

    t = "study_materials"
    op.create_table(
        t,
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("trainer_id", sa.Text(), nullable=False),
        sa.Column("trainer_kind", sa.Text(), nullable=False),
        *budget_columns("envelope_"),
        sa.Column("recipe_json", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        pk(t, "sha256"),
        check(t, "trainer_kind", one_of("trainer_kind", ("builtin", "external"))),
        check(t, "envelope", all_at_least("envelope_", 1)),
    )

    t = "study_metric_definitions"
    op.create_table(
        t,
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("metric_id", sa.Text(), nullable=False),
        sa.Column("definition_json", sa.Text(), nullable=False),
        sa.Column("created_at", epoch_seconds(), nullable=False),
        pk(t, "sha256"),
    )

    t = "study_run_evidence"
    op.create_table(
        t,
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("producer_material_sha256", sa.Text(), nullable=False),
        sa.Column("evaluation_sha256", sa.Text(), nullable=True),
        sa.Column("evidence_sha256", sa.Text(), nullable=False),
        sa.Column("recorded_at", epoch_seconds(), nullable=False),
        pk(t, "run_id"),
        check(t, "state", one_of("state", ("verified", "unverified"))),
    )

    t = "study_run_metrics"
    op.create_table(
        t,
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("definition_sha256", sa.Text(), nullable=False),
        pk(t, "run_id", "position"),
        fk(t, "run_id", "study_run_evidence.run_id"),
        fk(t, "definition_sha256", "study_metric_definitions.sha256"),
        unique("uq_study_run_metrics_definition", "run_id", "definition_sha256"),
    )

    t = "study_run_checkpoints"
    op.create_table(
        t,
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("checkpoint_sha256", sa.Text(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("selected", sa.Boolean(), nullable=False),
        pk(t, "run_id", "position"),
        fk(t, "run_id", "study_run_evidence.run_id"),
        check(t, "step", "step >= 0"),
        unique("uq_study_run_checkpoints_sha", "run_id", "checkpoint_sha256"),
    )

    t = "study_run_observations"
    op.create_table(
        t,
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("checkpoint_sha256", sa.Text(), nullable=False),
        sa.Column("metric_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        pk(t, "run_id", "position"),
        fk(t, "run_id", "study_run_evidence.run_id"),
        check(t, "state", one_of("state", ("observed", "missing", "invalid"))),
        check(
            t,
            "value",
            "(state = 'observed' AND value IS NOT NULL) OR (state <> 'observed' AND value IS NULL)",
        ),
        unique("uq_study_run_observations_metric", "run_id", "checkpoint_sha256", "metric_id"),
    )

    t = "study_run_capabilities"
    op.create_table(
        t,
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("coverage", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("capability", sa.Text(), nullable=False),
        pk(t, "run_id", "coverage", "position"),
        fk(t, "run_id", "study_run_evidence.run_id"),
        check(t, "coverage", one_of("coverage", ("required", "optional", "omitted"))),
        unique("uq_study_run_capabilities_name", "run_id", "coverage", "capability"),
    )


def downgrade() -> None:
    for table in (
        "study_run_capabilities",
        "study_run_observations",
        "study_run_checkpoints",
        "study_run_metrics",
        "study_run_evidence",
        "study_metric_definitions",
        "study_materials",
    ):
        op.drop_table(table)
    op.drop_index(op.f("ix_study_runs_state"), table_name="study_runs")
    op.drop_table("study_runs")
    op.drop_table("study_execution_grants")
    op.drop_table("study_access_roles")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER study_audit_log_append_only ON study_audit_log")
        op.execute("DROP FUNCTION study_audit_log_append_only()")
    else:
        op.execute("DROP TRIGGER study_audit_log_no_update")
        op.execute("DROP TRIGGER study_audit_log_no_delete")
    op.drop_index(op.f("ix_study_audit_log_subject"), table_name="study_audit_log")
    op.drop_table("study_audit_log")
    op.drop_table("study_operation_receipts")
    op.drop_index(op.f("ix_study_candidates_run"), table_name="study_candidates")
    op.drop_table("study_candidates")
    op.drop_index(op.f("ix_study_reservations_trial"), table_name="study_reservations")
    op.drop_index(op.f("ix_study_reservations_unsettled"), table_name="study_reservations")
    op.drop_table("study_reservations")
    op.drop_table("study_trials")
    op.drop_table("studies")
    op.drop_table("study_selection_policies")
