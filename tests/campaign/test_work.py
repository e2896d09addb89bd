"""claim / renew / complete / fail: the lease state machine, on both backends."""

from __future__ import annotations

import math

import attrs
import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.campaign_results import CaseOutcome, ClaimedCase
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import T0, complete_all, execute, make_plan, result_for, snapshot, work_row

# -- claim ---------------------------------------------------------------------------------


def test_claims_follow_locale_then_case_key(
    service: CampaignService, plan: CampaignPlan, cid: str
) -> None:
    order = []
    tokens = set()
    while (claim := service.claim(cid, "w-1", lease_seconds=120)) is not None:
        order.append((claim.target_locale, claim.suite_case_key))
        tokens.add(claim.lease_token)
        assert claim.attempt == 1 and claim.max_attempts == 3
        assert claim.lease_owner == "w-1"
        assert claim.lease_expires_at == T0 + 120
        assert claim.job_payload == plan.job_payload(claim.target_locale, claim.suite_case_key)
        assert claim.work_id == claim.job_payload["work_id"]
    assert order == sorted((w.target_locale, w.suite_case_key) for w in plan.work())
    assert len(tokens) == 6


def test_claim_leases_the_row(ledger_db: Database, service: CampaignService, cid: str) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=30)
    assert claim is not None
    row = work_row(ledger_db, claim.work_id)
    assert (row.status, row.attempts, row.lease_owner, row.lease_token) == (
        "leased",
        1,
        "w-1",
        claim.lease_token,
    )
    assert row.lease_expires_at == T0 + 30


def test_nothing_due_is_none(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=1, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite)
    claim = service.claim(cid, "w-1")
    assert claim is not None
    assert service.claim(cid, "w-2") is None  # leased, not expired
    service.fail(claim, "test.flaky", delay_seconds=100)
    assert service.claim(cid, "w-2") is None  # retry_wait, not yet due
    clock.advance(100)
    again = service.claim(cid, "w-2")
    assert again is not None and again.attempt == 2 and again.lease_owner == "w-2"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"worker_id": " w"}, dom.IDENTITY_INVALID),
        ({"worker_id": 7}, dom.IDENTITY_INVALID),
        ({"lease_seconds": 0}, dom.DURATION_INVALID),
        ({"lease_seconds": 86_401}, dom.DURATION_INVALID),
        ({"now": -1.0}, dom.TIME_INVALID),
        ({"now": math.inf}, dom.TIME_INVALID),
    ],
)
def test_claim_refuses_bad_input(
    ledger_db: Database, service: CampaignService, cid: str, kwargs: dict[str, object], code: str
) -> None:
    arguments: dict[str, object] = {"worker_id": "w-1", **kwargs}
    with refused(ledger_db, code):
        service.claim(cid, **arguments)  # type: ignore[arg-type]


def test_claim_after_validity_changes_nothing(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(valid_until=T0 + 100)
    cid = service.create(plan.policy, plan.suite)
    claim = service.claim(cid, "w-1", lease_seconds=10)
    assert claim is not None
    clock.advance(101)  # the lease expired too: the sweep must not run either
    with refused(ledger_db, dom.VALIDITY_EXPIRED):
        service.claim(cid, "w-1")


def test_claim_builds_the_payload_before_committing(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan, cid: str
) -> None:
    """A work row whose case is not in the stored suite: the claim fails, nothing is leased."""
    first = sorted(work.work_id for work in plan.work() if work.target_locale == "de-DE")
    execute(ledger_db, "DELETE FROM benchmark_campaign_report_state")
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET suite_case_key = 'a-missing'"
        " WHERE campaign_id = :c AND target_locale = 'de-DE' AND suite_case_key = 'case-0000'",
        c=cid,
    )
    with refused(ledger_db, dom.STATE_INVALID):
        service.claim(cid, "w-1")
    assert len(first) == 3


# -- lease expiry ------------------------------------------------------------------------------


