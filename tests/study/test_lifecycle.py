"""Lifecycle: draft → open → stopping → stopped, and unknown custody."""

from __future__ import annotations

from benchledger.domain.study import Budget, ReservationState, StudyState
from helpers import refused

from .helpers import ENVELOPE, OWNER, Kit


def test_create_makes_a_draft_with_the_policy_stored_once(kit: Kit) -> None:
    policy = kit.policy("selected", required_capabilities=("validation",))
    first = kit.study(policy=policy)
    second = kit.study(policy=policy)
    assert first.state is StudyState.DRAFT and not first.open
    assert (first.revision, first.admission_epoch, first.membership_revision) == (1, 0, 1)
    assert first.trial_ids == () and first.stop_receipt_id is None
    assert first.policy_sha256 == second.policy_sha256 == policy.sha256
    assert kit.service.policy(OWNER, policy.sha256) == policy
    with kit.db.read() as session:
        from sqlalchemy import text

        count = session.execute(text("SELECT count(*) FROM study_selection_policies")).scalar()
    assert count == 1


def test_draft_opens_then_stops_then_stopped(kit: Kit) -> None:
    material = kit.material()
    study = kit.study()
    trial = kit.member(study.id, material)
    opened = kit.open(study.id)
    assert opened.state is StudyState.OPEN and opened.open
    assert opened.admission_epoch == 1
    assert opened.trial_ids == (trial.id,)

    admission = kit.admit(study.id, trial.id)
    stop = kit.service.stop(
        OWNER, study.id, revision=kit.revision(study.id), request_key=kit.key("stop")
    )
    assert stop.receipt.admission_epoch == 2
    assert stop.receipt.run_ids == (admission.run.id,)
    # A queued run is cancelled outright: nothing to drain, so the study is stopped.
    assert stop.status.study.state is StudyState.STOPPED
    assert stop.status.study.stop_receipt_id == stop.receipt.stop_receipt_id
    assert stop.status.reservations[0].state is ReservationState.SETTLED
    run = kit.service.runs
    with kit.db.read():
        assert run.load(admission.run.id).state == "cancelled"


def test_stop_waits_for_a_running_child_to_cease(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id, "running")
    stop = kit.service.stop(
        OWNER, study.id, revision=kit.revision(study.id), request_key=kit.key("stop")
    )
    assert stop.status.study.state is StudyState.STOPPING
    assert stop.status.reservations[0].state is ReservationState.RUNNING
    assert kit.finish(admission.run.id, "cancelled").ceased
    page = kit.service.reconcile(OWNER, study.id)
    assert page.study.state is StudyState.STOPPED
    # Stopped, with budget left: the next epoch opens at the exact epoch.
    reopened = kit.cont(study.id)
    assert reopened.state is StudyState.OPEN and reopened.admission_epoch == 3


def test_unknown_custody_closes_admission_until_it_is_resolved(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id, "unknown")
    page = kit.service.reconcile(OWNER, study.id)
    assert page.study.state is StudyState.UNKNOWN and not page.study.open
    assert page.study.admission_epoch == 2
    assert page.reservations[0].state is ReservationState.UNKNOWN
    with refused(kit.db, "unavailable"):
        kit.cont(study.id)
    kit.finish(admission.run.id, "interrupted")
    assert kit.service.reconcile(OWNER, study.id).study.state is StudyState.STOPPED
    assert kit.cont(study.id).state is StudyState.OPEN


def test_open_study_accepts_only_a_draft(kit: Kit) -> None:
    study, _, _ = kit.ready()
    with refused(kit.db, "conflict"):
        kit.service.open_study(OWNER, study.id, revision=study.revision, request_key=kit.key())


def test_continue_requires_the_exact_epoch(kit: Kit) -> None:
    study = kit.study()
    with refused(kit.db, "unavailable"):
        kit.service.continue_study(
            OWNER, study.id, revision=study.revision, admission_epoch=1, request_key=kit.key()
        )
    # At the exact epoch (0) continue opens a draft too.
    assert kit.cont(study.id).state is StudyState.OPEN


def test_continue_refuses_an_open_study_and_an_active_child(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    with refused(kit.db, "unavailable"):
        kit.cont(study.id)
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id, "running")
    stop = kit.service.stop(OWNER, study.id, revision=kit.revision(study.id), request_key=kit.key())
    assert stop.status.study.state is StudyState.STOPPING  # the run is cancelling
    with refused(kit.db, "unavailable"):
        kit.cont(study.id)


def test_continue_refuses_without_remaining_budget(kit: Kit) -> None:
    study, trial, _ = kit.ready(limits=Budget(1, 600, 10_000, 5_000))
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id)
    kit.service.stop(OWNER, study.id, revision=kit.revision(study.id), request_key=kit.key())
    with refused(kit.db, "unavailable") as caught:
        kit.cont(study.id)
    error = caught.value
    assert "budget" in str(error)


def test_continue_refuses_while_the_registry_has_unknown_custody(kit: Kit) -> None:
    elsewhere, other_trial, _ = kit.ready()
    lost = kit.admit(elsewhere.id, other_trial.id)
    kit.finish(lost.run.id, "unknown")
    study = kit.study()
    with refused(kit.db, "unavailable") as caught:
        kit.cont(study.id)
    error = caught.value
    assert "custody" in str(error)


def test_terminal_run_without_ceased_custody_is_unknown(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    kit.finish(admission.run.id, "failed", custody_ceased=False)
    page = kit.service.reconcile(OWNER, study.id)
    assert page.reservations[0].state is ReservationState.UNKNOWN
    assert page.study.state is StudyState.UNKNOWN
    kit.finish(admission.run.id, "failed", custody_ceased=True)
    page = kit.service.reconcile(OWNER, study.id)
    assert page.reservations[0].state is ReservationState.SETTLED
    assert page.reservations[0].settled == ENVELOPE
    assert page.study.state is StudyState.STOPPED
