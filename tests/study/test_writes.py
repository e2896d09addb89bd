"""Every write: idempotent replay, conflicting replay, stale revision, and authorization."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from benchledger.domain.study import Budget, StudyState
from benchledger.domain.study_runs import MaterialRef
from helpers import refused

from .helpers import EDITOR, LIMITS, OPERATOR, OWNER, STRANGER, VIEWER, Kit


@attrs.define
class World:
    """An open study with two member trials; trial ``done`` has a completed, evidenced run."""

    kit: Kit
    study_id: str
    trial_id: str
    done_trial_id: str
    done_run_id: str
    material_sha256: str
    spare: MaterialRef


@pytest.fixture
def world(kit: Kit) -> World:
    study, done_trial, _ = kit.ready(policy=kit.policy("selected"))
    admission = kit.admit(study.id, done_trial.id)
    run = kit.finish(admission.run.id)
    kit.evidence(run)
    other = kit.material()
    trial = kit.member(study.id, other)
    spare = kit.material().ref
    return World(kit, study.id, trial.id, done_trial.id, run.id, other.sha256, spare)


# Each write as (operation, call(actor, revision, key, variant)) — ``variant`` changes an input.
Write = Callable[[World, str, int, str, int], Any]


def _create(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    return w.kit.service.create(
        actor,
        name=f"study {variant}",
        limits=LIMITS,
        policy=w.kit.policy(),
        request_key=key,
    )


def _save(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    return w.kit.service.save(
        actor,
        w.study_id,
        revision=revision,
        name=f"renamed {variant}",
        limits=LIMITS,
        policy=w.kit.policy("selected"),
        request_key=key,
    )


def _prepare(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    return w.kit.service.prepare_trial(
        actor,
        w.study_id,
        revision=revision,
        material=w.spare,
        replicate=7 + variant,
        request_key=key,
    )


def _approve(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    return w.kit.service.approve(
        actor,
        w.study_id,
        revision=revision,
        trial_id=w.trial_id,
        expected_material_sha256=w.material_sha256,
        consumer_actor_id=OPERATOR,
        ttl_seconds=600 + variant,
        request_key=key,
    )


def _admit(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    study = w.kit.current(w.study_id)
    return w.kit.service.admit(
        actor,
        w.study_id,
        revision=revision,
        admission_epoch=study.admission_epoch,
        trial_id=w.trial_id if variant == 0 else w.done_trial_id,
        request_key=key,
    )


def _select(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    return w.kit.service.select_candidate(
        actor,
        w.study_id,
        revision=revision,
        trial_id=w.done_trial_id,
        run_id=w.done_run_id,
        request_key=key,
        checkpoint_sha256=None if variant == 0 else "b" * 64,
    )


def _stop(w: World, actor: str, revision: int, key: str, variant: int) -> Any:
    if variant:
        revision += 1  # the only input: another revision is other inputs
    return w.kit.service.stop(actor, w.study_id, revision=revision, request_key=key).receipt


WRITES: dict[str, Write] = {
    "create": _create,
    "save": _save,
    "prepare_trial": _prepare,
    "approve": _approve,
    "admit": _admit,
    "select_candidate": _select,
    "stop": _stop,
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_replay_returns_the_identical_receipt_and_changes_nothing(world: World, name: str) -> None:
    kit = world.kit
    key = kit.key(name)
    revision = kit.revision(world.study_id)
    first = WRITES[name](world, OWNER, revision, key, 0)
    kit.member(world.study_id, kit.material())  # the study moves on to a new revision
    before = kit.fingerprint()
    # Replayed with the original inputs: the original receipt, and no new effect.
    again = WRITES[name](world, OWNER, revision, key, 0)
    assert again == first
    assert kit.fingerprint() == before


@pytest.mark.parametrize("name", sorted(WRITES))
def test_same_key_with_other_inputs_is_a_conflict(world: World, name: str) -> None:
    kit = world.kit
    key = kit.key(name)
    revision = kit.revision(world.study_id)
    WRITES[name](world, OWNER, revision, key, 0)
    with refused(world.kit.db, "conflict") as caught:
        WRITES[name](world, OWNER, revision, key, 1)
    error = caught.value
    assert "different inputs" in str(error)


@pytest.mark.parametrize("name", sorted(set(WRITES) - {"create"}))
def test_a_stale_revision_is_refused(world: World, name: str) -> None:
    kit = world.kit
    revision = kit.revision(world.study_id)
    with refused(world.kit.db, "stale") as caught:
        WRITES[name](world, OWNER, revision - 1, kit.key(), 0)
    error = caught.value
    assert error.status == 409


def test_open_and_continue_replay_and_go_stale(kit: Kit) -> None:
    study = kit.study()
    kit.member(study.id)
    key = kit.key("open")
    opened = kit.service.open_study(OWNER, study.id, revision=2, request_key=key)
    assert kit.service.open_study(OWNER, study.id, revision=2, request_key=key) == opened
    with refused(kit.db, "conflict"):
        kit.service.open_study(OWNER, study.id, revision=3, request_key=key)
    stopped = kit.service.stop(OWNER, study.id, revision=3, request_key=kit.key()).status.study
    assert stopped.state is StudyState.STOPPED
    with refused(kit.db, "stale"):
        kit.service.continue_study(
            OWNER,
            study.id,
            revision=stopped.revision - 1,
            admission_epoch=stopped.admission_epoch,
            request_key=kit.key(),
        )
    key = kit.key("continue")
    args = dict(revision=stopped.revision, admission_epoch=stopped.admission_epoch)
    continued = kit.service.continue_study(OWNER, study.id, request_key=key, **args)
    assert kit.service.continue_study(OWNER, study.id, request_key=key, **args) == continued


def test_an_admission_key_belongs_to_one_actor(world: World) -> None:
    kit = world.kit
    key = kit.key("admit")
    _admit(world, OWNER, kit.revision(world.study_id), key, 0)
    kit.service.grant_role(OWNER, "olga", "owner")
    with refused(world.kit.db, "conflict") as caught:
        _admit(world, "olga", kit.revision(world.study_id), key, 0)
    error = caught.value
    assert "different actor" in str(error)


# -- authorization -------------------------------------------------------------------------

#: For each write, actors whose role does not permit it.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "create": (EDITOR, OPERATOR, VIEWER, STRANGER),
    "save": (EDITOR, OPERATOR, VIEWER, STRANGER),
    "prepare_trial": (OPERATOR, VIEWER, STRANGER),
    "approve": (EDITOR, OPERATOR, VIEWER, STRANGER),
    "admit": (VIEWER, STRANGER),
    "select_candidate": (OPERATOR, VIEWER, STRANGER),
    "stop": (VIEWER, STRANGER),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_an_unauthorized_actor_is_forbidden_and_changes_nothing(world: World, name: str) -> None:
    kit = world.kit
    for actor in FORBIDDEN[name]:
        with refused(world.kit.db, "forbidden") as caught:
            WRITES[name](world, actor, kit.revision(world.study_id), kit.key(), 0)
        error = caught.value
        assert error.status == 403


def test_editors_prepare_trials_and_select_candidates(world: World) -> None:
    kit = world.kit
    _prepare(world, EDITOR, kit.revision(world.study_id), kit.key(), 0)
    result = _select(world, EDITOR, kit.revision(world.study_id), kit.key(), 0)
    assert result.candidate.decision == "diagnostic"


def test_other_operations_are_forbidden_to_actors_without_the_role(world: World) -> None:
    kit, service, study_id = world.kit, world.kit.service, world.study_id
    revision = kit.revision(study_id)
    calls: list[Callable[[], Any]] = [
        lambda: service.open_study(EDITOR, study_id, revision=revision, request_key=kit.key()),
        lambda: service.continue_study(
            OPERATOR, study_id, revision=revision, admission_epoch=1, request_key=kit.key()
        ),
        lambda: service.reconcile(STRANGER, study_id),
        lambda: service.get(STRANGER, study_id),
        lambda: service.list(STRANGER),
        lambda: service.trial(STRANGER, world.trial_id),
        lambda: service.policy(STRANGER, kit.policy().sha256),
        lambda: service.candidates(STRANGER, world.done_run_id),
        lambda: service.grant_role(EDITOR, STRANGER, "viewer"),
        lambda: service.revoke_role(EDITOR, OPERATOR),
        lambda: service.register_material(
            OPERATOR, recipe={}, envelope=Budget(1, 1, 1, 1), trainer_id="trainer"
        ),
        lambda: service.report_run(VIEWER, world.done_run_id, "completed"),
        lambda: service.bootstrap_owner(STRANGER),
    ]
    for call in calls:
        with refused(world.kit.db, "forbidden"):
            call()


def test_the_last_owner_cannot_be_removed(kit: Kit) -> None:
    with refused(kit.db, "conflict"):
        kit.service.revoke_role(OWNER, OWNER)
    with refused(kit.db, "conflict"):
        kit.service.grant_role(OWNER, OWNER, "viewer")
    kit.service.grant_role(OWNER, "olga", "owner")
    kit.service.revoke_role(OWNER, OWNER)
    assert kit.service.role_of(OWNER) is None
    assert kit.service.bootstrap_owner("olga").value == "owner"  # idempotent for an owner
