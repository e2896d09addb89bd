"""The default run registry: run attempts and their custody, in the ledger's own tables.

States: ``queued`` → ``running`` → ``cancelling``; terminal ``completed``,
``failed``, ``cancelled``, ``interrupted``; and ``unknown`` when custody is lost.
A terminal run is *ceased* once its custody is proved ended
(``custody_ceased``); from then on it never changes.
"""

from __future__ import annotations

from benchledger.db import current_session
from benchledger.domain.study import ACTIVE_RUN_STATES, TERMINAL_RUN_STATES, RunState, refuse
from benchledger.domain.study_runs import Run, RunRequest
from benchledger.repositories.study_adapters import RunRepository

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

    def admit(self, request: RunRequest, *, now: float) -> Run:
        run = RunRepository(current_session()).add(request, now)
        if run is None:  # its id or run key is taken: nothing was written
            raise refuse("Run is already admitted.", "conflict")
        return run

    def load(self, run_id: str) -> Run:
        run = RunRepository(current_session()).get(run_id)
        if run is None:
            raise refuse("Run not found.", "not_found")
        return run

    def cancel(self, run_id: str, *, now: float) -> Run:
        runs = RunRepository(current_session())
        run = runs.lock(run_id)
        if run is None:
            raise refuse("Run not found.", "not_found")
        if run.state is RunState.QUEUED:
            # Never started: nothing to drain.
            return runs.change(run_id, state=RunState.CANCELLED, custody_ceased=True, now=now)
        if run.state is RunState.RUNNING:
            return runs.change(
                run_id, state=RunState.CANCELLING, custody_ceased=run.custody_ceased, now=now
            )
        return run

    def transition(
        self,
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
        runs = RunRepository(current_session())
        run = runs.lock(run_id)
        if run is None:
            raise refuse("Run not found.", "not_found")
        current = run.state
        ceased = terminal if custody_ceased is None else custody_ceased
        if current == state:
            if current in ACTIVE_RUN_STATES or current is RunState.UNKNOWN:
                return run  # a repeated report
            if run.custody_ceased and not ceased:
                raise refuse("A ceased run cannot regain custody.", "conflict")
            if ceased and not run.custody_ceased:
                return runs.change(run_id, state=current, custody_ceased=True, now=now)
            return run
        if state not in ALLOWED_MOVES[current]:
            raise refuse(f"Run cannot move from {current} to {state}.", "conflict")
        return runs.change(run_id, state=state, custody_ceased=ceased, now=now)

    def custody_blocked(self) -> bool:
        return RunRepository(current_session()).any_in_state(RunState.UNKNOWN)
