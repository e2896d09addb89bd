"""Per-case results and the attempt history: what ``results`` and ``attempts`` read back,
and what every claim, completion, failure and lease loss writes to the history."""

from __future__ import annotations

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import CampaignActions
from benchledger.testing.clock import LedgerClock
from benchledger.workers.loop import Worker
from helpers import refused

from .helpers import T0, complete_all, execute, make_plan, result_for


def history(db: Database) -> list[tuple[object, ...]]:
    with db.engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                sa.text(
                    "SELECT work_id, attempt, worker_id, claimed_at, finished_at, outcome,"
                    " error_code, duration_seconds FROM benchmark_campaign_attempts"
                    " ORDER BY attempt_id"
                )
            )
        ]


def test_each_ended_attempt_adds_one_row_with_its_outcome(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    first = service.claim(cid, "w-1")
    assert first is not None
    clock.advance(2)
    service.fail(first, "api.http_429", delay_seconds=0, duration_seconds=1.5)
    second = service.claim(cid, "w-2")
    assert second is not None and second.work_id == first.work_id and second.attempt == 2
    clock.advance(3)
    service.complete(second, result_for(second, score=0.25), duration_seconds=0.5)
    assert history(ledger_db) == [
        (first.work_id, 1, "w-1", T0, T0 + 2, "retry_scheduled", "api.http_429", 1.5),
        (first.work_id, 2, "w-2", T0 + 2, T0 + 5, "succeeded", None, 0.5),
    ]
    third = service.claim(cid, "w-1")
    assert third is not None
    service.fail(third, "api.bad_request", retryable=False)
    assert history(ledger_db)[-1] == (
        third.work_id,
        1,
        "w-1",
        T0 + 5,
        T0 + 5,
        "failed",
        "api.bad_request",
        None,
    )


def test_a_lease_taken_over_after_expiry_records_the_lost_attempt(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite)
    lost = service.claim(cid, "w-dead", lease_seconds=10)
    swept = service.claim(cid, "w-dead", lease_seconds=10)
    assert lost is not None and swept is not None
    clock.advance(30)
    taken = service.claim(cid, "w-new", lease_seconds=10)
    # The lost lease gave its attempt back: the take-over is attempt 1 again.
    assert taken is not None and taken.work_id == lost.work_id and taken.attempt == 1
    rows = sorted(history(ledger_db))
    assert rows == sorted(
        [
            (lost.work_id, 1, "w-dead", T0, T0 + 10, "lease_expired", dom.LEASE_EXPIRED, None),
            (swept.work_id, 1, "w-dead", T0, T0 + 10, "lease_expired", dom.LEASE_EXPIRED, None),
        ]
    )
    service.complete(taken, result_for(taken))
    page = service.results(cid)
    counts = {item.work_id: dict(item.outcomes) for item in page.items}
    assert counts[lost.work_id][AttemptOutcome.LEASE_EXPIRED] == 1
    assert counts[lost.work_id][AttemptOutcome.SUCCEEDED] == 1
    assert counts[swept.work_id][AttemptOutcome.LEASE_EXPIRED] == 1


def test_a_claim_that_finds_no_expired_lease_writes_no_history(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    assert service.claim(cid, "w-1") is not None
    assert service.claim(cid, "w-1") is not None
    assert history(ledger_db) == []


def test_an_operators_retry_keeps_the_history_and_numbers_new_attempts_from_one(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "example.broken", retryable=False)
    CampaignActions(service).retry(cid)
    again = service.claim(cid, "w-1")
    assert again is not None and again.work_id == claim.work_id and again.attempt == 1
    service.complete(again, result_for(again))
    rows = [row for row in history(ledger_db) if row[0] == claim.work_id]
    assert [(row[1], row[5]) for row in rows] == [(1, "failed"), (1, "succeeded")]


def test_results_pages_every_item_in_order_with_score_verdict_and_counts(
    service: CampaignService, cid: str, plan: CampaignPlan
) -> None:
    first = service.claim(cid, "w-1")
    assert first is not None
    service.fail(first, "api.http_500")
    done = 0
    while (claim := service.claim(cid, "w-1")) is not None:
        service.complete(claim, result_for(claim, score=0.3 if done % 2 else 0.9))
        done += 1
    seen = []
    cursor = None
    while True:
        page = service.results(cid, cursor=cursor, limit=4)
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        assert page.next_cursor == page.items[-1].work_id
        cursor = page.next_cursor
    assert len(seen) == plan.work_count
    keys = [(item.locale, item.case_key) for item in seen]
    assert keys == sorted(keys)
    assert {item.work_id for item in seen} == {work.work_id for work in plan.work()}
    assert all(item.status == "succeeded" for item in seen)
    assert {item.passed for item in seen} == {True, False}
    assert all(item.passed == (item.score is not None and item.score >= 0.5) for item in seen)
    retried = next(item for item in seen if item.work_id == first.work_id)
    assert retried.attempts == 2
    assert retried.outcomes[AttemptOutcome.RETRY_SCHEDULED] == 1
    assert retried.outcomes[AttemptOutcome.SUCCEEDED] == 1
    assert retried.first_attempt_at is not None and retried.last_attempt_at is not None
    assert list(service.iter_results(cid)) == seen


def test_results_filter_by_status_and_locale(service: CampaignService, cid: str) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "example.broken", retryable=False)
    failed = service.results(cid, status="failed").items
    assert [(item.work_id, item.error_code, item.score) for item in failed] == [
        (claim.work_id, "example.broken", None)
    ]
    pending = service.results(cid, status="pending", locale="fr-FR").items
    assert pending and all(item.locale == "fr-FR" for item in pending)
    assert all(item.status == "pending" for item in pending)
    assert service.results(cid, locale="ja-JP").items == ()


def test_items_without_history_say_so(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    execute(ledger_db, "DELETE FROM benchmark_campaign_attempts")
    item = service.results(cid, limit=1).items[0]
    assert item.attempts == 1 and item.first_attempt_at is None
    assert all(count == 0 for count in item.outcomes.values())


def test_a_worker_records_how_long_its_evaluator_ran(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    Worker(service, cid, "w-1", lambda claim, beat: result_for(claim), retry_base_seconds=0).run()
    rows = history(ledger_db)
    assert rows and all(row[5] == "succeeded" for row in rows)
    assert all(isinstance(row[7], float) and row[7] >= 0 for row in rows)


def test_bad_reads_are_refused_and_change_nothing(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    unknown = "benchmark-campaign-" + "0" * 64
    for call, code in (
        (lambda: service.results(unknown), dom.NOT_FOUND),
        (lambda: service.results("nope"), dom.NOT_FOUND),
        (lambda: service.results(cid, status="done"), dom.FILTER_INVALID),
        (lambda: service.results(cid, locale=""), dom.FILTER_INVALID),
        (lambda: service.results(cid, limit=0), dom.PAGE_INVALID),
        (lambda: service.results(cid, limit=1001), dom.PAGE_INVALID),
        (lambda: service.results(cid, cursor="benchmark-work-" + "0" * 64), dom.PAGE_INVALID),
        (lambda: service.results(cid, cursor=cid), dom.PAGE_INVALID),
        (lambda: service.attempts(cid, cursor="-1"), dom.PAGE_INVALID),
        (lambda: service.attempts(cid, cursor="٣"), dom.PAGE_INVALID),
        (lambda: service.attempts(cid, cursor=str(2**70)), dom.PAGE_INVALID),
        (lambda: service.attempts(cid, cursor="999999"), dom.PAGE_INVALID),
        (lambda: service.attempts(cid, work_id="w"), dom.FILTER_INVALID),
    ):
        with refused(ledger_db, code):
            call()


def test_a_duration_must_be_finite_and_not_negative(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    for bad in (-1.0, float("nan"), float("inf"), "1", True):
        with refused(ledger_db, dom.DURATION_INVALID):
            service.complete(claim, result_for(claim), duration_seconds=bad)  # type: ignore[arg-type]
        with refused(ledger_db, dom.DURATION_INVALID):
            service.fail(claim, "a.b", duration_seconds=bad)  # type: ignore[arg-type]