def test_expired_lease_is_swept_to_retry_wait(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite)
    first = service.claim(cid, "w-1", lease_seconds=10)  # case-0000
    second = service.claim(cid, "w-1", lease_seconds=10)  # case-0001
    assert first is not None and second is not None
    service.fail(second, "test.flaky", detail="timeout talking to the provider")
    again = service.claim(cid, "w-1", lease_seconds=10)
    assert again is not None and again.work_id == second.work_id and again.attempt == 2
    row = work_row(ledger_db, second.work_id)
    # The leased row carries no error: the re-claim cleared the previous one.
    assert (row.last_error_code, row.last_error_detail_hash) == (None, None)
    clock.advance(10)  # both leases expire at exactly lease_expires_at
    health = service.health(cid)
    assert health.reasons == (dom.LEASE_EXPIRED,) and health.status == "degraded"
    taken = service.claim(cid, "w-2", lease_seconds=10)
    # The lost lease gave its attempt back: the take-over is attempt 1 again.
    assert taken is not None and taken.work_id == first.work_id and taken.attempt == 1
    row = work_row(ledger_db, second.work_id)
    assert (row.status, row.attempts, row.next_attempt_at) == ("retry_wait", 1, T0 + 10)
    assert (row.lease_losses, work_row(ledger_db, first.work_id).lease_losses) == (1, 1)
    assert row.last_error_code == dom.LEASE_EXPIRED
    assert row.last_error_detail_hash is None  # the stale detail went with the lease
    assert (row.lease_owner, row.lease_token, row.lease_expires_at) == (None, None, None)
    with refused(ledger_db, dom.LEASE_LOST):
        service.complete(again, result_for(again))
    with refused(ledger_db, dom.LEASE_LOST):
        service.complete(first, result_for(first))
    assert service.status(cid).error_counts == {dom.LEASE_EXPIRED: 1}


