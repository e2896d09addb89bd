"""Admission rules: membership, open epoch, one child at a time, retries, grants, built-ins."""

from __future__ import annotations

import pytest

from benchledger.domain.study import ReservationState, RunState, request_sha256
from helpers import refused

from .helpers import EDITOR, OPERATOR, OWNER, Kit


def test_admit_reserves_the_envelope_and_creates_a_queued_run(kit: Kit) -> None:
    study, trial, material = kit.ready()
    admission = kit.admit(study.id, trial.id)
    reservation, run = admission.reservation, admission.run
    assert reservation.state is ReservationState.RESERVED and reservation.settled is None
    assert reservation.envelope == material.envelope == reservation.charge
    assert reservation.admission_epoch == 1 and reservation.trial_id == trial.id
    assert reservation.material_sha256 == material.sha256 == run.material_sha256
    assert run.state is RunState.QUEUED and run.id == reservation.run_id
    assert run.request_sha256 == reservation.request_sha256
    assert reservation.request_sha256 == request_sha256(
        "studies.admit",
        study.id,
        {
            "revision": study.revision,
            "admission_epoch": study.admission_epoch,
            "trial_id": trial.id,
            "approval_id": None,
            "parent_run_id": None,
        },
    )
    page = kit.service.get(OWNER, study.id)
    assert page.reservations == (reservation,)
    assert page.study.revision == study.revision + 1
    assert kit.audit(study.id)[-1] == ("studies.admit", study.id, OWNER)


def test_admission_needs_an_open_study_at_the_exact_epoch(kit: Kit) -> None:
    material = kit.material()
    study = kit.study()
    trial = kit.member(study.id, material)
    with refused(kit.db, "stale"):
        kit.admit(study.id, trial.id)
    kit.open(study.id)
    with refused(kit.db, "stale"):
        kit.service.admit(
            OWNER,
            study.id,
            revision=kit.revision(study.id),
            admission_epoch=0,
            trial_id=trial.id,
            request_key=kit.key(),
        )


def test_admission_needs_a_member_trial(kit: Kit) -> None:
    study, _, _ = kit.ready()
    other, foreign, _ = kit.ready()
    del other
    with refused(kit.db, "invalid"):
        kit.admit(study.id, foreign.id)
    with refused(kit.db, "not_found"):
        kit.admit(study.id, "no-such-trial")
    with refused(kit.db, "not_found"):
        kit.admit("no-such-study", foreign.id)


