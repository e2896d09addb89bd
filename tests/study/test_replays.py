"""A replayed or repeated study write returns what it returned before and writes nothing.

"Nothing" is checked on every row of every study table (the audit log, runs,
receipts, roles, materials, evidence...), before and after the repeat.
"""

from __future__ import annotations

from benchledger.domain.study import Budget, RunState, StudyState

from .helpers import ENVELOPE, OPERATOR, OWNER, VIEWER, Kit


def test_a_stop_replayed_while_a_run_drains_writes_nothing(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run = kit.admit(study.id, trial.id).run
    kit.service.report_run(OPERATOR, run.id, RunState.RUNNING)
    key, revision = kit.key("stop"), kit.revision(study.id)
    first = kit.service.stop(OWNER, study.id, revision=revision, request_key=key)
    assert first.receipt.run_ids == (run.id,)
    assert kit.service.run(OWNER, run.id).state is RunState.CANCELLING
    assert ("studies.cancel_run", run.id, OWNER) in kit.audit(run.id)
    before = kit.fingerprint()
    for _ in range(2):
        again = kit.service.stop(OWNER, study.id, revision=revision, request_key=key)
        assert again.receipt == first.receipt
        assert again.status == first.status
        assert kit.fingerprint() == before


def test_a_stop_replayed_after_the_run_ceased_settles_it_once(kit: Kit) -> None:
    """A replay reports the current status: what changed since is settled (once), as
    reconcile would; a second replay writes nothing."""
    study, trial, _ = kit.ready()
    run = kit.admit(study.id, trial.id).run
    kit.service.report_run(OPERATOR, run.id, RunState.RUNNING)
    key, revision = kit.key("stop"), kit.revision(study.id)
    first = kit.service.stop(OWNER, study.id, revision=revision, request_key=key)
    kit.finish(run.id, "cancelled")
    settled = kit.service.stop(OWNER, study.id, revision=revision, request_key=key)
    assert settled.receipt == first.receipt
    assert settled.status.study.state is StudyState.STOPPED
    before = kit.fingerprint()
    assert kit.service.stop(OWNER, study.id, revision=revision, request_key=key) == settled
    assert kit.fingerprint() == before


def test_a_stop_of_a_queued_run_replayed_writes_nothing(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    kit.admit(study.id, trial.id)
    key, revision = kit.key("stop"), kit.revision(study.id)
    first = kit.service.stop(OWNER, study.id, revision=revision, request_key=key)
    assert first.status.study.state is StudyState.STOPPED  # never started: cancelled, settled
    before = kit.fingerprint()
    assert kit.service.stop(OWNER, study.id, revision=revision, request_key=key) == first
    assert kit.fingerprint() == before


def test_registering_a_material_again_writes_nothing(kit: Kit) -> None:
    recipe = {"lr": "3e-4", "layers": [1, 2, 3]}
    first = kit.service.register_material(
        OWNER, recipe=recipe, envelope=ENVELOPE, trainer_id="external-trainer"
    )
    before = kit.fingerprint()
    for actor in (OWNER, "erin"):  # an editor registering the same content: still nothing
        again = kit.service.register_material(
            actor, recipe=dict(recipe), envelope=ENVELOPE, trainer_id="external-trainer"
        )
        assert again == first
        assert kit.fingerprint() == before
    # Other content is another material, and is written.
    kit.service.register_material(
        OWNER, recipe=recipe, envelope=Budget(1, 61, 1_000, 500), trainer_id="external-trainer"
    )
    assert kit.fingerprint() != before


def test_recording_the_same_evidence_again_writes_nothing(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run = kit.finish(kit.admit(study.id, trial.id).run.id)
    evidence = kit.evidence(run)
    before = kit.fingerprint()
    kit.service.record_evidence(OPERATOR, evidence)
    kit.service.record_evidence(OWNER, evidence)
    assert kit.fingerprint() == before
    assert kit.service.run_evidence(OWNER, run.id) == evidence


def test_a_repeated_run_report_writes_nothing(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run_id = kit.admit(study.id, trial.id).run.id
    for state, ceased in (
        (RunState.QUEUED, None),
        (RunState.RUNNING, None),
        (RunState.COMPLETED, False),
        (RunState.COMPLETED, True),
    ):
        first = kit.service.report_run(OPERATOR, run_id, state, custody_ceased=ceased)
        before = kit.fingerprint()
        kit.clock.advance(5)
        again = kit.service.report_run(OPERATOR, run_id, state, custody_ceased=ceased)
        assert again == first
        assert kit.fingerprint() == before, state
    # A ceased run reported completed without a custody flag: the same run, nothing written.
    before = kit.fingerprint()
    kit.service.report_run(OPERATOR, run_id, "completed")
    assert kit.fingerprint() == before


def test_roles_granted_or_revoked_again_write_nothing(kit: Kit) -> None:
    before = kit.fingerprint()
    assert kit.service.grant_role(OWNER, VIEWER, "viewer").value == "viewer"  # has it already
    kit.service.revoke_role(OWNER, "nobody")  # never had a role
    assert kit.service.bootstrap_owner(OWNER).value == "owner"
    assert kit.fingerprint() == before
    kit.service.grant_role(OWNER, VIEWER, "operator")  # a change is written and audited
    assert kit.audit(VIEWER)[-1] == ("access.grant_role", VIEWER, OWNER)


def test_reconcile_with_nothing_new_writes_nothing(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run_id = kit.admit(study.id, trial.id).run.id
    kit.finish(run_id)
    kit.service.reconcile(OWNER, study.id)
    before = kit.fingerprint()
    kit.service.reconcile(OWNER, study.id)
    assert kit.fingerprint() == before
