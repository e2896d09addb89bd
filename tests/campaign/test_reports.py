"""status, report finalization (its own lease), summarize and load_report."""

from __future__ import annotations

import threading

import attrs
import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.campaign_results import ClaimedCase, ReportOutcome
from benchledger.domain.canonical import canonical_json, sha256_json, sha256_text
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import T0, complete_all, execute, make_plan, report_state, snapshot


@pytest.fixture
def done(service: CampaignService, cid: str, clock: LedgerClock) -> str:
    """A campaign whose six items all succeeded."""
    complete_all(service, cid)
    clock.advance(10)
    return cid


def test_status_counts(service: CampaignService, cid: str, plan: CampaignPlan) -> None:
    first = service.claim(cid, "w-1")
    second = service.claim(cid, "w-1")
    assert first is not None and second is not None
    service.complete(first, {**_result(first)})
    service.fail(second, "provider.down", delay_seconds=5)
    service.claim(cid, "w-2")
    status = service.status(cid)
    assert status.counts == {
        "pending": 3,
        "leased": 1,
        "retry_wait": 1,
        "succeeded": 1,
        "failed": 0,
    }
    assert status.error_counts == {"provider.down": 1}
    assert (status.complete, status.blocked, status.work_count) == (False, False, 6)
    assert (status.policy_sha256, status.suite_sha256) == (plan.policy.sha256, plan.suite.sha256)
    assert status.valid_until == plan.policy.valid_until
    assert status.report_finalization == {
        "status": "pending",
        "attempt": 0,
        "max_attempts": 3,
        "next_attempt_at": T0,
        "error_code": None,
    }
    assert status.as_payload()["counts"] == status.counts


def _result(claim: ClaimedCase) -> dict[str, object]:
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.9,
    }


def test_report_needs_every_item(ledger_db: Database, service: CampaignService, cid: str) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    for call in (
        lambda: service.summarize(cid),
        lambda: service.claim_report(cid, "r-1"),
        lambda: service.load_report(cid),
    ):
        with refused(ledger_db, dom.INCOMPLETE):
            call()
    assert service.report_finalization_required(cid) is False


def test_finalization_cycle(
    ledger_db: Database, service: CampaignService, done: str, clock: LedgerClock
) -> None:
    assert service.report_finalization_required(done) is True
    with refused(ledger_db, dom.REPORT_MISSING):
        service.load_report(done)
    claim = service.claim_report(done, "r-1", lease_seconds=60)
    assert claim is not None and (claim.attempt, claim.max_attempts) == (1, 3)
    assert claim.lease_expires_at == T0 + 10 + 60
    assert service.claim_report(done, "r-2") is None  # leased
    report = service.summarize(done)
    stored = snapshot(ledger_db)["benchmark_campaign_reports"]
    assert len(stored) == 1
    campaign_id, policy_sha, results_sha, report_json, report_sha, created_at = stored[0]
    assert report_json == canonical_json(report) and report_sha == sha256_text(report_json)
    assert (campaign_id, created_at) == (done, T0 + 10)
    plan_results = service_results(ledger_db, done)
    assert results_sha == dom.results_sha256(plan_results) == report["results_sha256"]
    assert policy_sha == report["policy_sha256"]
    assert report_state(ledger_db, done).status == "leased"  # summarize leaves the lease alone
    clock.advance(5)
    outcome = service.complete_report(claim)
    assert outcome == ReportOutcome(done, "succeeded", 1, 3, T0 + 15, None, None)
    assert service.load_report(done) == report
    assert service.summarize(done) == report  # built once; later calls verify and return it
    assert snapshot(ledger_db)["benchmark_campaign_reports"] == stored
    assert service.report_finalization_required(done) is False
    assert service.claim_report(done, "r-2") is None
    health = service.health(done)
    assert (health.status, health.report_ready, health.reasons) == ("healthy", True, ())


def service_results(db: Database, campaign_id: str) -> list[str]:
    import sqlalchemy as sa

    with db.engine.connect() as connection:
        return list(
            connection.execute(
                sa.text(
                    "SELECT result_sha256 FROM benchmark_campaign_work WHERE campaign_id = :c"
                    " ORDER BY target_locale, suite_case_key"
                ),
                {"c": campaign_id},
            ).scalars()
        )


