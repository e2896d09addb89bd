"""The study aggregate's values as the repository hands them out: row -> view mappers,
:class:`StudyRecord` (a locked study a write changes), and the stored receipt, candidate,
audit entry and receipt entry values.

No SQL here: :mod:`benchledger.repositories.studies` runs the statements and maps
their rows with these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import attrs

from benchledger.domain.study import DIMENSIONS, Budget, ReservationState, StudyState, bounded_json
from benchledger.domain.study_rules import settled_charge
from benchledger.domain.study_runs import MaterialRef
from benchledger.domain.study_views import Candidate, Reservation, Study, StudySummary, Trial


def budget_of(row: object, prefix: str) -> Budget:
    return Budget(*(getattr(row, f"{prefix}{name}") for name in DIMENSIONS))


def budget_columns(prefix: str, value: Budget) -> dict[str, int]:
    return {f"{prefix}{name}": item for name, item in zip(DIMENSIONS, value.values(), strict=True)}


def study_view(row: Any, trial_ids: Sequence[str]) -> Study:
    return Study(
        id=row.id,
        revision=row.revision,
        name=row.name,
        state=row.state,
        admission_epoch=row.admission_epoch,
        limits=budget_of(row, "limit_"),
        policy_sha256=row.policy_sha256,
        membership_revision=row.membership_revision,
        trial_ids=tuple(trial_ids),
        stop_receipt_id=row.stop_receipt_id,
    )


def summary_view(row: Any, trial_count: int) -> StudySummary:
    return StudySummary(
        id=row.id,
        revision=row.revision,
        name=row.name,
        state=row.state,
        admission_epoch=row.admission_epoch,
        limits=budget_of(row, "limit_"),
        policy_sha256=row.policy_sha256,
        membership_revision=row.membership_revision,
        trial_count=trial_count,
        stop_receipt_id=row.stop_receipt_id,
    )


def trial_view(row: Any) -> Trial:
    return Trial(
        id=row.id,
        study_id=row.study_id,
        material=MaterialRef(row.material_sha256),
        replicate=row.replicate,
        membership_revision=row.membership_revision,
    )


def reservation_view(row: Any) -> Reservation:
    envelope = budget_of(row, "envelope_")
    return Reservation(
        id=row.id,
        study_id=row.study_id,
        admission_epoch=row.admission_epoch,
        request_key=row.request_key,
        actor_id=row.actor_id,
        trial_id=row.trial_id,
        parent_run_id=row.parent_run_id,
        run_id=row.run_id,
        request_sha256=row.request_sha256,
        material_sha256=row.material_sha256,
        envelope=envelope,
        state=row.state,
        settled=settled_charge(ReservationState(row.state), envelope),
    )


class StudyRecord:
    """A study row as the service sees it: read its fields, change it through the repository.

    It holds the row's values as read in this transaction, with the changes made
    through the repository (written with the study's next revision by ``finish``).
    """

    __slots__ = ("_row",)

    def __init__(self, values: Mapping[Any, Any]) -> None:
        self._row = SimpleNamespace(**values)

    @property
    def id(self) -> str:
        return str(self._row.id)

    @property
    def name(self) -> str:
        return str(self._row.name)

    @property
    def admission_epoch(self) -> int:
        return int(self._row.admission_epoch)

    @property
    def revision(self) -> int:
        return int(self._row.revision)

    @property
    def membership_revision(self) -> int:
        return int(self._row.membership_revision)

    @property
    def policy_sha256(self) -> str:
        return str(self._row.policy_sha256)

    @property
    def stop_receipt_id(self) -> str | None:
        value = self._row.stop_receipt_id
        return None if value is None else str(value)

    @property
    def state(self) -> StudyState:
        return StudyState(self._row.state)

    @property
    def limits(self) -> Budget:
        return budget_of(self._row, "limit_")

    @property
    def charged(self) -> Budget:
        return budget_of(self._row, "charged_")

    def summary(self, trial_count: int) -> StudySummary:
        return summary_view(self._row, trial_count)

    def view(self, trial_ids: Sequence[str]) -> Study:
        return study_view(self._row, trial_ids)

    def columns(self) -> dict[str, Any]:
        """The row's values as they stand (what the repository writes)."""
        return dict(vars(self._row))

    def update(self, values: Mapping[str, Any]) -> None:
        """Set columns (the repository's :meth:`~StudyRepository.change` and
        :meth:`~StudyRepository.next_revision`; nothing is written here)."""
        for column, value in values.items():
            setattr(self._row, column, value)


@attrs.frozen
class StoredReceipt:
    """A write's receipt as stored: the request digest it is bound to, and its document."""

    request_sha256: str
    receipt_json: str


@attrs.frozen
class StoredCandidate:
    """A retained candidate as stored, with the sha256 recorded beside it."""

    candidate: Candidate
    candidate_sha256: str


@attrs.frozen
class AuditEntry:
    """One entry of the study audit log, as a write makes it."""

    action: str
    subject_id: str
    actor_id: str
    details: object
    now: float

    def values(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "subject_id": self.subject_id,
            "actor_id": self.actor_id,
            "details_json": bounded_json(self.details, "Audit details"),
            "recorded_at": self.now,
        }


@attrs.frozen
class ReceiptEntry:
    """A write's receipt: its request key bound to its digest and what it returned."""

    actor_id: str
    operation: str
    key: str
    request_sha256: str
    study_id: str | None
    document: object
    now: float

    def values(self) -> dict[str, Any]:
        return {
            "actor_id": self.actor_id,
            "operation": self.operation,
            "request_key": self.key,
            "request_sha256": self.request_sha256,
            "study_id": self.study_id,
            "receipt_json": bounded_json(self.document, "A receipt"),
            "created_at": self.now,
        }
