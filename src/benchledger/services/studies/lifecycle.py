"""A study's life: create, save, open, continue, stop, and reconcile.

Each write below is its own rule over :func:`~.write.write_study`, which has
already authorized the actor, locked the study, answered a replay and checked
the revision by the time the rule runs. ``create`` (no study to lock yet),
``reconcile`` and stop's cancel step run in the unit under it,
:func:`~.write.write`, and move a revision the same way (``next_revision``,
then ``finish``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from benchledger.domain.study import (
    MAX_STUDY_PAGE,
    Budget,
    SelectionPolicy,
    StudyState,
    identifier,
    limits_budget,
    natural,
    refuse,
    request_sha256,
    text,
)
from benchledger.domain.study_rules import child_custody, reconciled_state, reservation_state_for
from benchledger.domain.study_runs import Run
from benchledger.domain.study_views import Reservation, StopOutcome, StopReceipt, Study, StudyPage
from benchledger.repositories.studies import StudyRepository
from benchledger.repositories.study_records import StudyRecord
from benchledger.services.studies.context import StudyContext, locked
from benchledger.services.studies.reads import page
from benchledger.services.studies.write import (
    StudyWrite,
    WriteRequest,
    checked_key,
    checked_study_key,
    next_revision,
    replay,
    store_receipt,
    write,
    write_study,
)


def _policy_value(policy: object) -> SelectionPolicy:
    if not isinstance(policy, SelectionPolicy):
        raise refuse("Selection policy must be a SelectionPolicy.")
    return policy


def create(
    context: StudyContext,
    actor: str,
    *,
    name: str,
    limits: Budget,
    policy: SelectionPolicy,
    request_key: str,
) -> Study:
    """A new draft (there is no study to lock yet: authorize, replay, create, receipt)."""
    operation = "studies.create"
    key = checked_key(actor, request_key)
    text(name, "Study name")
    limits_budget(limits)
    _policy_value(policy)
    sha = request_sha256(
        operation,
        None,
        {"name": name, "limits": limits.to_document(), "policy": policy.to_document()},
    )
    # No study to lock yet: the receipt is bound before the study exists.
    request = WriteRequest(actor, operation, "", 1, key, sha)

    def work(repo: StudyRepository, now: float) -> Study:
        replayed = replay(repo, request, Study)
        if replayed is not None:
            return replayed
        repo.store_policy(policy.sha256, policy.to_document(), now)
        study = repo.add_study(
            study_id=uuid.uuid4().hex,
            name=name,
            limits=limits,
            policy_sha256=policy.sha256,
            actor=actor,
            now=now,
        )
        details = {"policy_sha256": policy.sha256, "limits": limits.to_document()}
        repo.audit(operation, study.id, actor, {**details, "revision": 1, "epoch": 0}, now)
        view = repo.view(study, trial_ids=())  # a new study has no members
        store_receipt(repo, request, study.id, view, now)
        return view

    return write(context, actor, operation, work)


def save(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    revision: int,
    name: str,
    limits: Budget,
    policy: SelectionPolicy,
    request_key: str,
) -> Study:
    operation = "studies.save"
    key = checked_study_key(actor, request_key, study_id, revision)
    text(name, "Study name")
    limits_budget(limits)
    _policy_value(policy)
    sha = request_sha256(
        operation,
        study_id,
        {
            "revision": revision,
            "name": name,
            "limits": limits.to_document(),
            "policy": policy.to_document(),
        },
    )

    def rule(write: StudyWrite) -> Study:
        if not write.study.charged.fits_within(limits):
            raise refuse("Limits are below existing obligations.", "conflict")
        write.repo.store_policy(policy.sha256, policy.to_document(), write.now)
        write.repo.change(write.study, name=name, policy_sha256=policy.sha256, limits=limits)
        write.advance({"policy_sha256": policy.sha256, "limits": limits.to_document()})
        return write.view()

    request = WriteRequest(actor, operation, study_id, revision, key, sha)
    return write_study(context, request, Study, rule)


def open_study(
    context: StudyContext, actor: str, study_id: str, *, revision: int, request_key: str
) -> Study:
    return _open(context, actor, study_id, revision, None, request_key)


def continue_study(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    revision: int,
    admission_epoch: int,
    request_key: str,
) -> Study:
    natural(admission_epoch, "Admission epoch")
    return _open(context, actor, study_id, revision, admission_epoch, request_key)


def _open(
    context: StudyContext,
    actor: str,
    study_id: str,
    revision: int,
    epoch: int | None,
    request_key: str,
) -> Study:
    """Open the next admission epoch: a draft's first (``epoch`` None), or the next one."""
    first = epoch is None
    operation = "studies.open" if first else "studies.continue"
    key = checked_study_key(actor, request_key, study_id, revision)
    body: dict[str, Any] = {"revision": revision}
    if epoch is not None:
        body["admission_epoch"] = epoch
    sha = request_sha256(operation, study_id, body)

    def rule(write: StudyWrite) -> Study:
        study = write.study
        if first and study.state is not StudyState.DRAFT:
            raise refuse("Only a draft study can be opened; use continue_study.", "conflict")
        expected = study.admission_epoch if epoch is None else epoch
        children = write.context.children(write.repo, study_id)
        custody = child_custody(run for _, run in children)
        if (
            study.state is StudyState.OPEN
            or study.admission_epoch != expected
            or not custody.ceased
            or custody.unknown
        ):
            raise refuse(
                "Study cannot open before known child cessation and exact epoch.", "unavailable"
            )
        if study.charged.reaches_any(study.limits):
            raise refuse("Study has no remaining budget.", "unavailable")
        if write.context.runs.custody_blocked():
            raise refuse("Run custody is unknown.", "unavailable")
        write.repo.change(study, state=StudyState.OPEN, admission_epoch=study.admission_epoch + 1)
        write.advance({})
        return write.view()

    request = WriteRequest(actor, operation, study_id, revision, key, sha)
    return write_study(context, request, Study, rule)


