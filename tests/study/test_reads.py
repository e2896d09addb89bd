"""Reads: reservation pages pinned to a revision, cursor-paged listings, not-found."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.domain.study import RunState
from benchledger.testing.factories import StudyRowFactory, TrialRowFactory
from helpers import refused

from .helpers import OWNER, STRANGER, VIEWER, Kit


def test_reservation_pages_are_pinned_to_a_study_revision(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    runs = []
    for _ in range(5):
        admission = kit.admit(study.id, trial.id)
        kit.finish(admission.run.id)
        runs.append(admission.run.id)
    first = kit.service.get(VIEWER, study.id, limit=2)
    assert [item.run_id for item in first.reservations] == runs[:2]
    assert (first.page.total, first.page.next_offset) == (5, 2)
    revision = first.page.study_revision
    second = kit.service.get(VIEWER, study.id, offset=2, limit=2, revision=revision)
    third = kit.service.get(VIEWER, study.id, offset=4, limit=2, revision=revision)
    assert [item.run_id for item in second.reservations + third.reservations] == runs[2:]
    assert third.page.next_offset is None
    with refused(kit.db, "invalid") as caught:
        kit.service.get(VIEWER, study.id, offset=2, limit=2)
    error = caught.value
    assert "require the study revision" in str(error)
    kit.service.reconcile(OWNER, study.id)  # a new revision
    with refused(kit.db, "stale") as caught:
        kit.service.get(VIEWER, study.id, offset=2, limit=2, revision=revision)
    error = caught.value
    assert "changed between pages" in str(error)
    with refused(kit.db, "invalid"):
        kit.service.get(VIEWER, study.id, limit=101)
    with refused(kit.db, "invalid"):
        kit.service.get(VIEWER, study.id, limit=0)
    with refused(kit.db, "not_found"):
        kit.service.get(VIEWER, "no-such-study")


def test_list_pages_summaries_by_cursor(kit: Kit, ledger_session: Session) -> None:
    # Only the stored studies matter here: the factories write them as create() does.
    studies = {row.id: row for row in StudyRowFactory.create_batch(5)}
    created = sorted(studies)
    TrialRowFactory(study=studies[created[0]])
    first = kit.service.list(VIEWER, limit=2)
    assert [item.id for item in first.studies] == created[:2]
    assert first.studies[0].trial_count == 1 and first.studies[1].trial_count == 0
    assert first.next_cursor == created[1]
    rest = kit.service.list(VIEWER, cursor=first.next_cursor, limit=20)
    assert [item.id for item in rest.studies] == created[2:]
    assert rest.next_cursor is None
    with refused(kit.db, "invalid"):
        kit.service.list(VIEWER, limit=21)


def test_trial_and_policy_reads(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    assert kit.service.trial(VIEWER, trial.id).study_id == study.id
    assert kit.service.policy(VIEWER, study.policy_sha256) == kit.policy()
    with refused(kit.db, "not_found"):
        kit.service.trial(VIEWER, "no-such-trial")
    with refused(kit.db, "not_found"):
        kit.service.policy(VIEWER, "0" * 64)
    with refused(kit.db, "invalid"):
        kit.service.policy(VIEWER, "not-a-sha")


def test_run_reads_the_state_of_an_admitted_run(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    admission = kit.admit(study.id, trial.id)
    assert kit.service.run(VIEWER, admission.run.id) == admission.run
    assert admission.run.state is RunState.QUEUED and not admission.run.ceased
    kit.service.report_run(OWNER, admission.run.id, RunState.RUNNING)
    running = kit.service.run(VIEWER, admission.run.id)
    assert running.state is RunState.RUNNING and running.active
    finished = kit.finish(admission.run.id)
    read = kit.service.run(OWNER, admission.run.id)
    assert read == finished
    assert read.state is RunState.COMPLETED and read.ceased
    assert read.study_id == study.id and read.trial_id == trial.id


def test_run_refusals(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run_id = kit.admit(study.id, trial.id).run.id
    with refused(kit.db, "not_found"):
        kit.service.run(VIEWER, "no-such-run")
    with refused(kit.db, "forbidden") as caught:
        kit.service.run(STRANGER, run_id)
    error = caught.value
    assert "studies.run" in str(error)
    with refused(kit.db, "forbidden"):
        kit.service.run(STRANGER, "no-such-run")
    with refused(kit.db, "invalid"):
        kit.service.run(VIEWER, "not a run id")
    with refused(kit.db, "invalid"):
        kit.service.run("", run_id)


@pytest.mark.parametrize("column", ["study_id", "request_sha256"])
def test_run_refuses_a_registry_answer_that_differs_from_the_admission(
    kit: Kit, column: str
) -> None:
    study, trial, _ = kit.ready()
    other, _, _ = kit.ready()
    run_id = kit.admit(study.id, trial.id).run.id
    value = {"study_id": other.id, "request_sha256": "0" * 64}[column]
    with kit.db.write() as session:
        session.execute(
            sa.text(f"UPDATE study_runs SET {column} = :value WHERE id = :id"),
            {"value": value, "id": run_id},
        )
    with refused(kit.db, "unavailable") as caught:
        kit.service.run(VIEWER, run_id)
    error = caught.value
    assert "Reservation and Run receipt differ" in str(error)


def test_run_evidence_reads_what_was_retained(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    run = kit.finish(kit.admit(study.id, trial.id).run.id)
    assert kit.service.run_evidence(VIEWER, run.id) is None  # nothing retained yet
    recorded = kit.evidence(run)
    read = kit.service.run_evidence(VIEWER, run.id)
    assert read == recorded and read is not None and read.sha256 == recorded.sha256
    with refused(kit.db, "not_found"):
        kit.service.run_evidence(VIEWER, "no-such-run")
    with refused(kit.db, "forbidden"):
        kit.service.run_evidence(STRANGER, run.id)
    with refused(kit.db, "invalid"):
        kit.service.run_evidence(VIEWER, "not a run id")
    with kit.db.write() as session:  # a retained checkpoint changed behind the ledger's back
        session.execute(
            sa.text("UPDATE study_run_checkpoints SET step = step + 1 WHERE run_id = :id"),
            {"id": run.id},
        )
    with refused(kit.db, "unavailable"):
        kit.service.run_evidence(VIEWER, run.id)