def test_summarize_without_a_lease_marks_the_state(
    ledger_db: Database, service: CampaignService, done: str
) -> None:
    report = service.summarize(done)
    state = report_state(ledger_db, done)
    assert (state.status, state.attempts) == ("succeeded", 1)
    assert service.load_report(done) == report
    assert service.claim_report(done, "r-1") is None


def test_complete_report_needs_the_stored_report(
    ledger_db: Database, service: CampaignService, done: str
) -> None:
    claim = service.claim_report(done, "r-1")
    assert claim is not None
    with refused(ledger_db, dom.REPORT_MISSING):
        service.complete_report(claim)


def test_report_lease_expiry_and_retries(
    ledger_db: Database, service: CampaignService, done: str, clock: LedgerClock
) -> None:
    first = service.claim_report(done, "r-1", lease_seconds=10)
    assert first is not None
    clock.advance(10)
    with refused(ledger_db, dom.REPORT_LEASE_LOST):
        service.renew_report(first)
    second = service.claim_report(done, "r-2", lease_seconds=10)
    # The lost lease gave its attempt back: r-2's is attempt 1 again.
    assert second is not None and second.attempt == 1 and second.lease_owner == "r-2"
    health = service.health(done)
    assert dom.report_error_reason(dom.REPORT_LEASE_EXPIRED) not in health.reasons
    out = service.fail_report(second, "report.store_busy", delay_seconds=30, detail="busy")
    assert (out.status, out.next_attempt_at, out.error_code) == (
        "retry_wait",
        T0 + 50,
        "report.store_busy",
    )
    assert out.error_detail_hash == sha256_text("busy")
    assert service.claim_report(done, "r-3") is None  # not yet due
    assert service.status(done).report_finalization["error_code"] == "report.store_busy"
    assert dom.REASON_REPORT_ERROR_PREFIX + "report.store_busy" in service.health(done).reasons
    clock.advance(30)
    third = service.claim_report(done, "r-3", lease_seconds=10)
    assert third is not None and third.attempt == 2
    clock.advance(10)
    fourth = service.claim_report(done, "r-4")  # a killed finalizer costs no attempt
    assert fourth is not None and fourth.attempt == 2
    state = report_state(ledger_db, done)
    assert (state.lease_losses, state.max_lease_losses) == (2, dom.DEFAULT_MAX_LEASE_LOSSES)
    out = service.fail_report(fourth, "report.store_busy", retryable=False)
    assert out.status == "failed"
    status = service.status(done)
    assert status.blocked and status.report_finalization["status"] == "failed"
    health = service.health(done)
    assert health.status == "blocked" and dom.REASON_REPORT_FAILED in health.reasons


def test_finalizers_killed_again_and_again_end_the_report_at_the_loss_budget(
    ledger_db: Database, service: CampaignService, done: str, clock: LedgerClock
) -> None:
    for killed in range(dom.DEFAULT_MAX_LEASE_LOSSES):
        claim = service.claim_report(done, f"r-{killed}", lease_seconds=10)
        assert claim is not None and claim.attempt == 1, killed
        clock.advance(10)
    assert service.claim_report(done, "r-last") is None
    state = report_state(ledger_db, done)
    assert (state.status, state.attempts, state.lease_losses) == ("failed", 1, 10)
    assert state.last_error_code == dom.REPORT_LEASE_LOSSES_SPENT
    assert service.status(done).blocked


def test_report_lease_expired_shows_in_health(
    service: CampaignService, done: str, clock: LedgerClock
) -> None:
    claim = service.claim_report(done, "r-1", lease_seconds=10)
    assert claim is not None
    clock.advance(11)
    health = service.health(done)
    assert dom.REPORT_LEASE_EXPIRED in health.reasons
    assert dom.REPORT_MISSING in health.reasons