def stop(
    context: StudyContext, actor: str, study_id: str, *, revision: int, request_key: str
) -> StopOutcome:
    """Close the epoch and commit the receipt, then (a second transaction) cancel and settle."""
    operation = "studies.stop"
    key = checked_study_key(actor, request_key, study_id, revision)
    sha = request_sha256(operation, study_id, {"revision": revision})

    def close(write: StudyWrite) -> StopReceipt:
        study = write.study
        receipt_id = uuid.uuid4().hex
        children = write.context.children(write.repo, study_id)
        write.repo.change(
            study,
            state=StudyState.STOPPING,
            admission_epoch=study.admission_epoch + 1,
            stop_receipt_id=receipt_id,
        )
        write.advance({"stop_receipt_id": receipt_id})
        return StopReceipt(
            study_id=study_id,
            stop_receipt_id=receipt_id,
            admission_epoch=study.admission_epoch,
            run_ids=tuple(run.id for _, run in children if not run.ceased),
        )

    request = WriteRequest(actor, operation, study_id, revision, key, sha)
    receipt = write_study(context, request, StopReceipt, close)

    def cancel(repo: StudyRepository, now: float) -> StudyPage:
        study = locked(repo, study_id)
        for run_id in receipt.run_ids:
            before = context.runs.load(run_id)
            if not before.active:
                continue
            after = context.runs.cancel(run_id, now=now)
            if after == before:
                continue  # already asked to stop (a replay): nothing written
            repo.audit(
                "studies.cancel_run",
                run_id,
                actor,
                {"study_id": study_id, "from": before.state.value, "to": after.state.value},
                now,
            )
        return settle_study(context, repo, study, actor, now)

    status = write(context, actor, operation, cancel, study_id=study_id)
    return StopOutcome(receipt=receipt, status=status)


def reconcile(context: StudyContext, actor: str, study_id: str) -> StudyPage:
    identifier(actor, "Actor id")
    identifier(study_id, "Study id")

    def work(repo: StudyRepository, now: float) -> StudyPage:
        return settle_study(context, repo, locked(repo, study_id), actor, now)

    return write(context, actor, "studies.reconcile", work, study_id=study_id)


def settle_study(
    context: StudyContext,
    repo: StudyRepository,
    study: StudyRecord,
    actor: str,
    now: float,
) -> StudyPage:
    """Settle reservations from their runs and move the study as custody allows.

    A change is a new revision, audited as ``studies.reconcile`` and written by
    ``repo.finish`` (no receipt: settling is not a keyed request).
    """
    children = context.children(repo, study.id)
    changes = settle(repo, children, now)
    move = reconciled_state(study.state, child_custody(run for _, run in children))
    if move is not None:
        epoch = study.admission_epoch + 1 if move.close_epoch else None
        repo.change(study, state=move.state, admission_epoch=epoch)
    if changes or move is not None:
        audit = next_revision(
            repo, study, "studies.reconcile", actor, {"reservations": changes}, now
        )
        repo.finish(study, audit, receipt=None)
    return page(repo, study, 0, MAX_STUDY_PAGE)


def settle(
    repo: StudyRepository, children: Sequence[tuple[Reservation, Run]], now: float
) -> dict[str, str]:
    """Move each reservation to the state its run implies; the changed ones, by id.

    The charge stays the worst case: settling never gives budget back.
    """
    changes: dict[str, str] = {}
    for reservation, run in children:
        state = reservation_state_for(run)
        if state is not reservation.state:
            repo.set_reservation_state(reservation.id, state, now)
            changes[reservation.id] = state.value
    return changes
