"""The one write path of a study: a unit of work around each write's own rule.

:func:`write` is the unit every study write runs in: one transaction (run
again if it loses a race, then a replay answers), the study repository built
on it, and the actor authorized for the operation first. Its ``work`` gets the
repository and the time; it never sees a session.

:func:`write_study`, the write of one existing study, is built on it and does,
inside that transaction:

1. lock the study row;
2. replay: a receipt for (actor, operation, request key) is returned as it was
   stored, writing nothing (the same key with other inputs is a ``conflict``);
3. check the revision the caller last saw (``stale``);
4. run the write's **rule**, which states only what this write checks and changes,
   and calls :meth:`StudyWrite.advance`, its last change, when the study moves to a
   new revision;
5. store the receipt the rule returned, with the new revision and its audit entry
   (on PostgreSQL all three in one statement).

A study's revision moves one way only: :func:`next_revision` (the repository's
``next_revision`` and the audit entry), then ``StudyRepository.finish``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from benchledger import tracing
from benchledger.db import retry_lost_races
from benchledger.domain.canonical import CanonicalJsonError, parse_canonical_json
from benchledger.domain.study import identifier, natural, refuse, request_key
from benchledger.domain.study_documents import from_document, to_document
from benchledger.domain.study_views import Study
from benchledger.repositories.studies import StudyRepository
from benchledger.repositories.study_records import (
    AuditEntry,
    ReceiptEntry,
    StoredReceipt,
    StudyRecord,
)
from benchledger.services.studies.context import StudyContext, locked

_T = TypeVar("_T")
#: Tries of one write transaction that keeps losing races (then ``conflict``).
WRITE_ATTEMPTS = 3


def write(
    context: StudyContext,
    actor: str,
    operation: str | None,
    work: Callable[[StudyRepository, float], _T],
    *,
    study_id: str | None = None,
) -> _T:
    """Run ``work`` in one write transaction, the actor authorized for ``operation`` first.

    A lost race runs it again (a write that got through is then replayed).
    ``study_id`` is the study the operation is authorized on; ``operation``
    ``None`` authorizes nothing (bootstrapping the first owner, who has no role yet).
    Traced as one ``benchledger.study.write`` span with the operation and study id
    (each when given), an error if the write is refused.
    """

    def attempt() -> _T:
        with context.db.write() as session:
            now = context.now()
            repo = StudyRepository(session)
            if operation is not None:
                context.authorize(actor, operation, study_id)
            return work(repo, now)

    # One span (benchledger.study.write) around the transaction and its retries.
    with tracing.span(tracing.STUDY_WRITE) as traced:
        if traced.is_recording():
            traced.set_attributes({tracing.STUDY_OPERATION: operation, tracing.STUDY_ID: study_id})
        return retry_lost_races(
            attempt,
            attempts=WRITE_ATTEMPTS,
            collided=lambda: refuse("Concurrent writes collided; retry.", "conflict"),
        )


def next_revision(
    repo: StudyRepository,
    study: StudyRecord,
    action: str,
    actor: str,
    details: Mapping[str, Any],
    now: float,
) -> AuditEntry:
    """The study's next revision (written by ``repo.finish``) and its audit entry.

    The entry carries the new revision and the study's admission epoch, so
    every change to the study is made before this, the write's last change.
    """
    revision = repo.next_revision(study, now)
    return AuditEntry(
        action,
        study.id,
        actor,
        {**details, "revision": revision, "epoch": study.admission_epoch},
        now,
    )


@attrs.frozen
class WriteRequest:
    """Who writes what to which study: the identity a receipt is bound to."""

    actor: str
    operation: str
    study_id: str
    revision: int
    key: str
    sha256: str


def checked_key(actor: str, key: str) -> str:
    """Validate a write's actor, and return its request key."""
    identifier(actor, "Actor id")
    return request_key(key)


def checked_study_key(actor: str, key: str, study_id: str, revision: int) -> str:
    """Validate a study write's actor, study id and the revision its caller saw; its key."""
    identifier(actor, "Actor id")
    identifier(study_id, "Study id")
    natural(revision, "Study revision", 1)
    return request_key(key)


