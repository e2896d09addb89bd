"""Reconciliation: every run state settles its reservation as its rule says, charge kept."""

from __future__ import annotations

import pytest

from benchledger.domain.study import ReservationState, StudyState
from helpers import refused

from .helpers import ENVELOPE, OWNER, Kit

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


def test_reconcile_of_a_missing_study_is_not_found(kit: Kit) -> None:
    with refused(kit.db, "not_found") as caught:
        kit.service.reconcile(OWNER, "no-such-study")
    error = caught.value
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


def _tamper_run(kit: Kit, run_id: str, column: str, value: str) -> None:
    """A run registry that reports another attempt under this run id."""
    import sqlalchemy as sa

    with kit.db.write() as session:
        session.execute(
            sa.text(f"UPDATE study_runs SET {column} = :value WHERE id = :id"),
            {"value": value, "id": run_id},
        )


@pytest.mark.parametrize("column", ["study_id", "trial_id", "actor_id", "request_sha256"])
def test_a_run_that_differs_from_its_reservation_is_refused(kit: Kit, column: str) -> None:
    study, trial, _ = kit.ready()
    other, other_trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id)
    value = {
        "study_id": other.id,
        "trial_id": other_trial.id,
        "actor_id": "mallory",
        "request_sha256": "0" * 64,
    }[column]
    _tamper_run(kit, admission.run.id, column, value)
    for call in (
        lambda: kit.service.reconcile(OWNER, study.id),
        lambda: kit.admit(study.id, trial.id),
        lambda: kit.service.stop(
            OWNER, study.id, revision=kit.revision(study.id), request_key=kit.key()
        ),
    ):
        with refused(kit.db, "unavailable") as caught:
            call()
        error = caught.value
        assert "Reservation and Run receipt differ" in str(error)


def test_a_retry_parent_that_differs_from_its_reservation_is_refused(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    parent = kit.admit(study.id, trial.id).run
    kit.finish(parent.id, "failed")
    kit.service.reconcile(OWNER, study.id)  # settled: only the parent check sees the run
    _tamper_run(kit, parent.id, "request_sha256", "0" * 64)
    with refused(kit.db, "unavailable") as caught:
        kit.admit(study.id, trial.id, parent_run_id=parent.id)
    error = caught.value
    assert "Reservation and Run receipt differ" in str(error)
