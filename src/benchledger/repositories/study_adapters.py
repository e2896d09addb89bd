"""All SQL of the default study adapters: run registry, material catalog, evidence, access.

Like every repository these work in the caller's session and never commit.
"""

from __future__ import annotations

import json
from typing import Any, cast

import attrs
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from benchledger.db import Prebuilt, insert_if_absent
from benchledger.domain.canonical import canonical_json
from benchledger.domain.study import RunState, TrainerKind
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
)
from benchledger.domain.study_runs import Material, MaterialRef, Run, RunRequest
from benchledger.domain.study_views import Checkpoint, ExecutionGrant
from benchledger.models.study import (
    AccessRoleRow,
    ExecutionGrantRow,
    MaterialRow,
    MetricDefinitionRow,
    RunCapabilityRow,
    RunCheckpointRow,
    RunEvidenceRow,
    RunMetricRow,
    RunObservationRow,
    RunRow,
)
from benchledger.repositories.study_records import budget_columns, budget_of

# Any constant works; it only has to be the same in every process.
_PG_ROLE_LOCK_KEY = 0x626C5F726F6C6573  # "bl_roles"


def run_view(row: Any) -> Run:
    return Run(
        id=row.id,
        state=row.state,
        actor_id=row.actor_id,
        study_id=row.study_id,
        trial_id=row.trial_id,
        request_sha256=row.request_sha256,
        material_sha256=row.material_sha256,
        parent_run_id=row.parent_run_id,
        approval_id=row.approval_id,
        custody_ceased=bool(row.custody_ceased),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def grant_view(row: ExecutionGrantRow) -> ExecutionGrant:
    return ExecutionGrant(
        id=row.id,
        study_id=row.study_id,
        trial_id=row.trial_id,
        material_sha256=row.material_sha256,
        consumer_actor_id=row.consumer_actor_id,
        granted_by=row.granted_by,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


_RUNS = cast(sa.Table, RunRow.__table__)
_MATERIALS = cast(sa.Table, MaterialRow.__table__)
_ROLES = cast(sa.Table, AccessRoleRow.__table__)

# The hot statements of the default adapters, built once.
_RUN_BY_ID = sa.select(_RUNS).where(_RUNS.c.id == sa.bindparam("run_id"))
SELECT_RUN = Prebuilt(_RUN_BY_ID)
LOCK_RUN = Prebuilt(_RUN_BY_ID.with_for_update())
#: A new run unless its id or run key is taken (then no row: the caller refuses it).
INSERT_NEW_RUN = {
    name: Prebuilt(insert(_RUNS).on_conflict_do_nothing())
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}
UPDATE_RUN = Prebuilt(
    sa.update(_RUNS)
    .where(_RUNS.c.id == sa.bindparam("run_id"))
    .values(
        state=sa.bindparam("state"),
        custody_ceased=sa.bindparam("custody_ceased"),
        updated_at=sa.bindparam("now"),
    )
)
SELECT_MATERIAL = Prebuilt(
    sa.select(_MATERIALS).where(_MATERIALS.c.sha256 == sa.bindparam("sha256"))
)
SELECT_ROLE = Prebuilt(
    sa.select(_ROLES.c.role).where(_ROLES.c.actor_id == sa.bindparam("actor_id"))
)

#: ``session.info`` key: the runs read or written in this write transaction (SQLite only).
_SEEN_RUNS = "benchledger.study.runs"


class RunRepository:
    """Run attempts: rows in, domain :class:`~benchledger.domain.study_runs.Run` values out."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.connection = session.connection()
        # The runs locked through this repository, as they stand now (for change()).
        self._locked: dict[str, Run] = {}

    def _seen(self) -> dict[str, Run] | None:
        """The runs this SQLite transaction read or wrote, by id; None on PostgreSQL.

        On SQLite a write transaction holds the database's only write lock
        (``BEGIN IMMEDIATE``), so a run read in it is current until it changes it
        here: locking it again needs no second read.
        """
        if self.connection.dialect.name != "sqlite":
            return None
        seen: dict[str, Run] = self.session.info.setdefault(_SEEN_RUNS, {})
        return seen

    def _remember(self, run: Run) -> Run:
        seen = self._seen()
        if seen is not None:
            seen[run.id] = run
        return run

    def add(self, request: RunRequest, now: float) -> Run | None:
        """A new attempt, ``queued`` with its custody held; None if its id or key is taken."""
        values = {
            "id": request.run_id,
            "run_key": request.run_key,
            "request_sha256": request.request_sha256,
            "actor_id": request.actor_id,
            "study_id": request.study_id,
            "trial_id": request.trial_id,
            "material_sha256": request.material_sha256,
            "parent_run_id": request.parent_run_id,
            "approval_id": request.approval_id,
            "state": RunState.QUEUED.value,
            "custody_ceased": False,
            "created_at": now,
            "updated_at": now,
        }
        inserted = INSERT_NEW_RUN[self.connection.dialect.name](self.connection, values)
        if inserted.rowcount != 1:
            return None
        return self._remember(run_view(_Values(values)))

    def get(self, run_id: str) -> Run | None:
        row = SELECT_RUN(self.connection, {"run_id": run_id}).first()
        return None if row is None else self._remember(run_view(row))

    def key_taken(self, run_key: str) -> bool:
        return (
            self.session.scalar(sa.select(RunRow.id).where(RunRow.run_key == run_key)) is not None
        )

    def lock(self, run_id: str) -> Run | None:
        """The run, locked for this transaction (PostgreSQL ``FOR UPDATE``)."""
        seen = self._seen()
        if seen is not None and run_id in seen:
            run: Run | None = seen[run_id]
        else:
            row = LOCK_RUN(self.connection, {"run_id": run_id}).first()
            run = None if row is None else self._remember(run_view(row))
        if run is not None:
            self._locked[run_id] = run
        return run

    def change(self, run_id: str, *, state: RunState, custody_ceased: bool, now: float) -> Run:
        """Move a run (locked by :meth:`lock` in this transaction) and return it."""
        run = self._locked.get(run_id) or self.lock(run_id)
        if run is None:  # pragma: no cover - the caller locked it in this transaction
            raise LookupError(run_id)
        UPDATE_RUN(
            self.connection,
            {"run_id": run_id, "state": state.value, "custody_ceased": custody_ceased, "now": now},
        )
        run = attrs.evolve(run, state=state, custody_ceased=custody_ceased, updated_at=now)
        self._locked[run_id] = run
        return self._remember(run)

    def any_in_state(self, state: RunState) -> bool:
        return (
            self.session.scalar(sa.select(RunRow.id).where(RunRow.state == state.value).limit(1))
            is not None
        )


class _Values:
    """Attribute access to a dict of column values (a row not read back)."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        return self._values[name]


class MaterialRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_if_absent(self, material: Material, now: float) -> None:
        insert_if_absent(
            self.session,
            MaterialRow,
            {
                "sha256": material.sha256,
                "trainer_id": material.trainer_id,
                "trainer_kind": str(material.trainer_kind),
                **budget_columns("envelope_", material.envelope),
                "recipe_json": material.recipe_json,
                "created_at": now,
            },
        )

    def get(self, sha256: str) -> Material | None:
        row = SELECT_MATERIAL(self.session.connection(), {"sha256": sha256}).first()
        if row is None:
            return None
        return Material(
            ref=MaterialRef(row.sha256),
            trainer_id=row.trainer_id,
            trainer_kind=TrainerKind(row.trainer_kind),
            envelope=budget_of(row, "envelope_"),
            recipe_json=row.recipe_json,
        )


class EvidenceRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def evidence_sha256(self, run_id: str) -> str | None:
        return self.session.scalar(
            sa.select(RunEvidenceRow.evidence_sha256).where(RunEvidenceRow.run_id == run_id)
        )

    def add(self, evidence: RunEvidence, now: float) -> None:
        for definition in evidence.metric_definitions:
            insert_if_absent(
                self.session,
                MetricDefinitionRow,
                {
                    "sha256": definition.sha256,
                    "metric_id": definition.metric_id,
                    "definition_json": canonical_json(definition.to_document()),
                    "created_at": now,
                },
            )
        run_id = evidence.run_id
        self.session.add(
            RunEvidenceRow(
                run_id=run_id,
                state=str(evidence.state),
                producer_material_sha256=evidence.producer_material_sha256,
                evaluation_sha256=evidence.evaluation_sha256,
                evidence_sha256=evidence.sha256,
                recorded_at=now,
            )
        )
        self.session.flush()
        self.session.add_all(
            RunMetricRow(run_id=run_id, position=index, definition_sha256=item.sha256)
            for index, item in enumerate(evidence.metric_definitions)
        )
        self.session.add_all(
            RunCheckpointRow(
                run_id=run_id,
                position=index,
                checkpoint_sha256=item.sha256,
                step=item.step,
                selected=item.selected,
            )
            for index, item in enumerate(evidence.checkpoints)
        )
        self.session.add_all(
            RunObservationRow(
                run_id=run_id,
                position=index,
                checkpoint_sha256=item.checkpoint_sha256,
                metric_id=item.metric_id,
                state=str(item.state),
                value=item.value,
            )
            for index, item in enumerate(evidence.observations)
        )
        coverage = evidence.coverage
        for kind, names in (
            ("required", coverage.required),
            ("optional", coverage.optional),
            ("omitted", coverage.omitted),
        ):
            self.session.add_all(
                RunCapabilityRow(run_id=run_id, coverage=kind, position=index, capability=name)
                for index, name in enumerate(names)
            )
        self.session.flush()

    def get(self, run_id: str) -> tuple[RunEvidence, str] | None:
        """The run's evidence and the sha256 recorded with it."""
        row = self.session.get(RunEvidenceRow, run_id)
        if row is None:
            return None
        definitions = self.session.execute(
            sa.select(MetricDefinitionRow.definition_json)
            .join(RunMetricRow, RunMetricRow.definition_sha256 == MetricDefinitionRow.sha256)
            .where(RunMetricRow.run_id == run_id)
            .order_by(RunMetricRow.position)
        ).scalars()
        checkpoints = self.session.scalars(
            sa.select(RunCheckpointRow)
            .where(RunCheckpointRow.run_id == run_id)
            .order_by(RunCheckpointRow.position)
        )
        observations = self.session.scalars(
            sa.select(RunObservationRow)
            .where(RunObservationRow.run_id == run_id)
            .order_by(RunObservationRow.position)
        )
        capabilities: dict[str, list[str]] = {"required": [], "optional": [], "omitted": []}
        for coverage, capability in self.session.execute(
            sa.select(RunCapabilityRow.coverage, RunCapabilityRow.capability)
            .where(RunCapabilityRow.run_id == run_id)
            .order_by(RunCapabilityRow.coverage, RunCapabilityRow.position)
        ):
            capabilities[coverage].append(capability)
        evidence = RunEvidence(
            run_id=row.run_id,
            state=row.state,
            producer_material_sha256=row.producer_material_sha256,
            metric_definitions=tuple(metric_definition(text) for text in definitions),
            checkpoints=tuple(
                Checkpoint(item.checkpoint_sha256, item.step, bool(item.selected))
                for item in checkpoints
            ),
            observations=tuple(
                Observation(item.checkpoint_sha256, item.metric_id, item.state, item.value)
                for item in observations
            ),
            coverage=CapabilityCoverage(
                capabilities["required"], capabilities["optional"], capabilities["omitted"]
            ),
            evaluation_sha256=row.evaluation_sha256,
        )
        return evidence, row.evidence_sha256


def metric_definition(text: str) -> MetricDefinition:
    value = json.loads(text)
    return MetricDefinition(
        metric_id=value["id"], name=value["name"], goal=value["goal"], unit=value["unit"]
    )


class AccessRepository:
    def __init__(self, session: Session) -> None:
        self.session = session
        # The session keeps rows only weakly: a locked grant stays here for consume_grant().
        self._locked: dict[str, ExecutionGrantRow] = {}

    def serialize_role_changes(self) -> None:
        """Role changes queue behind each other (SQLite: already, by BEGIN IMMEDIATE)."""
        if self.session.get_bind().dialect.name == "postgresql":
            self.session.execute(
                sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_ROLE_LOCK_KEY}
            )

    def role(self, actor_id: str) -> str | None:
        role: str | None = SELECT_ROLE(self.session.connection(), {"actor_id": actor_id}).scalar()
        return role

    def set_role(self, actor_id: str, role: str, by: str, now: float) -> None:
        row = self.session.get(AccessRoleRow, actor_id)
        if row is None:
            self.session.add(
                AccessRoleRow(actor_id=actor_id, role=role, granted_by=by, granted_at=now)
            )
        else:
            row.role, row.granted_by, row.granted_at = role, by, now
        self.session.flush()

    def remove_role(self, actor_id: str) -> None:
        self.session.execute(sa.delete(AccessRoleRow).where(AccessRoleRow.actor_id == actor_id))

    def count_role(self, role: str) -> int:
        return int(
            self.session.scalar(
                sa.select(sa.func.count())
                .select_from(AccessRoleRow)
                .where(AccessRoleRow.role == role)
            )
            or 0
        )

    def add_grant(self, grant: ExecutionGrant) -> None:
        self.session.add(
            ExecutionGrantRow(
                id=grant.id,
                study_id=grant.study_id,
                trial_id=grant.trial_id,
                material_sha256=grant.material_sha256,
                consumer_actor_id=grant.consumer_actor_id,
                granted_by=grant.granted_by,
                created_at=grant.created_at,
                expires_at=grant.expires_at,
                consumed_at=None,
                consumed_run_id=None,
            )
        )
        self.session.flush()

    def lock_grant(self, grant_id: str) -> tuple[ExecutionGrant, bool] | None:
        """The grant, locked for this transaction, and whether it is used already."""
        row = self.session.get(
            ExecutionGrantRow, grant_id, with_for_update=True, populate_existing=True
        )
        if row is None:
            return None
        self._locked[grant_id] = row
        return grant_view(row), row.consumed_at is not None

    def consume_grant(self, grant_id: str, run_id: str, now: float) -> None:
        """Mark a grant (locked by :meth:`lock_grant`) used by ``run_id``."""
        row = self._locked.get(grant_id) or self.session.get(ExecutionGrantRow, grant_id)
        if row is None:  # pragma: no cover - the caller locked it in this transaction
            raise LookupError(grant_id)
        row.consumed_at, row.consumed_run_id = now, run_id
        self.session.flush()
