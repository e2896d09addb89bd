"""Read-only study views for operators (the dashboard).

:class:`StudyViews` reads what a study page shows — the budget split into
charged, reserved and remaining per dimension, trials, runs with their
states, candidates, the state history and a page of the audit log — in one
read transaction, each list bounded. It needs no actor: it is for whoever can
already open the database, and it never writes (no reconciliation, no audit
entry). Stored JSON (audit details) is parsed, never trusted as markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from benchledger.db import Database
from benchledger.domain.study import Budget, refuse
from benchledger.domain.study_documents import to_document
from benchledger.domain.study_views import Study, StudySummary
from benchledger.repositories.study_records import budget_of, study_view, summary_view
from benchledger.repositories.study_views import DIMENSIONS, StudyViewRepository

#: The largest page of studies or audit entries.
MAX_PAGE = 100
#: Rows shown of trials, runs and candidates.
SHOWN = 200
#: The largest audit entry id (a signed 64-bit integer, as the databases store it).
MAX_ID = 2**63 - 1


@attrs.frozen
class BudgetBar:
    """One dimension: the limit split into charged (settled), reserved and remaining."""

    dimension: str
    limit: int
    charged: int
    reserved: int
    remaining: int

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class StudyOverview:
    summary: StudySummary
    bars: tuple[BudgetBar, ...]

    def as_payload(self) -> dict[str, Any]:
        return {
            **to_document(self.summary),
            "budget": [bar.as_payload() for bar in self.bars],
        }


@attrs.frozen
class StudyOverviewPage:
    studies: tuple[StudyOverview, ...]
    limit: int
    next_cursor: str | None

    def as_payload(self) -> dict[str, Any]:
        return {
            "studies": [study.as_payload() for study in self.studies],
            "limit": self.limit,
            "next_cursor": self.next_cursor,
        }


@attrs.frozen
class AuditEntry:
    id: int
    action: str
    actor_id: str
    recorded_at: float
    details: Any

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class AuditPage:
    study_id: str
    entries: tuple[AuditEntry, ...]
    limit: int
    next_before: int | None

    def as_payload(self) -> dict[str, Any]:
        return {
            "study_id": self.study_id,
            "entries": [entry.as_payload() for entry in self.entries],
            "limit": self.limit,
            "next_before": self.next_before,
        }


@attrs.frozen
class StudyRunView:
    position: int
    run_id: str
    trial_id: str
    admission_epoch: int
    actor_id: str
    parent_run_id: str | None
    reservation_state: str
    run_state: str | None
    custody_ceased: bool | None
    admitted_at: float

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class CandidateView:
    id: str
    trial_id: str
    run_id: str
    checkpoint_sha256: str
    evaluation_sha256: str
    decision: str
    created_by: str
    created_at: float

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class TrialView:
    id: str
    material_sha256: str
    replicate: int
    membership_revision: int

    def as_payload(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class StudySnapshot:
    """A study as its page shows it (one consistent read)."""

    study: Study
    bars: tuple[BudgetBar, ...]
    reservations: int
    unsettled: int
    run_states: tuple[tuple[str, int], ...]
    trials: tuple[TrialView, ...]
    runs: tuple[StudyRunView, ...]
    candidates: tuple[CandidateView, ...]
    history: tuple[AuditEntry, ...]
    created_at: float
    updated_at: float

    @property
    def selected(self) -> CandidateView | None:
        """The candidate selected last (the newest retained decision)."""
        return self.candidates[0] if self.candidates else None

    def as_payload(self) -> dict[str, Any]:
        return {
            "study": to_document(self.study),
            "budget": [bar.as_payload() for bar in self.bars],
            "reservations": self.reservations,
            "unsettled": self.unsettled,
            "run_states": dict(self.run_states),
            "trials": [trial.as_payload() for trial in self.trials],
            "runs": [run.as_payload() for run in self.runs],
            "candidates": [candidate.as_payload() for candidate in self.candidates],
            "selected_candidate_id": None if self.selected is None else self.selected.id,
            "history": [entry.as_payload() for entry in self.history],
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


def _bars(limits: Budget, charged_total: Budget, unsettled: Sequence[int]) -> tuple[BudgetBar, ...]:
    bars = []
    for name, limit, total, reserved in zip(
        DIMENSIONS, limits.values(), charged_total.values(), unsettled, strict=True
    ):
        reserved = min(reserved, total)
        bars.append(
            BudgetBar(
                dimension=name,
                limit=limit,
                charged=total - reserved,
                reserved=reserved,
                remaining=max(limit - total, 0),
            )
        )
    return tuple(bars)


def _limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE:
        raise refuse(f"Page limit must be an integer from 1 to {MAX_PAGE}.")
    return value


def _identifier(value: Any, label: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 256 or "\x00" in value:
        raise refuse(f"{label} is not a valid identifier.")
    return value


def _entry(row: Any) -> AuditEntry:
    try:
        details = json.loads(row.details_json)
    except ValueError:
        details = None
    return AuditEntry(
        id=int(row.id),
        action=row.action,
        actor_id=row.actor_id,
        recorded_at=float(row.recorded_at),
        details=details,
    )


class StudyViews:
    """The dashboard's study reads: one read transaction each, nothing written."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def page(self, *, cursor: str | None = None, limit: int = 20) -> StudyOverviewPage:
        """Studies in id order, each with its budget bars."""
        limit = _limit(limit)
        if cursor is not None:
            _identifier(cursor, "Cursor")
        with self.db.read() as session:
            repo = StudyViewRepository(session)
            repo.snapshot()
            rows = repo.page(cursor, limit + 1)
            shown = rows[:limit]
            counts = repo.trial_counts([row.id for row in shown])
            overviews = tuple(
                StudyOverview(
                    summary=summary_view(row, counts[row.id]),
                    bars=_bars(
                        budget_of(row, "limit_"),
                        budget_of(row, "charged_"),
                        repo.unsettled(row.id)[0],
                    ),
                )
                for row in shown
            )
        return StudyOverviewPage(
            studies=overviews,
            limit=limit,
            next_cursor=shown[-1].id if len(rows) > limit else None,
        )

    def study(self, study_id: str) -> StudySnapshot:
        """One study's page (``not_found`` when there is none)."""
        _identifier(study_id, "Study id")
        with self.db.read() as session:
            repo = StudyViewRepository(session)
            repo.snapshot()
            row = repo.study(study_id)
            if row is None:
                raise refuse("Study not found.", "not_found")
            unsettled, unsettled_count = repo.unsettled(study_id)
            trials = repo.trials(study_id, SHOWN)
            study = study_view(row, [trial.id for trial in trials])
            runs = repo.runs(study_id, SHOWN)
            return StudySnapshot(
                study=study,
                bars=_bars(study.limits, budget_of(row, "charged_"), unsettled),
                reservations=repo.reservation_count(study_id),
                unsettled=unsettled_count,
                run_states=tuple(sorted(repo.run_states(study_id).items())),
                trials=tuple(
                    TrialView(
                        id=trial.id,
                        material_sha256=trial.material_sha256,
                        replicate=int(trial.replicate),
                        membership_revision=int(trial.membership_revision),
                    )
                    for trial in trials
                ),
                runs=tuple(
                    StudyRunView(
                        position=int(run.position),
                        run_id=run.run_id,
                        trial_id=run.trial_id,
                        admission_epoch=int(run.admission_epoch),
                        actor_id=run.actor_id,
                        parent_run_id=run.parent_run_id,
                        reservation_state=run.reservation_state,
                        run_state=run.run_state,
                        custody_ceased=None
                        if run.custody_ceased is None
                        else bool(run.custody_ceased),
                        admitted_at=float(run.created_at),
                    )
                    for run in runs
                ),
                candidates=tuple(
                    CandidateView(
                        id=candidate.id,
                        trial_id=candidate.trial_id,
                        run_id=candidate.run_id,
                        checkpoint_sha256=candidate.checkpoint_sha256,
                        evaluation_sha256=candidate.evaluation_sha256,
                        decision=candidate.decision,
                        created_by=candidate.created_by,
                        created_at=float(candidate.created_at),
                    )
                    for candidate in repo.candidates(study_id, SHOWN)
                ),
                history=tuple(_entry(entry) for entry in repo.history(study_id, SHOWN)),
                created_at=float(row.created_at),
                updated_at=float(row.updated_at),
            )

    def audit(self, study_id: str, *, before: int | None = None, limit: int = 50) -> AuditPage:
        """The study's audit log, newest first; ``next_before`` continues."""
        _identifier(study_id, "Study id")
        limit = _limit(limit)
        if before is not None and (
            isinstance(before, bool) or not isinstance(before, int) or not 1 <= before <= MAX_ID
        ):
            # Bounded: a database integer is 64-bit (a larger one overflows the driver).
            raise refuse(f"Audit cursor must be an integer from 1 to {MAX_ID}.")
        with self.db.read() as session:
            repo = StudyViewRepository(session)
            repo.snapshot()
            if repo.study(study_id) is None:
                raise refuse("Study not found.", "not_found")
            rows = repo.audit(study_id, before, limit + 1)
        shown = rows[:limit]
        return AuditPage(
            study_id=study_id,
            entries=tuple(_entry(row) for row in shown),
            limit=limit,
            next_before=int(shown[-1].id) if len(rows) > limit else None,
        )


__all__ = [
    "AuditEntry",
    "AuditPage",
    "BudgetBar",
    "CandidateView",
    "StudyOverview",
    "StudyOverviewPage",
    "StudyRunView",
    "StudySnapshot",
    "StudyViews",
    "TrialView",
]