def test_a_lost_lease_costs_no_attempt_until_the_lease_loss_budget_is_spent(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    """A worker that dies mid-case is not the case's fault: with one attempt, an item
    survives nine lost leases; the tenth spends its lease-loss budget (a case that
    kills every worker that runs it still ends)."""
    plan = make_plan(cases=1, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite, max_attempts=1)
    claim = service.claim(cid, "w-1", lease_seconds=5)
    for lost in range(1, dom.DEFAULT_MAX_LEASE_LOSSES):
        assert claim is not None and claim.attempt == 1
        clock.advance(5)
        row = work_row(ledger_db, claim.work_id)
        assert (row.status, row.attempts, row.lease_losses) == ("leased", 1, lost - 1)
        claim = service.claim(cid, f"w-{lost + 1}", lease_seconds=5)  # taken over
    assert claim is not None
    clock.advance(5)
    assert service.claim(cid, "w-last") is None
    row = work_row(ledger_db, claim.work_id)
    assert (row.status, row.attempts, row.lease_losses) == ("failed", 1, 10)
    assert row.last_error_code == dom.LEASE_LOSSES_SPENT
    status = service.status(cid)
    assert status.blocked and status.error_counts == {dom.LEASE_LOSSES_SPENT: 1}
    assert service.verify(cid).ok  # ten lease_expired rows in the history agree
    history = service.attempts(cid).attempts
    assert [(a.attempt, str(a.outcome)) for a in history] == [(1, "lease_expired")] * 10


def test_a_swept_lease_is_due_again_with_its_attempt_given_back(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite, max_attempts=1)
    first = service.claim(cid, "w-1", lease_seconds=5)
    second = service.claim(cid, "w-1", lease_seconds=5)
    assert first is not None and second is not None
    service.complete(first, result_for(first))
    clock.advance(5)
    assert service.health(cid).reasons == (dom.LEASE_EXPIRED,)
    again = service.claim(cid, "w-2")  # the sweep releases the lost lease, then it is leased
    assert again is not None and again.work_id == second.work_id and again.attempt == 1
    service.complete(again, result_for(again))
    assert service.status(cid).complete and service.verify(cid).ok


def test_campaign_updated_at_moves_with_progress(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    assert service.status(cid).updated_at == T0
    clock.advance(30)
    claim = service.claim(cid, "w-1")
    assert claim is not None
    assert service.status(cid).updated_at == T0  # a claim is not progress
    service.complete(claim, result_for(claim))
    assert service.status(cid).updated_at == T0 + 30
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "test.flaky", now=T0 + 10)  # an older clock never moves it back
    assert service.status(cid).updated_at == T0 + 30


# -- renew -------------------------------------------------------------------------------------


def test_renew_extends_the_live_lease(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=10)
    assert claim is not None
    clock.advance(9)
    renewed = service.renew(claim, lease_seconds=20)
    assert renewed.lease_expires_at == T0 + 29
    assert attrs.evolve(renewed, lease_expires_at=claim.lease_expires_at) == claim
    assert work_row(ledger_db, claim.work_id).lease_expires_at == T0 + 29
    clock.advance(15)
    service.complete(renewed, result_for(renewed))


def test_renew_refuses_what_is_not_the_live_lease(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=10)
    assert claim is not None
    for forged in (
        attrs.evolve(claim, lease_token="guessed"),
        attrs.evolve(claim, lease_owner="w-2"),
        attrs.evolve(claim, attempt=2),
        attrs.evolve(claim, lease_expires_at=claim.lease_expires_at + 1),
    ):
        with refused(ledger_db, dom.LEASE_LOST):
            service.renew(forged)
    clock.advance(1)
    renewed = service.renew(claim, lease_seconds=10)
    with refused(ledger_db, dom.LEASE_LOST):
        service.renew(claim)  # the superseded claim
    clock.advance(10)
    with refused(ledger_db, dom.LEASE_LOST):
        service.renew(renewed)  # expired
    with refused(ledger_db, dom.CLAIM_INVALID):
        service.renew(attrs.asdict(claim))  # type: ignore[arg-type]
    with refused(ledger_db, dom.DURATION_INVALID):
        service.renew(renewed, lease_seconds=-1)


# -- complete ----------------------------------------------------------------------------------


def test_complete_stores_the_canonical_result(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    clock.advance(3)
    result = result_for(claim, 0.5, notes={"z": 1, "a": [1, 2]})
    outcome = service.complete(claim, result)
    text = canonical_json(result)
    assert outcome == CaseOutcome(
        work_id=claim.work_id,
        target_locale=claim.target_locale,
        suite_case_key=claim.suite_case_key,
        status="succeeded",
        attempt=1,
        max_attempts=3,
        next_attempt_at=T0,
        error_code=None,
        error_detail_hash=None,
        result_sha256=sha256_text(text),
    )
    row = work_row(ledger_db, claim.work_id)
    assert (row.result_json, row.result_sha256, row.updated_at) == (text, sha256_text(text), T0 + 3)
    assert (row.lease_owner, row.lease_token, row.lease_expires_at) == (None, None, None)
    with refused(ledger_db, dom.LEASE_LOST):
        service.complete(claim, result)  # only once


def test_complete_refuses_invalid_results(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    good = result_for(claim)
    cases = [
        (["not", "a", "mapping"], dom.RESULT_INVALID),
        ({**good, "score": 7}, dom.RESULT_INVALID),
        (
            {**good, "suite": {"case_key": claim.suite_case_key, "suite_sha256": "0" * 64}},
            dom.RESULT_INVALID,
        ),
        ({**good, "score": math.nan}, dom.INPUT_INVALID),
        ({**good, "extra": {1, 2}}, dom.INPUT_INVALID),
        ({**good, "suite": {**good["suite"], "case_key": "case-0002"}}, dom.RESULT_MISMATCH),
        ({**good, "target_locale": "fr-FR"}, dom.RESULT_MISMATCH),
        ({**good, "padding": "x" * dom.MAX_RESULT_BYTES}, dom.RESULT_INVALID),
    ]
    for result, code in cases:
        with refused(ledger_db, code):
            service.complete(claim, result)  # type: ignore[arg-type]
    with refused(ledger_db, dom.CLAIM_INVALID):
        service.complete(None, good)  # type: ignore[arg-type]
    service.complete(claim, good)  # the lease survived every refusal


def test_complete_after_expiry_or_validity(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(valid_until=T0 + 50)
    cid = service.create(plan.policy, plan.suite)
    claim = service.claim(cid, "w-1", lease_seconds=100)
    assert claim is not None
    clock.advance(51)
    with refused(ledger_db, dom.VALIDITY_EXPIRED):
        service.complete(claim, result_for(claim))
    other = service.claim(cid, "w-1", lease_seconds=10, now=T0 + 1)
    assert other is not None
    with refused(ledger_db, dom.LEASE_LOST):
        service.complete(other, result_for(other), now=T0 + 11)


# -- fail --------------------------------------------------------------------------------------


def test_fail_schedules_a_retry(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    clock.advance(2)
    outcome = service.fail(claim, "provider.timeout", delay_seconds=40, detail="socket closed")
    assert (outcome.status, outcome.attempt, outcome.next_attempt_at) == ("retry_wait", 1, T0 + 42)
    assert outcome.error_code == "provider.timeout"
    assert outcome.error_detail_hash == sha256_text("socket closed")
    row = work_row(ledger_db, claim.work_id)
    assert "socket closed" not in str(tuple(row))
    assert service.status(cid).error_counts == {"provider.timeout": 1}


def test_fail_terminal_and_spent(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2, locales=("de-DE",))
    cid = service.create(plan.policy, plan.suite, max_attempts=2)
    first = service.claim(cid, "w-1")
    assert first is not None
    out = service.fail(first, "judge.refused", retryable=False, delay_seconds=99)
    assert (out.status, out.next_attempt_at) == ("failed", T0)
    second = service.claim(cid, "w-1")
    assert second is not None and second.work_id != first.work_id
    assert service.fail(second, "x.y").status == "retry_wait"
    third = service.claim(cid, "w-1")
    assert third is not None and third.work_id == second.work_id and third.attempt == 2
    assert service.fail(third, "x.y").status == "failed"  # attempts spent
    assert service.claim(cid, "w-1") is None
    status = service.status(cid)
    assert status.counts["failed"] == 2 and status.blocked and not status.complete


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"code": ""}, dom.IDENTITY_INVALID),
        ({"code": " padded"}, dom.IDENTITY_INVALID),
        ({"code": "Not A Code"}, dom.FAILURE_INVALID),
        ({"code": "ok.code", "retryable": "yes"}, dom.FAILURE_INVALID),
        ({"code": "ok.code", "detail": "nul\x00"}, dom.FAILURE_INVALID),
        ({"code": "ok.code", "detail": 5}, dom.FAILURE_INVALID),
        ({"code": "ok.code", "delay_seconds": -1}, dom.DURATION_INVALID),
        ({"code": "ok.code", "now": math.nan}, dom.TIME_INVALID),
        # The time is checked before the detail text.
        ({"code": "ok.code", "detail": "nul\x00", "now": math.nan}, dom.TIME_INVALID),
    ],
)
def test_fail_refuses_bad_input(
    ledger_db: Database, service: CampaignService, cid: str, kwargs: dict[str, object], code: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    with refused(ledger_db, code):
        service.fail(claim, **kwargs)  # type: ignore[arg-type]


def test_fail_needs_the_live_lease(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    claim = service.claim(cid, "w-1", lease_seconds=5)
    assert claim is not None
    with refused(ledger_db, dom.LEASE_LOST):
        service.fail(attrs.evolve(claim, lease_token="x"), "a.b")
    clock.advance(5)
    with refused(ledger_db, dom.LEASE_LOST):
        service.fail(claim, "a.b")
    with refused(ledger_db, dom.CLAIM_INVALID):
        service.fail("claim", "a.b")  # type: ignore[arg-type]


def test_every_item_completes(service: CampaignService, cid: str) -> None:
    assert complete_all(service, cid) == 6
    status = service.status(cid)
    assert status.complete and not status.blocked
    assert status.counts == {
        "pending": 0,
        "leased": 0,
        "retry_wait": 0,
        "succeeded": 6,
        "failed": 0,
    }


def test_claims_of_a_forged_claim_class_are_refused(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None

    @attrs.frozen
    class Lookalike:
        work_id: str
        campaign_id: str

    fake = Lookalike(claim.work_id, claim.campaign_id)
    before = snapshot(ledger_db)
    for call in (
        service.renew,
        lambda c: service.complete(c, {}),
        lambda c: service.fail(c, "a.b"),
    ):
        with pytest.raises(Exception) as caught:
            call(fake)
        assert getattr(caught.value, "code", None) == dom.CLAIM_INVALID
    assert snapshot(ledger_db) == before
    assert isinstance(claim, ClaimedCase)
