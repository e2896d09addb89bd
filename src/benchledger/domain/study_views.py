"""What a study's reads and writes return: immutable views.

A :class:`Study` at one revision and its listings, trials and reservations,
grants, admissions, stop receipts, checkpoints and candidates. Each is an
attrs value; stored receipts are encoded and read back by
:mod:`~benchledger.domain.study_documents`. Pure: no SQL, no I/O.
"""

from __future__ import annotations

from typing import Any

import attrs

from benchledger.domain.canonical import sha256_json
from benchledger.domain.study import (
    Budget,
    ReservationState,
    StudyState,
    as_enum,
    boolean,
    field_check,
    natural,
    sha256_hex,
)
from benchledger.domain.study_documents import to_document
from benchledger.domain.study_runs import MaterialRef, Run


def _study_state(value: object) -> StudyState:
    return as_enum(StudyState, value, "study state")


def _reservation_state(value: object) -> ReservationState:
    return as_enum(ReservationState, value, "reservation state")


# -- views -----------------------------------------------------------------------------


@attrs.frozen
class Study:
    """A study at one revision (a ``study_v1`` document)."""

    id: str
    revision: int
    name: str
    state: StudyState = attrs.field(converter=_study_state)
    admission_epoch: int
    limits: Budget
    policy_sha256: str
    membership_revision: int
    trial_ids: tuple[str, ...]
    stop_receipt_id: str | None

    @property
    def open(self) -> bool:
        return self.state is StudyState.OPEN


@attrs.frozen
class StudySummary:
    """A study in a listing: everything but the member list, plus its size."""

    id: str
    revision: int
    name: str
    state: StudyState = attrs.field(converter=_study_state)
    admission_epoch: int
    limits: Budget
    policy_sha256: str
    membership_revision: int
    trial_count: int
    stop_receipt_id: str | None

    @property
    def open(self) -> bool:
        return self.state is StudyState.OPEN


@attrs.frozen
class Trial:
    """An immutable member: one material and one replicate number."""

    id: str
    study_id: str
    material: MaterialRef
    replicate: int
    membership_revision: int


@attrs.frozen
class Reservation:
    """A conservative charge for one admitted run attempt."""

    id: str
    study_id: str
    admission_epoch: int
    request_key: str
    actor_id: str
    trial_id: str
    parent_run_id: str | None
    run_id: str
    request_sha256: str
    material_sha256: str
    envelope: Budget
    state: ReservationState = attrs.field(converter=_reservation_state)
    settled: Budget | None

    @property
    def charge(self) -> Budget:
        """Worst case: the whole envelope, settled or not."""
        return self.envelope


@attrs.frozen
class PageInfo:
    offset: int
    limit: int
    total: int
    study_revision: int
    next_offset: int | None


@attrs.frozen
class StudyPage:
    """``get``: the study, one page of its reservations, and what is charged."""

    study: Study
    reservations: tuple[Reservation, ...]
    charged: Budget
    page: PageInfo

    @property
    def remaining(self) -> Budget:
        return self.study.limits.remaining(self.charged)


@attrs.frozen
class StudyList:
    studies: tuple[StudySummary, ...]
    limit: int
    next_cursor: str | None


@attrs.frozen
class ExecutionGrant:
    """An owner's time-limited grant for one actor to execute one exact trial material."""

    id: str
    study_id: str
    trial_id: str
    material_sha256: str
    consumer_actor_id: str
    granted_by: str
    created_at: float
    expires_at: float


@attrs.frozen
class Admission:
    """``admit``'s receipt: the reservation and the run as admitted."""

    reservation: Reservation
    run: Run


@attrs.frozen
class StopReceipt:
    """``stop``'s receipt: the closed epoch and the runs still to be ceased."""

    study_id: str
    stop_receipt_id: str
    admission_epoch: int
    run_ids: tuple[str, ...]


@attrs.frozen
class StopOutcome:
    receipt: StopReceipt
    status: StudyPage


@attrs.frozen
class Checkpoint:
    """One entry of a run's checkpoint index (in index order)."""

    sha256: str = attrs.field(
        validator=field_check(lambda v, _n: sha256_hex(v, "Checkpoint sha256"))
    )
    step: int = attrs.field(validator=field_check(lambda v, _n: natural(v, "Checkpoint step")))
    selected: bool = attrs.field(
        default=False, validator=field_check(lambda v, _n: boolean(v, "Checkpoint selected"))
    )


@attrs.frozen
class Candidate:
    """A retained diagnostic decision (a ``candidate_v1`` document)."""

    id: str
    study_id: str
    trial_id: str
    run_id: str
    checkpoint_sha256: str
    evaluation_sha256: str
    policy_sha256: str
    decision: str
    limitations: tuple[str, ...]

    def to_document(self) -> dict[str, Any]:
        return {"format": "candidate_v1", **to_document(self)}

    @property
    def sha256(self) -> str:
        return sha256_json(self.to_document())


@attrs.frozen
class CandidateRef:
    id: str
    sha256: str


@attrs.frozen
class CandidateResult:
    ref: CandidateRef
    candidate: Candidate
    run_id: str
    checkpoint: Checkpoint


@attrs.frozen
class CandidatePage:
    run_id: str
    candidates: tuple[CandidateRef, ...]
    limit: int
    next_cursor: str | None
