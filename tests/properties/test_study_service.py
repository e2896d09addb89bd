"""Hostile arguments to every public StudyService method: refused with a documented
category and the database unchanged, or accepted; never a raw Python exception.

As for campaigns: every parameter of every method meets every focused hostile
value (the others valid: the study, trial, run, candidate... the test set
up), then hypothesis mixes hostile values.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings

from benchledger.db import Database
from benchledger.domain.study import Budget, RunState, SelectionPolicy
from benchledger.domain.study_evidence import (
    CapabilityCoverage,
    MetricDefinition,
    Observation,
    RunEvidence,
)
from benchledger.domain.study_views import Checkpoint
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock

from .helpers import Prober, probe_every_parameter, refused_by
from .hostile import Valid, call_of

EXAMPLES = 150
OWNER = "alice"
METRIC = MetricDefinition("accuracy", "Validation accuracy", "maximize")
ENVELOPE = Budget(1, 60, 1_000, 500)
LIMITS = Budget(1_000, 60_000, 1_000_000, 500_000)
METHODS = {
    name: function
    for name, function in inspect.getmembers(StudyService, inspect.isfunction)
    if not name.startswith("_")
}


class World:
    """An open study with two member trials; one ran to completion, has evidence and a
    retained candidate; the operator holds an execution grant."""

    def __init__(self, service: StudyService) -> None:
        self.service = service
        self.prober: Prober | None = None
        self._seen: tuple[int, tuple[int, int]] | None = None
        self._keys = itertools.count(1)
        self._replicates = itertools.count(100)
        service.bootstrap_owner(OWNER)
        for actor, role in (("erin", "editor"), ("oscar", "operator"), ("victor", "viewer")):
            service.grant_role(OWNER, actor, role)
        self.material = service.register_material(
            OWNER, recipe={"lr": 0.01}, envelope=ENVELOPE, trainer_id="external-trainer"
        )
        self.policy = SelectionPolicy(METRIC.sha256, "last")
        study = service.create(
            OWNER, name="study", limits=LIMITS, policy=self.policy, request_key=self.key()
        )
        self.study_id = study.id
        self.trial = self.member()
        self.other_trial = self.member()
        opened = service.open_study(
            OWNER, self.study_id, revision=self.revision(), request_key=self.key()
        )
        admission = service.admit(
            OWNER,
            self.study_id,
            revision=opened.revision,
            admission_epoch=opened.admission_epoch,
            trial_id=self.trial.id,
            request_key=self.key(),
        )
        self.run_id = admission.run.id
        service.report_run(OWNER, self.run_id, RunState.COMPLETED, custody_ceased=True)
        checkpoint = Checkpoint("c" * 64, 10, True)
        self.evidence = RunEvidence(
            run_id=self.run_id,
            state="verified",
            producer_material_sha256=self.material.sha256,
            metric_definitions=(METRIC,),
            checkpoints=(checkpoint,),
            observations=(Observation(checkpoint.sha256, METRIC.metric_id, "observed", 0.5),),
            coverage=CapabilityCoverage(),
            evaluation_sha256="e" * 64,
        )
        service.record_evidence(OWNER, self.evidence)
        self.candidate_id = service.select_candidate(
            OWNER,
            self.study_id,
            revision=self.revision(),
            trial_id=self.trial.id,
            run_id=self.run_id,
            request_key=self.key(),
        ).ref.id

    def key(self) -> str:
        return f"request-{next(self._keys):06d}"

    def _current(self) -> tuple[int, int]:
        """The study's revision and epoch, read again only after an accepted call."""
        accepted = self.prober.accepted if self.prober is not None else -1
        if self._seen is None or self._seen[0] != accepted or accepted < 0:
            study = self.service.get(OWNER, self.study_id).study
            self._seen = (accepted, (study.revision, study.admission_epoch))
        return self._seen[1]

    def revision(self) -> int:
        return self._current()[0]

    def epoch(self) -> int:
        return self._current()[1]

    def member(self) -> Any:
        return self.service.prepare_trial(
            OWNER,
            self.study_id,
            revision=self.revision(),
            material=self.material.ref,
            replicate=next(self._replicates),
            request_key=self.key(),
        )

    def valid(self, method: str) -> dict[str, Valid]:
        return {
            "actor": lambda: OWNER,
            "subject": lambda: "victor",
            "role": lambda: "viewer",
            "study_id": lambda: self.study_id,
            "revision": self.revision,
            "admission_epoch": self.epoch,
            "request_key": self.key,
            "name": lambda: "study",
            "limits": lambda: LIMITS,
            "policy": lambda: self.policy,
            "sha256": lambda: self.policy.sha256,
            "material": lambda: self.material.ref,
            "replicate": lambda: next(self._replicates),
            "trial_id": lambda: self.trial.id if method != "admit" else self.other_trial.id,
            "run_id": lambda: self.run_id,
            "candidate_id": lambda: self.candidate_id,
            "cursor": lambda: None,
            "limit": lambda: 5,
            "offset": lambda: 0,
            "approval_id": lambda: None,
            "parent_run_id": lambda: None,
            "expected_material_sha256": lambda: self.material.sha256,
            "consumer_actor_id": lambda: "oscar",
            "ttl_seconds": lambda: 600,
            "checkpoint_sha256": lambda: None,
            "recipe": lambda: {"lr": 0.01},
            "envelope": lambda: ENVELOPE,
            "trainer_id": lambda: "external-trainer",
            "builtin": lambda: False,
            "state": lambda: "completed",
            "custody_ceased": lambda: None,
            "evidence": lambda: self.evidence,
        }


#: The focused hostile values a parameter accepts (``method[parameter]``): every other
#: one it must refuse, alone (the focused sweep) or among other hostile arguments (the
#: mixed probes). A recipe is any JSON value; names are free text (shown escaped).
ACCEPTS: dict[str, frozenset[str]] = {
    label: frozenset(names)
    for label, names in {
        "candidates[cursor]": ("None",),
        "list[cursor]": ("None",),
        "get[revision]": ("None",),
        "select_candidate[checkpoint_sha256]": ("None",),
        "admit[approval_id]": ("None",),
        "create[name]": ("not-nfc",),
        "save[name]": ("not-nfc",),
        "register_material[builtin]": ("True",),
        "report_run[custody_ceased]": ("None", "True"),
        "register_material[recipe]": (
            *("None", "True", "-1", "2**63", "empty", "bidi", "zero-width", "nul"),
            *("newline", "not-nfc"),
        ),
    }.items()
}


def _call(world: World, name: str) -> Any:
    return getattr(world.service, name)


def test_every_parameter_refuses_every_hostile_value(
    ledger_db: Database, ledger_clock: LedgerClock, ledger_backend: str, prober: Prober
) -> None:
    world = World(StudyService(ledger_db, clock=ledger_clock))
    world.prober = prober
    probe_every_parameter(
        prober, METHODS, world.valid, lambda name: _call(world, name), ledger_backend, ACCEPTS
    )
    assert prober.refusals  # the probes reached the checks


def test_mixed_hostile_arguments_are_refused_with_a_category(
    ledger_db: Database, ledger_clock: LedgerClock, prober: Prober
) -> None:
    world = World(StudyService(ledger_db, clock=ledger_clock))
    world.prober = prober

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(call=call_of(METHODS, world.valid, refused_by(ACCEPTS)))
    def run(call: tuple[str, dict[str, Any]]) -> None:
        name, arguments = call
        # One argument is a value its parameter must refuse: so must the call.
        assert not prober.probe(_call(world, name), name, **arguments), f"{name} accepted"

    run()
