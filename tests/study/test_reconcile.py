"""Reconciliation: every run state settles its reservation as the seed does, charge kept."""

from __future__ import annotations

import pytest

from benchledger.domain.study import ReservationState, StudyState

from .conftest import ENVELOPE, OWNER, Kit

#: run path from ``queued`` → (reservation state, study state after reconcile)
CASES = {
    "queued": ((), ReservationState.RUNNING, StudyState.OPEN),
    "running": (("running",), ReservationState.RUNNING, StudyState.OPEN),
    "cancelling": (("running", "cancelling"), ReservationState.RUNNING, StudyState.OPEN),
    "completed": (("running", "completed"), ReservationState.SETTLED, StudyState.OPEN),
    "failed": (("running", "failed"), ReservationState.SETTLED, StudyState.OPEN),
    "cancelled": (("cancelled",), ReservationState.SETTLED, StudyState.OPEN),
    "interrupted": (("running", "interrupted"), ReservationState.SETTLED, StudyState.OPEN),
    "unknown": (("running", "unknown"), ReservationState.UNKNOWN, StudyState.UNKNOWN),
}


@pytest.mark.parametrize("final", sorted(CASES))
def test_reconcile_settles_from_run_state_and_keeps_the_worst_case_charge(
    kit: Kit, final: str
) -> None:
    path, reservation_state, study_state = CASES[final]
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    for state in path:
        kit.finish(admission.run.id, state)
    before = kit.service.get(OWNER, study.id)

    page = kit.service.reconcile(OWNER, study.id)

    (reservation,) = page.reservations
    assert reservation.state is reservation_state
    assert reservation.settled == (
        ENVELOPE if reservation_state is ReservationState.SETTLED else None
    )
    assert page.charged == before.charged == ENVELOPE  # settling never gives budget back
    assert page.study.state is study_state
    closed = study_state is StudyState.UNKNOWN
    assert page.study.admission_epoch == before.study.admission_epoch + (1 if closed else 0)
    assert page.study.revision == before.study.revision + 1
    assert kit.audit(study.id)[-1][0] == "studies.reconcile"
    # Convergent: a second reconcile finds nothing to change.
    fingerprint = kit.fingerprint()
    assert kit.service.reconcile(OWNER, study.id) == page
    assert kit.fingerprint() == fingerprint


def test_reconcile_without_changes_writes_nothing(kit: Kit) -> None:
    study, _, _ = kit.ready()
    before = kit.fingerprint()
    page = kit.service.reconcile(OWNER, study.id)
    assert page.study.revision == study.revision
    assert kit.fingerprint() == before


def test_reconcile_of_a_missing_study_is_not_found(kit: Kit, refused) -> None:
    error = refused("not_found", kit.service.reconcile, OWNER, "no-such-study")
    assert error.status == 404


def test_reconcile_moves_a_recovered_unknown_run_back_to_running(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id, "unknown")
    assert kit.service.reconcile(OWNER, study.id).study.state is StudyState.UNKNOWN
    kit.finish(admission.run.id, "running")
    page = kit.service.reconcile(OWNER, study.id)
    assert page.reservations[0].state is ReservationState.RUNNING
    # Closed admission stays closed; with a child active the study is stopping.
    assert page.study.state is StudyState.STOPPING and not page.study.open
