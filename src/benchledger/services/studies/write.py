"""The one write path of a study: a unit of work around each write's own rule.

:func:`write_study` does, in one transaction (run again if it loses a race):

1. authorize the actor for the operation;
2. lock the study row;
3. replay: a receipt for (actor, operation, request key) is returned as it was
   stored, writing nothing (the same key with other inputs is a ``conflict``);
4. check the revision the caller last saw (``stale``);
5. run the write's **rule**, which states only what this write checks and changes,
   and calls :meth:`StudyWrite.advance`, its last change, when the study moves to a
   new revision;
6. store the receipt the rule returned, with the new revision and its audit entry
   (on PostgreSQL all three in one statement).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
from sqlalchemy.orm import Session

from benchledger.domain.canonical import CanonicalJsonError, parse_canonical_json
from benchledger.domain.study import (
    Study,
    from_document,
    identifier,
    natural,
    refuse,
    request_key,
    to_document,
)
from benchledger.repositories.studies import (
    AuditEntry,
    ReceiptEntry,
    StoredReceipt,
    StudyRecord,
    StudyRepository,
)
from benchledger.services.studies.context import StudyContext, locked

_T = TypeVar("_T")


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
        revision = self.repo.next_revision(self.study, self.now)
        self.advanced = AuditEntry(
            action or self.request.operation,
            self.study.id,
            self.actor,
            {**details, "revision": revision, "epoch": self.study.admission_epoch},
            self.now,
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

    def work(session: Session, now: float) -> _T:
        repo = StudyRepository(session)
        context.authorize(request.actor, request.operation, request.study_id)
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

    return context.transaction(work)


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
