"""Study tables (revision 0005): studies, members, reservations, candidates, receipts, audit,
and the tables of the default adapters (runs, materials, evidence, access).

The models match ``migrations/versions/0005_study_tables.py`` exactly; a schema
test compares them on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from benchledger.domain.study import DIMENSIONS, ReservationState, RunState, StudyState, TrainerKind
from benchledger.domain.study import TERMINAL_RUN_STATES as DOMAIN_TERMINAL_RUN_STATES
from benchledger.domain.study_evidence import EvidenceState, ObservationState
from benchledger.domain.study_rules import Role
from benchledger.models.base import Base, one_of

# The CHECK constraints below list the domain's vocabularies (tests/study/test_schema.py
# ties each to its StrEnum).
STUDY_STATES = tuple(state.value for state in StudyState)
RESERVATION_STATES = tuple(state.value for state in ReservationState)
RUN_STATES = tuple(state.value for state in RunState)
TERMINAL_RUN_STATES = tuple(
    state.value for state in RunState if state in DOMAIN_TERMINAL_RUN_STATES
)
ROLES = tuple(role.value for role in Role)
TRAINER_KINDS = tuple(kind.value for kind in TrainerKind)
EVIDENCE_STATES = tuple(state.value for state in EvidenceState)
OBSERVATION_STATES = tuple(state.value for state in ObservationState)
#: The fields of a run's ``CapabilityCoverage``.
COVERAGES = ("required", "optional", "omitted")
BUDGET_DIMENSIONS = DIMENSIONS

#: The audit log's key: a 64-bit identity, SQLite's rowid alias there.
AuditId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def all_at_least(prefix: str, minimum: int) -> str:
    return " AND ".join(f"{prefix}{name} >= {minimum}" for name in BUDGET_DIMENSIONS)


CHARGED_WITHIN_LIMITS = " AND ".join(
    f"charged_{name} >= 0 AND charged_{name} <= limit_{name}" for name in BUDGET_DIMENSIONS
)
SETTLED_CONSISTENT = "(state = 'settled') = (settled_at IS NOT NULL)"
#: The rows of ``ix_study_reservations_unsettled``: a study's few live reservations.
UNSETTLED = "state <> 'settled'"
CEASED_ONLY_TERMINAL = f"NOT custody_ceased OR {one_of('state', TERMINAL_RUN_STATES)}"
GRANT_CONSUMED = "(consumed_at IS NULL) = (consumed_run_id IS NULL)"
OBSERVED_VALUE = (
    "(state = 'observed' AND value IS NOT NULL) OR (state <> 'observed' AND value IS NULL)"
)


class StudyPolicyRow(Base):
    """A selection policy as canonical JSON, stored once per sha256."""

    __tablename__ = "study_selection_policies"

    sha256: Mapped[str] = mapped_column(primary_key=True)
    policy_json: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class StudyRow(Base):
    """A study's current revision; ``charged_*`` is the sum of its reservations' envelopes."""

    __tablename__ = "studies"
    __table_args__ = (
        sa.CheckConstraint(one_of("state", STUDY_STATES), name="state"),
        sa.CheckConstraint(
            "admission_epoch >= 0 AND revision >= 1 AND membership_revision >= 1",
            name="counters",
        ),
        sa.CheckConstraint(all_at_least("limit_", 1), name="limits"),
        sa.CheckConstraint(CHARGED_WITHIN_LIMITS, name="charged"),
    )

    id: Mapped[str] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column()
    state: Mapped[str] = mapped_column()
    admission_epoch: Mapped[int] = mapped_column(sa.BigInteger)
    revision: Mapped[int] = mapped_column(sa.BigInteger)
    membership_revision: Mapped[int] = mapped_column(sa.BigInteger)
    policy_sha256: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_selection_policies.sha256")
    )
    limit_attempt_slots: Mapped[int] = mapped_column(sa.BigInteger)
    limit_admitted_wall_seconds: Mapped[int] = mapped_column(sa.BigInteger)
    limit_retained_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    limit_peak_staging_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    charged_attempt_slots: Mapped[int] = mapped_column(sa.BigInteger)
    charged_admitted_wall_seconds: Mapped[int] = mapped_column(sa.BigInteger)
    charged_retained_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    charged_peak_staging_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    stop_receipt_id: Mapped[str | None] = mapped_column()
    created_by: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()


class TrialRow(Base):
    """An immutable member; ``membership_revision`` is the revision it joined at."""

    __tablename__ = "study_trials"
    __table_args__ = (
        sa.CheckConstraint("replicate >= 0 AND membership_revision >= 2", name="numbers"),
        sa.UniqueConstraint(
            "study_id", "material_sha256", "replicate", name="uq_study_trials_material"
        ),
        sa.UniqueConstraint("study_id", "membership_revision", name="uq_study_trials_membership"),
    )

    id: Mapped[str] = mapped_column(primary_key=True)
    study_id: Mapped[str] = mapped_column(sa.ForeignKey("studies.id"))
    material_sha256: Mapped[str] = mapped_column()
    replicate: Mapped[int] = mapped_column(sa.BigInteger)
    membership_revision: Mapped[int] = mapped_column(sa.BigInteger)
    created_at: Mapped[float] = mapped_column()


class ReservationRow(Base):
    """One admitted attempt's conservative charge (its material's envelope)."""

    __tablename__ = "study_reservations"
    __table_args__ = (
        sa.CheckConstraint(one_of("state", RESERVATION_STATES), name="state"),
        sa.CheckConstraint(all_at_least("envelope_", 1), name="envelope"),
        sa.CheckConstraint(SETTLED_CONSISTENT, name="settled"),
        sa.CheckConstraint("position >= 1 AND admission_epoch >= 1", name="numbers"),
        sa.UniqueConstraint("study_id", "request_key", name="uq_study_reservations_request"),
        sa.UniqueConstraint("study_id", "position", name="uq_study_reservations_position"),
        sa.UniqueConstraint("run_id", name="uq_study_reservations_run_id"),
        # Admission and reconciliation read only unsettled rows, never the settled history.
        sa.Index(
            "ix_study_reservations_unsettled",
            "study_id",
            "position",
            sqlite_where=sa.text(UNSETTLED),
            postgresql_where=sa.text(UNSETTLED),
        ),
        sa.Index("ix_study_reservations_trial", "trial_id", "run_id"),
    )

    id: Mapped[str] = mapped_column(primary_key=True)
    study_id: Mapped[str] = mapped_column(sa.ForeignKey("studies.id"))
    position: Mapped[int] = mapped_column(sa.BigInteger)
    admission_epoch: Mapped[int] = mapped_column(sa.BigInteger)
    request_key: Mapped[str] = mapped_column()
    actor_id: Mapped[str] = mapped_column()
    trial_id: Mapped[str] = mapped_column(sa.ForeignKey("study_trials.id"))
    parent_run_id: Mapped[str | None] = mapped_column()
    run_id: Mapped[str] = mapped_column()
    request_sha256: Mapped[str] = mapped_column()
    material_sha256: Mapped[str] = mapped_column()
    envelope_attempt_slots: Mapped[int] = mapped_column(sa.BigInteger)
    envelope_admitted_wall_seconds: Mapped[int] = mapped_column(sa.BigInteger)
    envelope_retained_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    envelope_peak_staging_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    state: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()
    settled_at: Mapped[float | None] = mapped_column()


class CandidateRow(Base):
    """A retained diagnostic candidate decision."""

    __tablename__ = "study_candidates"
    __table_args__ = (
        sa.CheckConstraint("decision = 'diagnostic'", name="decision"),
        sa.Index("ix_study_candidates_run", "run_id", "id"),
    )

    id: Mapped[str] = mapped_column(primary_key=True)
    study_id: Mapped[str] = mapped_column(sa.ForeignKey("studies.id"))
    trial_id: Mapped[str] = mapped_column(sa.ForeignKey("study_trials.id"))
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("study_reservations.run_id"))
    checkpoint_sha256: Mapped[str] = mapped_column()
    evaluation_sha256: Mapped[str] = mapped_column()
    policy_sha256: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_selection_policies.sha256")
    )
    decision: Mapped[str] = mapped_column()
    limitations_json: Mapped[str] = mapped_column()
    candidate_sha256: Mapped[str] = mapped_column()
    created_by: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class OperationReceiptRow(Base):
    """An idempotent write's receipt, bound to the sha256 of its request."""

    __tablename__ = "study_operation_receipts"

    actor_id: Mapped[str] = mapped_column(primary_key=True)
    operation: Mapped[str] = mapped_column(primary_key=True)
    request_key: Mapped[str] = mapped_column(primary_key=True)
    request_sha256: Mapped[str] = mapped_column()
    study_id: Mapped[str | None] = mapped_column()
    receipt_json: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class AuditRow(Base):
    """Append-only (database triggers refuse UPDATE and DELETE)."""

    __tablename__ = "study_audit_log"
    __table_args__ = (sa.Index("ix_study_audit_log_subject", "subject_id", "id"),)

    id: Mapped[int] = mapped_column(AuditId, primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column()
    subject_id: Mapped[str] = mapped_column()
    actor_id: Mapped[str] = mapped_column()
    details_json: Mapped[str] = mapped_column()
    recorded_at: Mapped[float] = mapped_column()


# -- default adapters ---------------------------------------------------------------------


class AccessRoleRow(Base):
    __tablename__ = "study_access_roles"
    __table_args__ = (sa.CheckConstraint(one_of("role", ROLES), name="role"),)

    actor_id: Mapped[str] = mapped_column(primary_key=True)
    role: Mapped[str] = mapped_column()
    granted_by: Mapped[str] = mapped_column()
    granted_at: Mapped[float] = mapped_column()


class ExecutionGrantRow(Base):
    """An owner's single-use, time-limited execution grant for one trial material."""

    __tablename__ = "study_execution_grants"
    __table_args__ = (
        sa.CheckConstraint(GRANT_CONSUMED, name="consumed"),
        sa.CheckConstraint("expires_at > created_at", name="expiry"),
    )

    id: Mapped[str] = mapped_column(primary_key=True)
    study_id: Mapped[str] = mapped_column()
    trial_id: Mapped[str] = mapped_column()
    material_sha256: Mapped[str] = mapped_column()
    consumer_actor_id: Mapped[str] = mapped_column()
    granted_by: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()
    expires_at: Mapped[float] = mapped_column()
    consumed_at: Mapped[float | None] = mapped_column()
    consumed_run_id: Mapped[str | None] = mapped_column()


class RunRow(Base):
    """The default run registry: one row per admitted attempt."""

    __tablename__ = "study_runs"
    __table_args__ = (
        sa.CheckConstraint(one_of("state", RUN_STATES), name="state"),
        sa.CheckConstraint(CEASED_ONLY_TERMINAL, name="ceased"),
        sa.UniqueConstraint("run_key", name="uq_study_runs_run_key"),
        sa.Index("ix_study_runs_state", "state"),
    )

    id: Mapped[str] = mapped_column(primary_key=True)
    run_key: Mapped[str] = mapped_column()
    request_sha256: Mapped[str] = mapped_column()
    actor_id: Mapped[str] = mapped_column()
    study_id: Mapped[str] = mapped_column()
    trial_id: Mapped[str] = mapped_column()
    material_sha256: Mapped[str] = mapped_column()
    parent_run_id: Mapped[str | None] = mapped_column()
    approval_id: Mapped[str | None] = mapped_column()
    state: Mapped[str] = mapped_column()
    custody_ceased: Mapped[bool] = mapped_column(sa.Boolean)
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()


class MaterialRow(Base):
    """The default material catalog: recipe materials by the sha256 of their description."""

    __tablename__ = "study_materials"
    __table_args__ = (
        sa.CheckConstraint(one_of("trainer_kind", TRAINER_KINDS), name="trainer_kind"),
        sa.CheckConstraint(all_at_least("envelope_", 1), name="envelope"),
    )

    sha256: Mapped[str] = mapped_column(primary_key=True)
    trainer_id: Mapped[str] = mapped_column()
    trainer_kind: Mapped[str] = mapped_column()
    envelope_attempt_slots: Mapped[int] = mapped_column(sa.BigInteger)
    envelope_admitted_wall_seconds: Mapped[int] = mapped_column(sa.BigInteger)
    envelope_retained_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    envelope_peak_staging_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    recipe_json: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class MetricDefinitionRow(Base):
    __tablename__ = "study_metric_definitions"

    sha256: Mapped[str] = mapped_column(primary_key=True)
    metric_id: Mapped[str] = mapped_column()
    definition_json: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class RunEvidenceRow(Base):
    """The default evidence store: one immutable record per run."""

    __tablename__ = "study_run_evidence"
    __table_args__ = (sa.CheckConstraint(one_of("state", EVIDENCE_STATES), name="state"),)

    run_id: Mapped[str] = mapped_column(primary_key=True)
    state: Mapped[str] = mapped_column()
    producer_material_sha256: Mapped[str] = mapped_column()
    evaluation_sha256: Mapped[str | None] = mapped_column()
    evidence_sha256: Mapped[str] = mapped_column()
    recorded_at: Mapped[float] = mapped_column()


class RunMetricRow(Base):
    __tablename__ = "study_run_metrics"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "definition_sha256", name="uq_study_run_metrics_definition"),
    )

    run_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_run_evidence.run_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    definition_sha256: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_metric_definitions.sha256")
    )