@attrs.define
class StudyWrite:
    """What a write's rule works with: the locked study, its repository, the ports, the time."""

    context: StudyContext
    repo: StudyRepository
    study: StudyRecord
    request: WriteRequest
    now: float

    @property
    def actor(self) -> str:
        return self.request.actor

    advanced: AuditEntry | None = None

    def advance(self, details: Mapping[str, Any], action: str | None = None) -> None:
        """A new study revision, audited (under ``action``, else the operation) with its epoch.

        Written with the write's receipt, once the rule returns (the rule's last change).
        """
        self.advanced = next_revision(
            self.repo, self.study, action or self.request.operation, self.actor, details, self.now
        )

    def audit(self, subject_id: str, details: Mapping[str, Any]) -> None:
        """An audit entry under this write's operation (for writes that keep the revision)."""
        self.repo.audit(self.request.operation, subject_id, self.actor, details, self.now)

    def view(self) -> Study:
        """The study as it stands now in this transaction."""
        return self.repo.view(self.study)


def write_study(
    context: StudyContext,
    request: WriteRequest,
    receipt: type[_T],
    rule: Callable[[StudyWrite], _T],
    *,
    key_is_study_wide: bool = False,
) -> _T:
    """Run ``rule`` as one idempotent, revision-checked, audited write of a study.

    ``receipt`` is the type the rule returns, which a replay rebuilds from the
    stored receipt. ``key_is_study_wide``: the request key also names something
    inside the study (an admission's reservation), so another actor's use of
    the same key is a ``conflict``, before the revision is checked.
    """

    def work(repo: StudyRepository, now: float) -> _T:
        study = locked(repo, request.study_id)
        stored, claimed = repo.receipt_and_claim(
            request.actor,
            request.operation,
            request.key,
            request.study_id if key_is_study_wide else None,
        )
        if stored is not None:
            return replayed(stored, request, receipt)
        if claimed:
            raise refuse("Admission key is bound to different actor/inputs.", "conflict")
        if study.revision != request.revision:
            raise refuse("Study changed. Reload.", "stale")
        write = StudyWrite(context, repo, study, request, now)
        value = rule(write)
        if write.advanced is None:
            store_receipt(repo, request, request.study_id, value, now)
        else:
            repo.finish(study, write.advanced, receipt_entry(request, request.study_id, value, now))
        return value

    return write(context, request.actor, request.operation, work, study_id=request.study_id)


def store_receipt(
    repo: StudyRepository, request: WriteRequest, study_id: str, value: object, now: float
) -> None:
    """Bind the request key to its digest and to what the write returned."""
    repo.add_receipt(
        actor_id=request.actor,
        operation=request.operation,
        key=request.key,
        request_sha256=request.sha256,
        study_id=study_id,
        document=to_document(value),
        now=now,
    )


def receipt_entry(request: WriteRequest, study_id: str, value: object, now: float) -> ReceiptEntry:
    """The receipt :func:`store_receipt` stores, as a value (written by ``finish``)."""
    return ReceiptEntry(
        request.actor,
        request.operation,
        request.key,
        request.sha256,
        study_id,
        to_document(value),
        now,
    )


def replay(repo: StudyRepository, request: WriteRequest, receipt: type[_T]) -> _T | None:
    """The stored receipt of this request key, or ``None`` the first time."""
    stored = repo.receipt(request.actor, request.operation, request.key)
    return None if stored is None else replayed(stored, request, receipt)


def replayed(stored: StoredReceipt, request: WriteRequest, receipt: type[_T]) -> _T:
    """A stored receipt as the write returned it (``conflict`` if bound to other inputs)."""
    if stored.request_sha256 != request.sha256:
        raise refuse("Request key is bound to different inputs.", "conflict")
    try:
        document = parse_canonical_json(stored.receipt_json)
    except CanonicalJsonError:
        raise refuse("Stored receipt is not canonical JSON.", "unavailable") from None
    return from_document(receipt, document)
