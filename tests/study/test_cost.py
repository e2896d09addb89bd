"""Cost: admit and reconcile reach only indexed rows, however many attempts a study has had."""

from __future__ import annotations

from benchledger.domain.study import Budget
from helpers import StatementLog, query_plans

from .helpers import OWNER, Kit

ROOMY = Budget(1_000, 1_000_000, 1_000_000_000, 1_000_000_000)


def _admit_and_finish(kit: Kit, study_id: str, trial_id: str, times: int) -> None:
    for _ in range(times):
        kit.finish(kit.admit(study_id, trial_id).run.id)


def _costs(statements: StatementLog, kit: Kit, study_id: str, trial_id: str) -> dict[str, int]:
    """Statements for one admit, then one reconcile (nobody reconciled before)."""
    counts = {}
    study = kit.current(study_id)
    with statements(kit.db) as seen:
        admission = kit.service.admit(
            OWNER,
            study_id,
            revision=study.revision,
            admission_epoch=study.admission_epoch,
            trial_id=trial_id,
            request_key=kit.key("cost"),
        )
    counts["admit"] = len(seen)
    kit.finish(admission.run.id)
    with statements(kit.db) as seen:
        kit.service.reconcile(OWNER, study_id)
    counts["reconcile"] = len(seen)
    return counts


def test_statements_per_admission_do_not_grow_with_past_admissions(
    kit: Kit, statements: StatementLog
) -> None:
    small, small_trial, _ = kit.ready(limits=ROOMY)
    large, large_trial, _ = kit.ready(limits=ROOMY)
    _admit_and_finish(kit, small.id, small_trial.id, 2)
    _admit_and_finish(kit, large.id, large_trial.id, 12)  # never reconciled
    assert _costs(statements, kit, small.id, small_trial.id) == _costs(
        statements, kit, large.id, large_trial.id
    )


def _unsettled_reads(statement: str) -> bool:
    """A read of unsettled reservations (its WHERE names the state)."""
    where = statement.partition("WHERE")[2]
    return "FROM study_reservations" in statement and "state" in where


def test_unsettled_reservations_are_found_through_the_state_index(
    kit: Kit, statements: StatementLog
) -> None:
    study, trial, _ = kit.ready(limits=ROOMY)
    _admit_and_finish(kit, study.id, trial.id, 3)
    with statements(kit.db) as seen:
        kit.admit(study.id, trial.id)
        kit.service.reconcile(OWNER, study.id)
    plans = query_plans(kit.db, seen, _unsettled_reads)
    assert plans
    for plan in plans:
        # Only unsettled rows are in the index: the settled history is never walked, nor sorted.
        assert "ix_study_reservations_unsettled" in plan, plan
        assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan


def test_reads_on_the_hot_path_never_count_every_reservation(
    kit: Kit, statements: StatementLog
) -> None:
    """The page total is the last position (one index seek), not a count of the history."""
    study, trial, _ = kit.ready(limits=ROOMY)
    _admit_and_finish(kit, study.id, trial.id, 3)
    with statements(kit.db) as seen:
        kit.admit(study.id, trial.id)
        page = kit.service.reconcile(OWNER, study.id)
        kit.service.get(OWNER, study.id, limit=1)
    assert page.page.total == 4
    walks = [
        statement
        for statement, _ in seen
        if "study_reservations" in statement and "count(" in statement.lower()
    ]
    assert walks == []
