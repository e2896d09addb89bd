"""The default run registry: run attempts and their custody, in the ledger's own tables.

States: ``queued`` → ``running`` → ``cancelling``; terminal ``completed``,
``failed``, ``cancelled``, ``interrupted``; and ``unknown`` when custody is lost.
A terminal run is *ceased* once its custody is proved ended
(``custody_ceased``); from then on it never changes.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from benchledger.domain.study import (
    ACTIVE_RUN_STATES,
    TERMINAL_RUN_STATES,
    Run,
    RunRequest,
    RunState,
    refuse,
)
from benchledger.models.study import RunRow
from benchledger.repositories.study_adapters import RunRepository, run_view

_TERMINAL = frozenset(TERMINAL_RUN_STATES)
#: Legal moves between distinct states (a terminal run may only drain its custody).
ALLOWED_MOVES: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.CANCELLING, RunState.UNKNOWN})
    | _TERMINAL,
    RunState.RUNNING: frozenset({RunState.CANCELLING, RunState.UNKNOWN}) | _TERMINAL,
    RunState.CANCELLING: frozenset({RunState.UNKNOWN}) | _TERMINAL,
    RunState.UNKNOWN: frozenset({RunState.RUNNING, RunState.CANCELLING}) | _TERMINAL,
    RunState.COMPLETED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
    RunState.INTERRUPTED: frozenset(),
}


class SqlRunRegistry:
    """:class:`~benchledger.ports.study.RunRegistry` over the ``study_runs`` table."""

    def admit(self, session: Session, request: RunRequest, *, now: float) -> Run:
        runs = RunRepository(session)
        if runs.get(request.run_id) is not None or runs.by_key(request.run_key) is not None:
            raise refuse("Run is already admitted.", "conflict")
        row = RunRow(
            id=request.run_id,
            run_key=request.run_key,
            request_sha256=request.request_sha256,
            actor_id=request.actor_id,
            study_id=request.study_id,
            trial_id=request.trial_id,
            material_sha256=request.material_sha256,
            parent_run_id=request.parent_run_id,
            approval_id=request.approval_id,
            state=RunState.QUEUED.value,
            custody_ceased=False,
            created_at=now,
            updated_at=now,
        )
        runs.add(row)
        return run_view(row)

    def load(self, session: Session, run_id: str) -> Run:
        row = RunRepository(session).get(run_id)
        if row is None:
            raise refuse("Run not found.", "not_found")
        return run_view(row)

    def cancel(self, session: Session, run_id: str, *, now: float) -> Run:
        runs = RunRepository(session)
        row = runs.lock(run_id)
        if row is None:
            raise refuse("Run not found.", "not_found")
        if row.state == RunState.QUEUED:
            # Never started: nothing to drain.
            row.state, row.custody_ceased, row.updated_at = RunState.CANCELLED.value, True, now
        elif row.state == RunState.RUNNING:
            row.state, row.updated_at = RunState.CANCELLING.value, now
        runs.flush()
        return run_view(row)

    def transition(
        self,
        session: Session,
        run_id: str,
        state: RunState,
        *,
        now: float,
        custody_ceased: bool | None = None,
    ) -> Run:
        state = RunState(state)
        terminal = state in TERMINAL_RUN_STATES
        if custody_ceased is not None and not isinstance(custody_ceased, bool):
            raise refuse("Custody ceased must be a boolean.")
        if custody_ceased and not terminal:
            raise refuse("Only a terminal run can have ceased custody.")
        runs = RunRepository(session)
        row = runs.lock(run_id)
        if row is None:
            raise refuse("Run not found.", "not_found")
        current = RunState(row.state)
        ceased = terminal if custody_ceased is None else custody_ceased
        if current == state:
            if current in ACTIVE_RUN_STATES or current is RunState.UNKNOWN:
                return run_view(row)  # a repeated report
            if row.custody_ceased and not ceased:
                raise refuse("A ceased run cannot regain custody.", "conflict")
            if ceased and not row.custody_ceased:
                row.custody_ceased, row.updated_at = True, now
                runs.flush()
            return run_view(row)
        if state not in ALLOWED_MOVES[current]:
            raise refuse(f"Run cannot move from {current} to {state}.", "conflict")
        row.state, row.custody_ceased, row.updated_at = state.value, ceased, now
        runs.flush()
        return run_view(row)

    def custody_blocked(self, session: Session) -> bool:
        return RunRepository(session).any_in_state(RunState.UNKNOWN.value)
