"""Reads: reservation pages pinned to a revision, cursor-paged listings, not-found."""

from __future__ import annotations

from sqlalchemy.orm import Session

from benchledger.testing.factories import StudyRowFactory, TrialRowFactory

from .conftest import OWNER, VIEWER, Kit


def test_reservation_pages_are_pinned_to_a_study_revision(kit: Kit, refused) -> None:
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
    error = refused("invalid", kit.service.get, VIEWER, study.id, offset=2, limit=2)
    assert "require the study revision" in str(error)
    kit.service.reconcile(OWNER, study.id)  # a new revision
    error = refused(
        "stale", kit.service.get, VIEWER, study.id, offset=2, limit=2, revision=revision
    )
    assert "changed between pages" in str(error)
    refused("invalid", kit.service.get, VIEWER, study.id, limit=101)
    refused("invalid", kit.service.get, VIEWER, study.id, limit=0)
    refused("not_found", kit.service.get, VIEWER, "no-such-study")


def test_list_pages_summaries_by_cursor(kit: Kit, refused, ledger_session: Session) -> None:
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
    refused("invalid", kit.service.list, VIEWER, limit=21)


def test_trial_and_policy_reads(kit: Kit, refused) -> None:
    study, trial, _ = kit.ready()
    assert kit.service.trial(VIEWER, trial.id).study_id == study.id
    assert kit.service.policy(VIEWER, study.policy_sha256) == kit.policy()
    refused("not_found", kit.service.trial, VIEWER, "no-such-trial")
    refused("not_found", kit.service.policy, VIEWER, "0" * 64)
    refused("invalid", kit.service.policy, VIEWER, "not-a-sha")
