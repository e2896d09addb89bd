"""Read-only SQL behind the dashboard's study pages.

Every list is bounded with ``LIMIT``; budget splits are aggregates the
database computes. Nothing here writes, locks or commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.db import consistent_snapshot
from benchledger.models.study import (
    AuditRow,
    CandidateRow,
    ReservationRow,
    RunRow,
    StudyRow,
    TrialRow,
)

DIMENSIONS = ("attempt_slots", "admitted_wall_seconds", "retained_bytes", "peak_staging_bytes")

_UNSETTLED_SUMS = sa.select(
    *(
        sa.func.coalesce(sa.func.sum(getattr(ReservationRow, f"envelope_{name}")), 0)
        for name in DIMENSIONS
    ),
    sa.func.count(),
).where(
    ReservationRow.study_id == sa.bindparam("study_id"),
    sa.text("study_reservations.state <> 'settled'"),
)


class StudyViewRepository:
    """The dashboard's study reads, on the caller's (read) session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def snapshot(self) -> None:
        """One consistent snapshot for the transaction (before its first query)."""
        consistent_snapshot(self.session)

    def study(self, study_id: str) -> StudyRow | None:
        return self.session.get(StudyRow, study_id)

    def page(self, after: str | None, limit: int) -> Sequence[StudyRow]:
        query = sa.select(StudyRow).order_by(StudyRow.id).limit(limit)
        if after is not None:
            query = query.where(StudyRow.id > after)
        return list(self.session.scalars(query))

    def trial_counts(self, study_ids: Sequence[str]) -> dict[str, int]:
        counts = dict.fromkeys(study_ids, 0)
        if study_ids:
            rows = self.session.execute(
                sa.select(TrialRow.study_id, sa.func.count())
                .where(TrialRow.study_id.in_(study_ids))
                .group_by(TrialRow.study_id)
            )
            counts.update({str(study_id): int(count) for study_id, count in rows})
        return counts

    def unsettled(self, study_id: str) -> tuple[tuple[int, ...], int]:
        """The envelopes still reserved (not settled), summed per dimension, and how many."""
        row = self.session.execute(_UNSETTLED_SUMS, {"study_id": study_id}).one()
        return tuple(int(value) for value in row[:-1]), int(row[-1])

    def reservation_count(self, study_id: str) -> int:
        """The last position: reservations are numbered 1, 2, ... without gaps."""
        value = self.session.scalar(
            sa.select(ReservationRow.position)
            .where(ReservationRow.study_id == study_id)
            .order_by(ReservationRow.position.desc())
            .limit(1)
        )
        return int(value or 0)

    def trials(self, study_id: str, limit: int) -> Sequence[TrialRow]:
        return list(
            self.session.scalars(
                sa.select(TrialRow)
                .where(TrialRow.study_id == study_id)
                .order_by(TrialRow.membership_revision, TrialRow.id)
                .limit(limit)
            )
        )

    def runs(self, study_id: str, limit: int) -> Sequence[Any]:
        """The newest reservations with their run's state (newest admission first)."""
        return self.session.execute(
            sa.select(
                ReservationRow.position,
                ReservationRow.run_id,
                ReservationRow.trial_id,
                ReservationRow.admission_epoch,
                ReservationRow.actor_id,
                ReservationRow.parent_run_id,
                ReservationRow.state.label("reservation_state"),
                RunRow.state.label("run_state"),
                RunRow.custody_ceased,
                ReservationRow.created_at,
                RunRow.updated_at.label("run_updated_at"),
            )
            .select_from(ReservationRow)
            .outerjoin(RunRow, RunRow.id == ReservationRow.run_id)
            .where(ReservationRow.study_id == study_id)
            .order_by(ReservationRow.position.desc())
            .limit(limit)
        ).all()

    def run_states(self, study_id: str) -> dict[str, int]:
        rows = self.session.execute(
            sa.select(RunRow.state, sa.func.count())
            .select_from(ReservationRow)
            .join(RunRow, RunRow.id == ReservationRow.run_id)
            .where(ReservationRow.study_id == study_id)
            .group_by(RunRow.state)
        )
        return {str(state): int(count) for state, count in rows}

    def candidates(self, study_id: str, limit: int) -> Sequence[CandidateRow]:
        """The study's retained candidates, newest first."""
        return list(
            self.session.scalars(
                sa.select(CandidateRow)
                .where(CandidateRow.study_id == study_id)
                .order_by(CandidateRow.created_at.desc(), CandidateRow.id.desc())
                .limit(limit)
            )
        )

    def audit(self, study_id: str, before: int | None, limit: int) -> Sequence[AuditRow]:
        """The study's audit entries, newest first, below the id ``before``."""
        query = sa.select(AuditRow).where(AuditRow.subject_id == study_id)
        if before is not None:
            query = query.where(AuditRow.id < before)
        return list(self.session.scalars(query.order_by(AuditRow.id.desc()).limit(limit)))

    def history(self, study_id: str, limit: int) -> Sequence[AuditRow]:
        """The study's own revisions (create, open, stop, continue...), oldest first."""
        return list(
            self.session.scalars(
                sa.select(AuditRow)
                .where(AuditRow.subject_id == study_id)
                .order_by(AuditRow.id)
                .limit(limit)
            )
        )
