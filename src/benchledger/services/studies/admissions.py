"""Execution: an owner's execution grant, and the admission of one run attempt.

``admit`` reads top to bottom as the rule it is: the study open at the exact
epoch, no live child, room for the envelope, a valid retry parent, the right
to execute; then one run, one reservation, the new charge and a new revision.
"""

from __future__ import annotations

import uuid

from benchledger.domain.study import (
    DEFAULT_GRANT_TTL_SECONDS,
    MAX_GRANT_TTL_SECONDS,
    RETRY_PARENT_STATES,
    ReservationState,
    StudyState,
    identifier,
    natural,
    refuse,
    request_sha256,
    sha256_hex,
)
from benchledger.domain.study_rules import (
    ADMIT,
    Role,
    admission_request_sha256,
    admission_run_key,
    child_custody,
)
from benchledger.domain.study_runs import RunRequest
from benchledger.domain.study_views import Admission, ExecutionGrant, Reservation
from benchledger.services.studies.context import StudyContext, member
from benchledger.services.studies.lifecycle import settle
from benchledger.services.studies.write import (
    StudyWrite,
    WriteRequest,
    checked_study_key,
    write_study,
)


def approve(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    revision: int,
    trial_id: str,
    expected_material_sha256: str,
    consumer_actor_id: str,
    request_key: str,
    ttl_seconds: int = DEFAULT_GRANT_TTL_SECONDS,
) -> ExecutionGrant:
    operation = "studies.approve"
    key = checked_study_key(actor, request_key, study_id, revision)
    identifier(trial_id, "Trial id")
    identifier(consumer_actor_id, "Consumer actor id")
    sha256_hex(expected_material_sha256, "Expected material sha256")
    natural(ttl_seconds, "Grant TTL seconds", 1, MAX_GRANT_TTL_SECONDS)
    sha = request_sha256(
        operation,
        study_id,
        {
            "revision": revision,
            "trial_id": trial_id,
            "expected_material_sha256": expected_material_sha256,
            "consumer_actor_id": consumer_actor_id,
            "ttl_seconds": ttl_seconds,
        },
    )

    def rule(write: StudyWrite) -> ExecutionGrant:
        trial = member(write.repo, study_id, trial_id, "Approve an exact member trial.")
        if expected_material_sha256 != trial.material.sha256:
            raise refuse("Composed material differs. Review the exact trial.", "stale")
        material = write.context.materials.load(trial.material)
        if material.builtin:
            raise refuse(
                "Built-in trainer execution remains owner-only; "
                "no delegated execution grant applies.",
                "unsupported",
            )
        grant = write.context.access.grant_execution(
            study_id=study_id,
            trial_id=trial.id,
            material_sha256=trial.material.sha256,
            consumer_actor_id=consumer_actor_id,
            granted_by=write.actor,
            ttl_seconds=ttl_seconds,
            now=write.now,
        )
        # A grant does not move the study: audited, no new revision.
        write.audit(
            study_id,
            {
                "trial_id": trial.id,
                "material_sha256": trial.material.sha256,
                "approval_id": grant.id,
                "consumer_actor_id": consumer_actor_id,
                "created_at": grant.created_at,
                "expires_at": grant.expires_at,
            },
        )
        return grant

    request = WriteRequest(actor, operation, study_id, revision, key, sha)
    return write_study(context, request, ExecutionGrant, rule)


def admit(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    revision: int,
    admission_epoch: int,
    trial_id: str,
    request_key: str,
    approval_id: str | None,
    parent_run_id: str | None,
) -> Admission:
    key = checked_study_key(actor, request_key, study_id, revision)
    natural(admission_epoch, "Admission epoch")
    identifier(trial_id, "Trial id")
    if approval_id is not None:
        identifier(approval_id, "Approval id")
    if parent_run_id is not None:
        identifier(parent_run_id, "Parent run id")
    sha = admission_request_sha256(
        study_id,
        revision=revision,
        admission_epoch=admission_epoch,
        trial_id=trial_id,
        approval_id=approval_id,
        parent_run_id=parent_run_id,
    )

    def rule(write: StudyWrite) -> Admission:
        study, repo, runs = write.study, write.repo, write.context.runs
        trial = member(repo, study_id, trial_id, "Trial is not a member of this study.")
        material = write.context.materials.load(trial.material)
        if material.builtin:
            write.context.authorize(actor, "studies.admit_builtin", study_id)
        if study.state is not StudyState.OPEN or study.admission_epoch != admission_epoch:
            raise refuse("Study admission epoch is closed.", "stale")
        children = write.context.children(repo, study_id)
        custody = child_custody(run for _, run in children)
        if not custody.ceased or custody.unknown:
            raise refuse("Study already has an active or unknown child.", "unavailable")
        total = study.charged.plus(material.envelope, "Requested total")
        if not total.fits_within(study.limits):
            raise refuse("Finite study budget is exhausted.", "unavailable")
        if parent_run_id is not None:
            parent = repo.reservation_for_run(parent_run_id)
            if parent is None or parent.trial_id != trial.id:
                raise refuse("Retry parent does not belong to this trial.")
            parent_run = write.context.run_of(parent)
            if parent_run.state not in RETRY_PARENT_STATES or not parent_run.ceased:
                raise refuse("Retry requires a ceased failed/cancelled/interrupted parent.")
        # Every earlier child has ceased: settle them now, as reconcile would, so the
        # next admission finds only this one unsettled (cost does not grow with history).
        settled = settle(repo, children, write.now)
        run_id = uuid.uuid4().hex
        if material.builtin:
            if approval_id is not None:
                raise refuse("Built-in owner admission does not consume delegated external grants.")
        elif approval_id is not None:
            write.context.access.consume_execution(
                approval_id,
                study_id=study_id,
                trial_id=trial.id,
                consumer_actor_id=actor,
                material_sha256=trial.material.sha256,
                run_id=run_id,
                now=write.now,
            )
        elif write.context.access.role_of(actor) is not Role.OWNER:
            raise refuse(
                "External execution by a non-owner requires an execution grant.", "forbidden"
            )
        run = runs.admit(
            RunRequest(
                run_id=run_id,
                run_key=admission_run_key(study_id, actor, key),
                request_sha256=sha,
                actor_id=actor,
                study_id=study_id,
                trial_id=trial.id,
                material_sha256=trial.material.sha256,
                parent_run_id=parent_run_id,
                approval_id=approval_id,
            ),
            now=write.now,
        )
        reservation = Reservation(
            id=uuid.uuid4().hex,
            study_id=study_id,
            admission_epoch=study.admission_epoch,
            request_key=key,
            actor_id=actor,
            trial_id=trial.id,
            parent_run_id=parent_run_id,
            run_id=run.id,
            request_sha256=sha,
            material_sha256=trial.material.sha256,
            envelope=material.envelope,
            state=ReservationState.RESERVED,
            settled=None,
        )
        repo.add_reservation(reservation, write.now)
        repo.change(study, charged=total)
        write.advance(
            {
                "run_id": run.id,
                "reservation_id": reservation.id,
                "request_sha256": sha,
                "reservations": settled,
            }
        )
        return Admission(reservation=reservation, run=run)

    request = WriteRequest(actor, ADMIT, study_id, revision, key, sha)
    return write_study(context, request, Admission, rule, key_is_study_wide=True)
