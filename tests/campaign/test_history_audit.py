"""The attempt history is audited with the items: ``verify()`` finds a history that
disagrees with its item, and never flags one that real work (retries, lost leases, an
operator's retry) wrote."""

from __future__ import annotations

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.attempts import history_consistent
from benchledger.domain.integrity import Problem
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import CampaignActions
from benchledger.testing.clock import LedgerClock

from .helpers import complete_all, execute, result_for

S, F, R, L = "succeeded", "failed", "retry_scheduled", "lease_expired"


@pytest.mark.parametrize(
    ("status", "attempts", "history", "ok"),
    [
        ("pending", 0, [], True),
        ("succeeded", 1, [(1, S)], True),
        ("succeeded", 3, [(1, R), (2, L), (3, S)], True),
        ("succeeded", 1, [], False),  # its attempt's row is missing
        ("leased", 1, [], True),  # the running attempt has no row yet
        ("retry_wait", 2, [(2, R)], False),  # the first row is missing
        ("succeeded", 3, [(1, R), (3, S)], False),  # a gap
        ("succeeded", 2, [(1, R), (2, R)], False),  # no success recorded
        ("succeeded", 2, [(1, S), (2, S)], False),  # something after a success
        ("failed", 2, [(1, R), (2, S)], False),  # a success for a failed item
        ("failed", 3, [(1, R), (2, R), (3, F)], True),
        ("failed", 3, [(1, R), (2, R), (3, L)], True),  # its last lease ran out
        ("failed", 3, [(1, R), (2, F)], False),  # the count says 3
        ("retry_wait", 2, [(1, R), (2, L)], True),
        ("leased", 2, [(1, R)], True),
        ("leased", 2, [(1, R), (2, R)], False),  # the running attempt has no row yet
        ("pending", 0, [(1, R), (2, F)], True),  # an operator's retry set it back
        ("retry_wait", 2, [(1, R), (2, R), (3, F)], True),  # retry with one more attempt
        ("leased", 3, [(1, R), (2, R), (3, F)], True),  # ... and claimed again
        ("succeeded", 1, [(1, F), (1, S)], True),  # a new run after a retry
        ("succeeded", 1, [(1, R), (1, S)], False),  # a new run after a retried attempt
        ("succeeded", 1, [(0, S)], False),
        ("succeeded", 1, [(1, "done")], False),
    ],
)
def test_history_rules(
    status: str, attempts: int, history: list[tuple[int, str]], ok: bool
) -> None:
    assert history_consistent(status, attempts, history) is ok


def test_real_work_writes_a_history_the_audit_accepts(
    service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    first = service.claim(cid, "w-1", lease_seconds=10)
    assert first is not None
    service.fail(first, "api.http_429")
    lost = service.claim(cid, "w-1", lease_seconds=10)
    assert lost is not None
    clock.advance(20)  # the lease runs out; the next claim takes it over
    broken = service.claim(cid, "w-2")
    assert broken is not None
    service.fail(broken, "example.broken", retryable=False)
    CampaignActions(service).retry(cid, attempts=1)
    complete_all(service, cid)
    report = service.verify(cid)
    assert report.ok, report.problems


@pytest.mark.parametrize(
    "edit",
    [
        "DELETE FROM benchmark_campaign_attempts WHERE attempt_id = "
        "(SELECT min(attempt_id) FROM benchmark_campaign_attempts)",
        "UPDATE benchmark_campaign_attempts SET outcome = 'failed' WHERE outcome = 'succeeded'",
        "UPDATE benchmark_campaign_attempts SET attempt = attempt + 5",
        "INSERT INTO benchmark_campaign_attempts (campaign_id, work_id, attempt, worker_id,"
        " claimed_at, finished_at, outcome) SELECT campaign_id, work_id, attempt + 1, 'x',"
        " finished_at, finished_at, 'succeeded' FROM benchmark_campaign_attempts"
        " WHERE outcome = 'succeeded' LIMIT 1",
    ],
    ids=["a row deleted", "an outcome changed", "attempts renumbered", "a success added"],
)
def test_a_tampered_history_is_found(
    ledger_db: Database, service: CampaignService, cid: str, edit: str
) -> None:
    first = service.claim(cid, "w-1")
    assert first is not None
    service.fail(first, "api.http_500")
    complete_all(service, cid)
    assert service.verify(cid).ok
    assert execute(ledger_db, edit) >= 1
    report = service.verify(cid)
    kinds = {problem.kind for problem in report.problems}
    assert kinds == {Problem.HISTORY}
    assert {problem.code for problem in report.problems} == {dom.HISTORY_INVALID}


def test_items_older_than_the_history_are_not_flagged(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.complete(claim, result_for(claim))
    execute(ledger_db, "DELETE FROM benchmark_campaign_attempts")
    report = service.verify(cid)
    assert {problem.kind for problem in report.problems} == {Problem.HISTORY}  # a row is gone
    # What revision 0009 does for items that existed before it: their history begins now.
    execute(ledger_db, "UPDATE benchmark_campaign_work SET history_from = attempts")
    assert service.verify(cid).ok


def test_a_history_row_of_no_item_is_found(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    execute(
        ledger_db,
        "INSERT INTO benchmark_campaign_attempts (campaign_id, work_id, attempt, finished_at,"
        " outcome) SELECT campaign_id, 'benchmark-work-' || substr(work_id, 16), 1, 0,"
        " 'failed' FROM benchmark_campaign_work LIMIT 1",
    )
    assert [p.kind for p in service.verify(cid).problems] == [Problem.HISTORY]