class RunCheckpointRow(Base):
    __tablename__ = "study_run_checkpoints"
    __table_args__ = (
        sa.CheckConstraint("step >= 0", name="step"),
        sa.UniqueConstraint("run_id", "checkpoint_sha256", name="uq_study_run_checkpoints_sha"),
    )

    run_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_run_evidence.run_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    checkpoint_sha256: Mapped[str] = mapped_column()
    step: Mapped[int] = mapped_column(sa.BigInteger)
    selected: Mapped[bool] = mapped_column(sa.Boolean)


class RunObservationRow(Base):
    __tablename__ = "study_run_observations"
    __table_args__ = (
        sa.CheckConstraint(one_of("state", OBSERVATION_STATES), name="state"),
        sa.CheckConstraint(OBSERVED_VALUE, name="value"),
        sa.UniqueConstraint(
            "run_id", "checkpoint_sha256", "metric_id", name="uq_study_run_observations_metric"
        ),
    )

    run_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_run_evidence.run_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    checkpoint_sha256: Mapped[str] = mapped_column()
    metric_id: Mapped[str] = mapped_column()
    state: Mapped[str] = mapped_column()
    value: Mapped[float | None] = mapped_column(sa.Double)


class RunCapabilityRow(Base):
    __tablename__ = "study_run_capabilities"
    __table_args__ = (
        sa.CheckConstraint(one_of("coverage", COVERAGES), name="coverage"),
        sa.UniqueConstraint(
            "run_id", "coverage", "capability", name="uq_study_run_capabilities_name"
        ),
    )

    run_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("study_run_evidence.run_id"), primary_key=True
    )
    coverage: Mapped[str] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    capability: Mapped[str] = mapped_column()