def test_terminal_report_failure(ledger_db: Database, service: CampaignService, done: str) -> None:
    claim = service.claim_report(done, "r-1")
    assert claim is not None
    out = service.fail_report(claim, dom.REPORT_INVALID, retryable=False, delay_seconds=9)
    assert (out.status, out.attempt) == ("failed", 1)
    assert service.claim_report(done, "r-2") is None
    # A report stored later (outside a lease) marks the state succeeded.
    report = service.summarize(done)
    assert report_state(ledger_db, done).status == "succeeded"
    assert service.load_report(done) == report


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"code": "BAD"}, dom.REPORT_FAILURE_INVALID),
        ({"code": "a.b", "retryable": 1}, dom.REPORT_FAILURE_INVALID),
        ({"code": "a.b", "detail": "x\x00"}, dom.REPORT_FAILURE_INVALID),
        ({"code": ""}, dom.IDENTITY_INVALID),
        ({"code": "a.b", "delay_seconds": 90_000}, dom.DURATION_INVALID),
        ({"code": "a.b", "detail": "x\x00", "now": -1}, dom.TIME_INVALID),  # time first
    ],
)
def test_fail_report_refuses_bad_input(
    ledger_db: Database, service: CampaignService, done: str, kwargs: dict[str, object], code: str
) -> None:
    claim = service.claim_report(done, "r-1")
    assert claim is not None
    with refused(ledger_db, code):
        service.fail_report(claim, **kwargs)  # type: ignore[arg-type]


def test_report_claims_are_checked(
    ledger_db: Database, service: CampaignService, done: str, clock: LedgerClock
) -> None:
    claim = service.claim_report(done, "r-1", lease_seconds=10)
    assert claim is not None
    service.summarize(done)
    for forged in (attrs.evolve(claim, lease_token="x"), attrs.evolve(claim, lease_owner="r-9")):
        with refused(ledger_db, dom.REPORT_LEASE_LOST):
            service.complete_report(forged)
        with refused(ledger_db, dom.REPORT_LEASE_LOST):
            service.fail_report(forged, "a.b")
    with refused(ledger_db, dom.REPORT_CLAIM_INVALID):
        service.complete_report("claim")  # type: ignore[arg-type]
    with refused(ledger_db, dom.REPORT_CLAIM_INVALID):
        service.renew_report(None)  # type: ignore[arg-type]
    with refused(ledger_db, dom.REPORT_CLAIM_INVALID):
        service.fail_report(1, "a.b")  # type: ignore[arg-type]
    clock.advance(5)
    renewed = service.renew_report(claim, lease_seconds=10)
    assert renewed.lease_expires_at == T0 + 10 + 15
    with refused(ledger_db, dom.REPORT_LEASE_LOST):
        service.complete_report(claim)  # superseded by the renewal
    with refused(ledger_db, dom.IDENTITY_INVALID):
        service.claim_report(done, "")
    with refused(ledger_db, dom.DURATION_INVALID):
        service.claim_report(done, "r-2", lease_seconds=0)
    assert service.complete_report(renewed).status == "succeeded"


def test_report_after_validity(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=1, locales=("de-DE",), valid_until=T0 + 100)
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    claim = service.claim_report(cid, "r-1")
    assert claim is not None
    service.summarize(cid)
    clock.advance(101)
    for call in (
        lambda: service.claim_report(cid, "r-2"),
        lambda: service.summarize(cid),
        lambda: service.load_report(cid),
        lambda: service.complete_report(claim),
    ):
        with refused(ledger_db, dom.VALIDITY_EXPIRED):
            call()
    out = service.fail_report(claim, dom.VALIDITY_EXPIRED, retryable=False, now=T0 + 50)
    assert out.status == "failed"
    health = service.health(cid)
    assert health.status == "blocked" and dom.VALIDITY_EXPIRED in health.reasons


def test_report_state_invariants(ledger_db: Database, service: CampaignService, done: str) -> None:
    service.summarize(done)
    execute(ledger_db, "DELETE FROM benchmark_campaign_reports")
    with refused(ledger_db, dom.REPORT_STATE_INVALID):
        service.load_report(done)
    with pytest.raises(CampaignBlocked) as caught:
        service.report_finalization_required(done)
    assert caught.value.code == dom.REPORT_STATE_INVALID
    health = service.health(done)
    assert health.status == "blocked" and dom.REPORT_STATE_INVALID in health.reasons
    execute(ledger_db, "UPDATE benchmark_campaign_report_state SET last_error_code = 'x.y'")
    with refused(ledger_db, dom.REPORT_STATE_INVALID):
        service.status(done)
    assert service.health(done).reasons == (dom.STATE_INVALID,)


