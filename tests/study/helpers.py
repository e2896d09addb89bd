"""Helpers of the study tests: a service with actors of every role, and study builders."""

from __future__ import annotations

import itertools
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain.study import Budget, RunState, SelectionPolicy
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
)
from benchledger.domain.study_runs import Material, Run
from benchledger.domain.study_views import Admission, Checkpoint, Study, Trial
from benchledger.models.base import Base
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock

OWNER, EDITOR, OPERATOR, VIEWER, STRANGER = "alice", "erin", "oscar", "victor", "mallory"
METRIC = MetricDefinition("accuracy", "Validation accuracy", "maximize")
OTHER_METRIC = MetricDefinition("loss", "Validation loss", "minimize")
ENVELOPE = Budget(1, 60, 1_000, 500)
LIMITS = Budget(10, 600, 10_000, 5_000)
CHECKPOINTS = (
    Checkpoint("a" * 64, 100, False),
    Checkpoint("b" * 64, 200, True),
    Checkpoint("c" * 64, 300, False),
)
STUDY_TABLES = tuple(
    table for table in Base.metadata.sorted_tables if table.name.startswith("stud")
)


def sha(character: str) -> str:
    return character * 64


class Kit:
    """A study service with an owner, an editor, an operator and a viewer."""

    def __init__(
        self, db: Database, clock: LedgerClock, service: StudyService | None = None
    ) -> None:
        self.db = db
        self.clock = clock
        self.service = service if service is not None else StudyService(db, clock=clock)
        self._keys = itertools.count(1)
        self._recipes = itertools.count(1)
        self.service.bootstrap_owner(OWNER)
        for actor, role in ((EDITOR, "editor"), (OPERATOR, "operator"), (VIEWER, "viewer")):
            self.service.grant_role(OWNER, actor, role)

    def key(self, prefix: str = "request") -> str:
        return f"{prefix}-{next(self._keys):06d}"

    def policy(self, rule: str = "last", **changes: Any) -> SelectionPolicy:
        return SelectionPolicy(METRIC.sha256, rule, **changes)

    def material(self, envelope: Budget = ENVELOPE, *, builtin: bool = False) -> Material:
        return self.service.register_material(
            OWNER,
            recipe={"recipe": next(self._recipes), "learning_rate": 0.01},
            envelope=envelope,
            trainer_id="builtin-classifier" if builtin else "external-trainer",
            builtin=builtin,
        )

    def study(
        self, limits: Budget = LIMITS, policy: SelectionPolicy | None = None, name: str = "study"
    ) -> Study:
        return self.service.create(
            OWNER,
            name=name,
            limits=limits,
            policy=policy or self.policy(),
            request_key=self.key("create"),
        )

    def revision(self, study_id: str) -> int:
        return self.service.get(OWNER, study_id).study.revision

    def current(self, study_id: str) -> Study:
        return self.service.get(OWNER, study_id).study

    def member(self, study_id: str, material: Material | None = None, replicate: int = 0) -> Trial:
        return self.service.prepare_trial(
            OWNER,
            study_id,
            revision=self.revision(study_id),
            material=(material or self.material()).ref,
            replicate=replicate,
            request_key=self.key("trial"),
        )

    def open(self, study_id: str) -> Study:
        return self.service.open_study(
            OWNER, study_id, revision=self.revision(study_id), request_key=self.key("open")
        )

    def cont(self, study_id: str) -> Study:
        study = self.current(study_id)
        return self.service.continue_study(
            OWNER,
            study_id,
            revision=study.revision,
            admission_epoch=study.admission_epoch,
            request_key=self.key("continue"),
        )

    def ready(
        self,
        limits: Budget = LIMITS,
        envelope: Budget = ENVELOPE,
        policy: SelectionPolicy | None = None,
        *,
        builtin: bool = False,
    ) -> tuple[Study, Trial, Material]:
        """An open study with one member trial."""
        material = self.material(envelope, builtin=builtin)
        study = self.study(limits, policy)
        trial = self.member(study.id, material)
        return self.open(study.id), trial, material

    def admit(self, study_id: str, trial_id: str, actor: str = OWNER, **extra: Any) -> Admission:
        study = self.current(study_id)
        return self.service.admit(
            actor,
            study_id,
            revision=study.revision,
            admission_epoch=study.admission_epoch,
            trial_id=trial_id,
            request_key=self.key("admit"),
            **extra,
        )

    def finish(
        self, run_id: str, state: str = "completed", custody_ceased: bool | None = None
    ) -> Run:
        return self.service.report_run(
            OPERATOR, run_id, RunState(state), custody_ceased=custody_ceased
        )

    def evidence(
        self,
        run: Run,
        *,
        state: str = "verified",
        material_sha256: str | None = None,
        definitions: tuple[MetricDefinition, ...] = (METRIC,),
        checkpoints: tuple[Checkpoint, ...] = CHECKPOINTS,
        observed: tuple[str, ...] | None = None,
        coverage: CapabilityCoverage | None = None,
        evaluation_sha256: str | None = sha("e"),
    ) -> RunEvidence:
        shas = observed if observed is not None else tuple(c.sha256 for c in checkpoints)
        evidence = RunEvidence(
            run_id=run.id,
            state=state,
            producer_material_sha256=material_sha256 or run.material_sha256,
            metric_definitions=definitions,
            checkpoints=checkpoints,
            observations=tuple(
                Observation(item, METRIC.metric_id, "observed", 0.5 + index / 10)
                for index, item in enumerate(shas)
            ),
            coverage=coverage or CapabilityCoverage(required=("validation",)),
            evaluation_sha256=evaluation_sha256,
        )
        self.service.record_evidence(OPERATOR, evidence)
        return evidence

    def fingerprint(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every study table: equal before and after means nothing changed."""
        with self.db.read() as session:
            return {
                table.name: sorted(
                    (tuple(row) for row in session.execute(sa.select(table))), key=repr
                )
                for table in STUDY_TABLES
            }

    def audit(self, subject_id: str | None = None) -> list[tuple[str, str, str]]:
        with self.db.read() as session:
            query = sa.text("SELECT action, subject_id, actor_id FROM study_audit_log ORDER BY id")
            rows = [tuple(row) for row in session.execute(query)]
        return [row for row in rows if subject_id is None or row[1] == subject_id]
