"""Candidates: retain one checkpoint of a completed member run, and read it back verified."""

from __future__ import annotations

import uuid

from benchledger.domain.study import (
    CANDIDATE_DECISION,
    CANDIDATE_LIMITATIONS,
    MAX_LIST_PAGE,
    RunState,
    identifier,
    page_limit,
    refuse,
    request_sha256,
    sha256_hex,
)
from benchledger.domain.study_evidence import select_checkpoint, validate_candidate_evidence
from benchledger.domain.study_views import Candidate, CandidatePage, CandidateRef, CandidateResult
from benchledger.repositories.studies import StudyRepository
from benchledger.repositories.study_records import StoredCandidate
from benchledger.services.studies.context import StudyContext, stored_policy
from benchledger.services.studies.write import (
    StudyWrite,
    WriteRequest,
    checked_study_key,
    write_study,
)


def select_candidate(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    revision: int,
    trial_id: str,
    run_id: str,
    request_key: str,
    checkpoint_sha256: str | None,
) -> CandidateResult:
    operation = "studies.select_candidate"
    key = checked_study_key(actor, request_key, study_id, revision)
    identifier(trial_id, "Trial id")
    identifier(run_id, "Run id")
    if checkpoint_sha256 is not None:
        sha256_hex(checkpoint_sha256, "Checkpoint sha256")
    sha = request_sha256(
        operation,
        study_id,
        {
            "revision": revision,
            "trial_id": trial_id,
            "run_id": run_id,
            "checkpoint_sha256": checkpoint_sha256,
        },
    )

    def rule(write: StudyWrite) -> CandidateResult:
        repo = write.repo
        policy = stored_policy(repo, write.study.policy_sha256)
        trial = repo.trial(trial_id)
        if trial is None:
            raise refuse("Trial not found.", "not_found")
        if trial.study_id != study_id:
            raise refuse("Trial belongs to another study.")
        reservation = repo.reservation_for_run(run_id)
        if reservation is None or reservation.trial_id != trial.id:
            raise refuse("Run does not belong to the selected trial.")
        evidence = validate_candidate_evidence(
            write.context.evidence.load(run_id), trial.material.sha256
        )
        checkpoint = select_checkpoint(evidence, policy, checkpoint_sha256)
        run = write.context.run_of(reservation)
        if run.state is not RunState.COMPLETED:
            raise refuse("Candidate Run is not completed.", "conflict")
        if evidence.evaluation_sha256 is None:
            raise refuse("Candidate evaluation artifact is unavailable.", "unavailable")
        candidate = Candidate(
            id=uuid.uuid4().hex,
            study_id=study_id,
            trial_id=trial.id,
            run_id=run_id,
            checkpoint_sha256=checkpoint.sha256,
            evaluation_sha256=evidence.evaluation_sha256,
            policy_sha256=write.study.policy_sha256,
            decision=CANDIDATE_DECISION,
            limitations=CANDIDATE_LIMITATIONS,
        )
        repo.add_candidate(candidate, write.actor, write.now)
        write.audit(
            candidate.id,
            {
                "study_id": study_id,
                "run_id": run_id,
                "checkpoint_sha256": checkpoint.sha256,
                "decision": candidate.decision,
            },
        )
        write.advance({"candidate_id": candidate.id}, action="studies.candidate_selected")
        return CandidateResult(
            ref=CandidateRef(candidate.id, candidate.sha256),
            candidate=candidate,
            run_id=run_id,
            checkpoint=checkpoint,
        )

    request = WriteRequest(actor, operation, study_id, revision, key, sha)
    return write_study(context, request, CandidateResult, rule)


def candidate(context: StudyContext, actor: str, candidate_id: str) -> CandidateResult:
    identifier(actor, "Actor id")
    identifier(candidate_id, "Candidate id")
    with context.reading(actor, "studies.candidate") as repo:
        stored = repo.candidate(candidate_id)
        if stored is None:
            raise refuse("Candidate not found.", "not_found")
        return verified(context, repo, stored)


def candidates(
    context: StudyContext, actor: str, run_id: str, *, cursor: str | None, limit: int
) -> CandidatePage:
    identifier(actor, "Actor id")
    identifier(run_id, "Run id")
    page_limit(limit, MAX_LIST_PAGE)
    if cursor is not None:
        identifier(cursor, "Cursor")
    with context.reading(actor, "studies.candidates") as repo:
        context.runs.load(run_id)
        ids = repo.candidate_ids_for_run(run_id, cursor, limit + 1)
        refs = []
        for candidate_id in ids[:limit]:
            stored = repo.candidate(candidate_id)
            if stored is None or stored.candidate.run_id != run_id:
                raise refuse("Candidate Run association differs.", "unavailable")
            refs.append(verified(context, repo, stored).ref)
        return CandidatePage(
            run_id=run_id,
            candidates=tuple(refs),
            limit=limit,
            next_cursor=ids[limit - 1] if len(ids) > limit else None,
        )


def verified(
    context: StudyContext, repo: StudyRepository, stored: StoredCandidate
) -> CandidateResult:
    """A stored candidate, checked against its trial, run, policy and current evidence."""
    candidate = stored.candidate
    policy = stored_policy(repo, candidate.policy_sha256)
    trial = repo.trial(candidate.trial_id)
    reservation = repo.reservation_for_run(candidate.run_id)
    if (
        trial is None
        or trial.study_id != candidate.study_id
        or reservation is None
        or reservation.trial_id != trial.id
    ):
        raise refuse("Candidate Run association differs.", "unavailable")
    context.run_of(reservation)
    evidence = validate_candidate_evidence(
        context.evidence.load(candidate.run_id), trial.material.sha256
    )
    checkpoint = select_checkpoint(evidence, policy, candidate.checkpoint_sha256)
    if evidence.evaluation_sha256 != candidate.evaluation_sha256:
        raise refuse("Candidate evaluation identity differs.", "unavailable")
    if candidate.sha256 != stored.candidate_sha256:
        raise refuse("Stored candidate identity differs.", "unavailable")
    return CandidateResult(
        ref=CandidateRef(candidate.id, candidate.sha256),
        candidate=candidate,
        run_id=candidate.run_id,
        checkpoint=checkpoint,
    )