def test_concurrent_summaries_store_one_report(
    ledger_db: Database, clock: LedgerClock, done: str
) -> None:
    first = CampaignService(ledger_db, clock=clock)
    second = CampaignService(ledger_db, clock=clock)
    assert first.summarize(done) == second.summarize(done)
    assert len(snapshot(ledger_db)["benchmark_campaign_reports"]) == 1
    assert sha256_json(first.load_report(done)) == sha256_json(second.load_report(done))


def test_summarize_operation_guard(
    ledger_db: Database, service: CampaignService, done: str
) -> None:
    def broken() -> None:
        raise OSError("host refuses")

    with refused(ledger_db, dom.OPERATION_GUARD_FAILED):
        service.summarize(done, operation_guard=broken)

    def expired() -> None:
        raise CampaignBlocked(dom.VALIDITY_EXPIRED)

    with refused(ledger_db, dom.VALIDITY_EXPIRED):
        service.summarize(done, operation_guard=expired)
    calls: list[int] = []
    report = service.summarize(done, operation_guard=lambda: calls.append(1))
    assert len(calls) == 2  # before building and before storing
    assert service.summarize(done, operation_guard=lambda: calls.append(1)) == report
    assert len(calls) == 3  # before verifying the stored report


def test_a_report_claim_racing_another_waits_and_sees_its_lease(
    ledger_db: Database, service: CampaignService, done: str
) -> None:
    """Two claimers of one report: the later one returns None, never report_claim_lost.

    Another transaction leases the report state and holds it uncommitted while
    claim_report runs. On PostgreSQL claim_report used to read the state as
    pending, lose the race in its UPDATE and raise report_claim_lost; it now
    locks the state row, waits, and sees the other lease.
    """
    outcome: dict[str, object] = {}

    def claim() -> None:
        try:
            outcome["claim"] = service.claim_report(done, "r-2")
        except Exception as error:  # pragma: no cover - the failure being tested
            outcome["error"] = error

    with ledger_db.engine.connect() as connection, connection.begin():
        connection.execute(
            sa.text(
                "UPDATE benchmark_campaign_report_state SET status = 'leased', attempts = 1,"
                " lease_owner = 'r-1', lease_token = 'other', lease_expires_at = :expires,"
                " updated_at = :now WHERE campaign_id = :c"
            ),
            {"expires": T0 + 10_000, "now": T0 + 10, "c": done},
        )
        claimer = threading.Thread(target=claim, daemon=True)
        claimer.start()
        claimer.join(timeout=1.0)
        assert claimer.is_alive()  # waiting for the other claimer's transaction
    claimer.join(timeout=20)
    assert not claimer.is_alive()
    assert outcome == {"claim": None}
    state = report_state(ledger_db, done)
    assert (state.status, state.lease_owner) == ("leased", "r-1")


def test_results_are_bound_in_code_point_order_whatever_the_collation(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    """The report binds results in (locale, case key) code-point order, SQLite's order.

    On PostgreSQL the text columns' collation may be a language's (en_US) or
    change under the database (an OS upgrade, a restore elsewhere): a stored
    report must still verify, and health must not turn blocked.
    """
    plan = make_plan(cases=2, locales=("de-DE", "de-at"))  # "D" < "a" by code point only
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    report = service.summarize(cid)
    digests = sorted(
        (row.target_locale, row.suite_case_key, row.result_sha256)
        for row in _work_rows(ledger_db, cid)
    )
    assert report["results_sha256"] == dom.results_sha256([digest for *_, digest in digests])
    if ledger_db.dialect_name == "postgresql":
        execute(
            ledger_db,
            "ALTER TABLE benchmark_campaign_work"
            ' ALTER COLUMN target_locale TYPE text COLLATE "en-US-x-icu"',
        )
    assert service.load_report(cid) == report
    assert service.summarize(cid) == report
    health = service.health(cid)
    assert (health.status, health.report_ready) == ("healthy", True)


def _work_rows(db: Database, campaign_id: str) -> list[sa.Row[object]]:
    with db.engine.connect() as connection:
        return list(
            connection.execute(
                sa.text("SELECT * FROM benchmark_campaign_work WHERE campaign_id = :c"),
                {"c": campaign_id},
            )
        )