def test_one_child_at_a_time(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    with refused(kit.db, "unavailable") as caught:
        kit.admit(study.id, trial.id)
    error = caught.value
    assert "active or unknown child" in str(error)
    kit.finish(admission.run.id, "unknown")
    with refused(kit.db, "unavailable"):
        kit.admit(study.id, trial.id)
    kit.finish(admission.run.id, "completed")
    kit.admit(study.id, trial.id)


@pytest.mark.parametrize("state", ["failed", "cancelled", "interrupted"])
def test_a_retry_names_a_ceased_failed_parent_of_the_same_trial(kit: Kit, state: str) -> None:
    study, trial, _ = kit.ready()
    parent = kit.admit(study.id, trial.id).run
    kit.finish(parent.id, state)
    retry = kit.admit(study.id, trial.id, parent_run_id=parent.id)
    assert retry.reservation.parent_run_id == parent.id == retry.run.parent_run_id


def test_retry_parent_refusals(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    second = kit.member(study.id)
    completed = kit.admit(study.id, trial.id).run
    kit.finish(completed.id, "completed")
    with refused(kit.db, "invalid") as caught:
        kit.admit(study.id, trial.id, parent_run_id=completed.id)
    error = caught.value
    assert "ceased failed/cancelled/interrupted" in str(error)
    failed = kit.admit(study.id, trial.id).run
    kit.finish(failed.id, "failed")
    with refused(kit.db, "invalid") as caught:
        kit.admit(study.id, second.id, parent_run_id=failed.id)
    error = caught.value
    assert "does not belong to this trial" in str(error)
    with refused(kit.db, "invalid"):
        kit.admit(study.id, trial.id, parent_run_id="not-a-run")


def test_a_non_owner_runs_external_material_with_a_single_use_grant(kit: Kit) -> None:
    study, trial, material = kit.ready()
    with refused(kit.db, "forbidden") as caught:
        kit.admit(study.id, trial.id, actor=OPERATOR)
    error = caught.value
    assert "execution grant" in str(error)
    grant = kit.service.approve(
        OWNER,
        study.id,
        revision=kit.revision(study.id),
        trial_id=trial.id,
        expected_material_sha256=material.sha256,
        consumer_actor_id=OPERATOR,
        request_key=kit.key(),
    )
    assert grant.expires_at == grant.created_at + 600
    assert kit.audit(study.id)[-1] == ("studies.approve", study.id, OWNER)
    with refused(kit.db, "forbidden"):
        kit.admit(study.id, trial.id, actor=EDITOR, approval_id=grant.id)
    admission = kit.admit(study.id, trial.id, actor=OPERATOR, approval_id=grant.id)
    assert admission.run.approval_id == grant.id and admission.run.actor_id == OPERATOR
    kit.finish(admission.run.id)
    with refused(kit.db, "forbidden") as caught:
        kit.admit(study.id, trial.id, actor=OPERATOR, approval_id=grant.id)
    error = caught.value
    assert "already used" in str(error)


def test_a_grant_is_for_its_exact_trial_not_another_of_the_same_material(kit: Kit) -> None:
    material = kit.material()
    study = kit.study()
    granted = kit.member(study.id, material, replicate=0)
    sibling = kit.member(study.id, material, replicate=1)  # the same material sha256
    kit.open(study.id)
    grant = kit.service.approve(
        OWNER,
        study.id,
        revision=kit.revision(study.id),
        trial_id=granted.id,
        expected_material_sha256=material.sha256,
        consumer_actor_id=OPERATOR,
        request_key=kit.key(),
    )
    assert grant.trial_id == granted.id
    with refused(kit.db, "forbidden") as caught:
        kit.admit(study.id, sibling.id, actor=OPERATOR, approval_id=grant.id)
    error = caught.value
    assert "another trial" in str(error)
    admission = kit.admit(study.id, granted.id, actor=OPERATOR, approval_id=grant.id)
    assert admission.run.trial_id == granted.id


def test_an_expired_grant_is_refused(kit: Kit) -> None:
    study, trial, material = kit.ready()
    grant = kit.service.approve(
        OWNER,
        study.id,
        revision=kit.revision(study.id),
        trial_id=trial.id,
        expected_material_sha256=material.sha256,
        consumer_actor_id=OPERATOR,
        ttl_seconds=60,
        request_key=kit.key(),
    )
    kit.clock.advance(60)
    with refused(kit.db, "forbidden") as caught:
        kit.admit(study.id, trial.id, actor=OPERATOR, approval_id=grant.id)
    error = caught.value
    assert "expired" in str(error)


def test_approve_refusals(kit: Kit) -> None:
    study, trial, material = kit.ready()
    _, foreign, _ = kit.ready()
    builtin_material = kit.material(builtin=True)
    builtin_trial = kit.member(study.id, builtin_material)
    revision = kit.revision(study.id)

    def approve(trial_id: str, sha: str, **extra: object) -> object:
        return kit.service.approve(
            OWNER,
            study.id,
            revision=revision,
            trial_id=trial_id,
            expected_material_sha256=sha,
            consumer_actor_id=OPERATOR,
            request_key=kit.key(),
            **extra,
        )

    with refused(kit.db, "invalid") as caught:
        approve(foreign.id, material.sha256)
    assert "exact member" in str(caught.value)
    with refused(kit.db, "not_found"):
        approve("no-such-trial", material.sha256)
    with refused(kit.db, "stale") as caught:
        approve(trial.id, "0" * 64)
    assert "Review the exact trial" in str(caught.value)
    with refused(kit.db, "unsupported") as caught:
        approve(builtin_trial.id, builtin_material.sha256)
    error = caught.value
    assert "owner-only" in str(error)
    with refused(kit.db, "invalid"):
        approve(trial.id, material.sha256, ttl_seconds=0)


def test_builtin_trainers_are_owner_only_and_take_no_grant(kit: Kit) -> None:
    study, trial, _ = kit.ready(builtin=True)
    with refused(kit.db, "forbidden"):
        kit.admit(study.id, trial.id, actor=OPERATOR)
    with refused(kit.db, "invalid") as caught:
        kit.admit(study.id, trial.id, approval_id="some-grant")
    error = caught.value
    assert "does not consume delegated" in str(error)
    assert kit.admit(study.id, trial.id).run.actor_id == OWNER


def test_prepare_trial_rules(kit: Kit) -> None:
    study = kit.study()
    material = kit.material()
    first = kit.member(study.id, material, replicate=0)
    second = kit.member(study.id, material, replicate=1)
    assert (first.membership_revision, second.membership_revision) == (2, 3)
    assert kit.current(study.id).trial_ids == (first.id, second.id)
    assert kit.service.trial(OWNER, first.id) == first
    with refused(kit.db, "conflict") as caught:
        kit.member(study.id, material, 1)
    error = caught.value
    assert "already belongs" in str(error)
    from benchledger.domain.study_runs import MaterialRef

    with refused(kit.db, "not_found"):
        kit.service.prepare_trial(
            OWNER,
            study.id,
            revision=kit.revision(study.id),
            material=MaterialRef("f" * 64),
            replicate=0,
            request_key=kit.key(),
        )
    with refused(kit.db, "invalid"):
        kit.member(study.id, material, -1)


def test_membership_is_capped_at_ten_thousand(kit: Kit) -> None:
    study = kit.study()
    material = kit.material()
    import sqlalchemy as sa

    # Reach the cap directly (10,000 prepare_trial calls would be slow), then ask once more.
    with kit.db.write() as session:
        session.execute(
            sa.text("UPDATE studies SET membership_revision = 10001 WHERE id = :id"),
            {"id": study.id},
        )
    with refused(kit.db, "unavailable") as caught:
        kit.member(study.id, material)
    error = caught.value
    assert "membership is full" in str(error)


def test_admission_settles_the_ceased_earlier_children_keeping_their_charge(kit: Kit) -> None:
    study, trial, material = kit.ready()
    first = kit.admit(study.id, trial.id)
    kit.finish(first.run.id)  # nobody reconciles
    second = kit.admit(study.id, trial.id)
    page = kit.service.get(OWNER, study.id)
    earlier, latest = page.reservations
    assert earlier.run_id == first.run.id and earlier.state is ReservationState.SETTLED
    assert earlier.settled == material.envelope
    assert latest == second.reservation and latest.state is ReservationState.RESERVED
    assert page.charged == material.envelope + material.envelope
