"""Cost: admit and reconcile reach only indexed rows, however many attempts a study has had."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchledger.db import Database
from benchledger.domain.study import Budget

from .conftest import OWNER, Kit

if TYPE_CHECKING:
    from conftest import StatementLog

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


def _plans(db: Database, seen: list[tuple[str, Any]]) -> list[str]:
    """The planner's text for each captured read of unsettled reservations."""
    plans = []
    raw = db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        explain = "EXPLAIN QUERY PLAN"
        if db.dialect_name == "postgresql":
            explain = "EXPLAIN"
            cursor.execute("SET enable_seqscan = off")  # tiny tables: ask which index serves it
        for statement, parameters in seen:
            where = statement.partition("WHERE")[2]
            if "FROM study_reservations" not in statement or "state" not in where:
                continue
            cursor.execute(f"{explain} {statement}", parameters)
            plans.append(
                "\n".join(
                    str(row[-1] if db.dialect_name == "sqlite" else row[0])
                    for row in cursor.fetchall()
                )
            )
        raw.rollback()
    finally:
        raw.close()
    return plans


def test_unsettled_reservations_are_found_through_the_state_index(
    kit: Kit, statements: StatementLog
) -> None:
    study, trial, _ = kit.ready(limits=ROOMY)
    _admit_and_finish(kit, study.id, trial.id, 3)
    with statements(kit.db) as seen:
        kit.admit(study.id, trial.id)
        kit.service.reconcile(OWNER, study.id)
    plans = _plans(kit.db, seen)
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
