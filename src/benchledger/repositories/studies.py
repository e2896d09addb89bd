"""All SQL of the study aggregate: studies, members, reservations, candidates, receipts, audit.

A repository works inside the caller's session and never commits; the service
owns the transaction. Writes to one study start with :meth:`StudyRepository.lock`
(``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already
serializes writers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from benchledger.domain.canonical import canonical_json
from benchledger.domain.study import (
    DIMENSIONS,
    Budget,
    MaterialRef,
    Reservation,
    Study,
    StudySummary,
    Trial,
    bounded_json,
)
from benchledger.models.base import Base
from benchledger.models.study import (
    AuditRow,
    CandidateRow,
    OperationReceiptRow,
    ReservationRow,
    StudyPolicyRow,
    StudyRow,
    TrialRow,
)

# The partial index's predicate as literal SQL: a planner matches it only so.
_UNSETTLED = sa.text("study_reservations.state <> 'settled'")


def insert_if_absent(session: Session, model: type[Base], values: dict[str, Any]) -> None:
    """``INSERT ... ON CONFLICT DO NOTHING`` on the primary key (content-addressed rows)."""
    dialect = session.get_bind().dialect.name
    statement: Any
    if dialect == "postgresql":
        statement = postgresql.insert(model).values(**values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        statement = sqlite.insert(model).values(**values).on_conflict_do_nothing()
    else:  # pragma: no cover - only the two supported backends
        raise NotImplementedError(dialect)
    session.execute(statement)


def budget_of(row: object, prefix: str) -> Budget:
    return Budget(*(getattr(row, f"{prefix}{name}") for name in DIMENSIONS))


def budget_columns(prefix: str, value: Budget) -> dict[str, int]:
    return {f"{prefix}{name}": item for name, item in zip(DIMENSIONS, value.values(), strict=True)}


def study_view(row: StudyRow, trial_ids: Sequence[str]) -> Study:
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


def summary_view(row: StudyRow, trial_count: int) -> StudySummary:
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


def trial_view(row: TrialRow) -> Trial:
    return Trial(
        id=row.id,
        study_id=row.study_id,
        material=MaterialRef(row.material_sha256),
        replicate=row.replicate,
        membership_revision=row.membership_revision,
    )


def reservation_view(row: ReservationRow) -> Reservation:
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
        # Conservative: a settled attempt is charged its whole envelope.
        settled=envelope if row.state == "settled" else None,
    )


class StudyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # -- policies --------------------------------------------------------------------------

    def store_policy(self, sha256: str, document: object, now: float) -> None:
        insert_if_absent(
            self.session,
            StudyPolicyRow,
            {"sha256": sha256, "policy_json": canonical_json(document), "created_at": now},
        )

    def policy_json(self, sha256: str) -> str | None:
        return self.session.scalar(
            sa.select(StudyPolicyRow.policy_json).where(StudyPolicyRow.sha256 == sha256)
        )

    # -- studies ---------------------------------------------------------------------------

    def lock(self, study_id: str) -> StudyRow | None:
        """The study row, locked for this transaction (PostgreSQL ``FOR UPDATE``)."""
        return self.session.scalar(
            sa.select(StudyRow)
            .where(StudyRow.id == study_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )

    def get(self, study_id: str) -> StudyRow | None:
        return self.session.get(StudyRow, study_id)

    def add(self, row: StudyRow) -> None:
        self.session.add(row)
        self.session.flush()

    def page(self, cursor: str | None, limit: int) -> list[StudyRow]:
        query = sa.select(StudyRow).order_by(StudyRow.id).limit(limit)
        if cursor is not None:
            query = query.where(StudyRow.id > cursor)
        return list(self.session.scalars(query))

    def flush(self) -> None:
        self.session.flush()

    def snapshot(self) -> None:
        """Make this read transaction one consistent snapshot (PostgreSQL; SQLite's is already).

        Must run before the transaction's first query.
        """
        if self.session.get_bind().dialect.name == "postgresql":
            self.session.execute(
                sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            )

    # -- members -----------------------------------------------------------------------------

    def trial_ids(self, study_id: str, membership_revision: int | None = None) -> list[str]:
        query = sa.select(TrialRow.id).where(TrialRow.study_id == study_id)
        if membership_revision is not None:
            query = query.where(TrialRow.membership_revision <= membership_revision)
        return list(self.session.scalars(query.order_by(TrialRow.membership_revision)))

    def trial_counts(self, study_ids: Iterable[str]) -> dict[str, int]:
        ids = list(study_ids)
        if not ids:
            return {}
        rows = self.session.execute(
            sa.select(TrialRow.study_id, sa.func.count())
            .where(TrialRow.study_id.in_(ids))
            .group_by(TrialRow.study_id)
        )
        counts = {study_id: 0 for study_id in ids}
        counts.update({study_id: int(count) for study_id, count in rows})
        return counts

    def trial(self, trial_id: str) -> TrialRow | None:
        return self.session.get(TrialRow, trial_id)

    def trial_with_material(
        self, study_id: str, material_sha256: str, replicate: int
    ) -> TrialRow | None:
        return self.session.scalar(
            sa.select(TrialRow).where(
                TrialRow.study_id == study_id,
                TrialRow.material_sha256 == material_sha256,
                TrialRow.replicate == replicate,
            )
        )

    def add_trial(self, row: TrialRow) -> None:
        self.session.add(row)
        self.session.flush()

    # -- reservations ----------------------------------------------------------------------

    def reservation_count(self, study_id: str) -> int:
        """How many reservations the study has: its last position (one index seek).

        Positions are 1, 2, ... without gaps (each admission takes the next one
        under the study lock, and reservations are never deleted), so the last
        is the count, without walking the history as ``count(*)`` would.
        """
        return self.last_position(study_id)

    def reservations(self, study_id: str, offset: int, limit: int) -> list[ReservationRow]:
        return list(
            self.session.scalars(
                sa.select(ReservationRow)
                .where(ReservationRow.study_id == study_id)
                .order_by(ReservationRow.position)
                .offset(offset)
                .limit(limit)
            )
        )

    def unsettled(self, study_id: str) -> list[ReservationRow]:
        """Reservations whose run has not been seen ceased (settled ones never change).

        Served by the partial index ``ix_study_reservations_unsettled`` in
        position order: the settled history is never walked.
        """
        return list(
            self.session.scalars(
                sa.select(ReservationRow)
                .where(ReservationRow.study_id == study_id, _UNSETTLED)
                .order_by(ReservationRow.position)
            )
        )

    def last_position(self, study_id: str) -> int:
        return int(
            self.session.scalar(
                sa.select(sa.func.max(ReservationRow.position)).where(
                    ReservationRow.study_id == study_id
                )
            )
            or 0
        )

    def reservation_for_request(self, study_id: str, key: str) -> ReservationRow | None:
        return self.session.scalar(
            sa.select(ReservationRow).where(
                ReservationRow.study_id == study_id, ReservationRow.request_key == key
            )
        )

    def reservation_for_run(self, run_id: str) -> ReservationRow | None:
        return self.session.scalar(sa.select(ReservationRow).where(ReservationRow.run_id == run_id))

    def add_reservation(self, row: ReservationRow) -> None:
        self.session.add(row)
        self.session.flush()

    def charged_total(self, study_id: str) -> Budget:
        """The sum of every reservation's envelope, recomputed (checks ``charged_*``)."""
        row = self.session.execute(
            sa.select(
                *(
                    sa.func.coalesce(sa.func.sum(getattr(ReservationRow, f"envelope_{name}")), 0)
                    for name in DIMENSIONS
                )
            ).where(ReservationRow.study_id == study_id)
        ).one()
        return Budget(*(int(value) for value in row))

    # -- candidates ------------------------------------------------------------------------

    def add_candidate(self, row: CandidateRow) -> None:
        self.session.add(row)
        self.session.flush()

    def candidate(self, candidate_id: str) -> CandidateRow | None:
        return self.session.get(CandidateRow, candidate_id)

    def candidate_ids_for_run(self, run_id: str, cursor: str | None, limit: int) -> list[str]:
        query = sa.select(CandidateRow.id).where(CandidateRow.run_id == run_id)
        if cursor is not None:
            query = query.where(CandidateRow.id > cursor)
        return list(self.session.scalars(query.order_by(CandidateRow.id).limit(limit)))

    # -- receipts and audit ------------------------------------------------------------------

    def receipt(self, actor_id: str, operation: str, key: str) -> OperationReceiptRow | None:
        return self.session.get(OperationReceiptRow, (actor_id, operation, key))

    def add_receipt(
        self,
        *,
        actor_id: str,
        operation: str,
        key: str,
        request_sha256: str,
        study_id: str | None,
        document: object,
        now: float,
    ) -> None:
        row = OperationReceiptRow(
            actor_id=actor_id,
            operation=operation,
            request_key=key,
            request_sha256=request_sha256,
            study_id=study_id,
            receipt_json=bounded_json(document, "A receipt"),
            created_at=now,
        )
        self.session.add(row)
        self.session.flush()

    def audit(
        self, action: str, subject_id: str, actor_id: str, details: object, now: float
    ) -> None:
        self.session.execute(
            sa.insert(AuditRow).values(
                action=action,
                subject_id=subject_id,
                actor_id=actor_id,
                details_json=bounded_json(details, "Audit details"),
                recorded_at=now,
            )
        )

    def audit_trail(self, subject_id: str | None = None) -> list[AuditRow]:
        query = sa.select(AuditRow).order_by(AuditRow.id)
        if subject_id is not None:
            query = query.where(AuditRow.subject_id == subject_id)
        return list(self.session.scalars(query))
