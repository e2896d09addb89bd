"""create / register: stored policy and suite, idempotence, binding, legacy campaigns."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.errors import CampaignBlocked, SchemaError
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import T0, complete_all, execute, make_plan, make_suite, report_state, snapshot


def test_create_stores_everything_workers_need(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    cid = service.create(plan.policy, plan.suite, max_attempts=4)
    assert cid == "benchmark-campaign-" + plan.policy.sha256
    rows = snapshot(ledger_db)
    # ... max_attempts, then the last integrity audit (none yet), then the operators'
    # controls: not cancelled, no flow-control caps.
    audit = (None, None, None)
    controls = (None, None, None)
    # ... then no name, and the candidate its policy measures (what listings show).
    candidate = (
        plan.policy.candidate_provider_id,
        plan.policy.candidate_model_id,
        plan.policy.candidate_model_version,
    )
    # ... then the limit group it shares caps in (its provider's) and no evaluator name.
    routing = (plan.policy.candidate_provider_id, None)
    # ... then not archived: no archive facts (archived_at, items, digest, summary, seal).
    archive = (None,) * 5
    binding = (cid, plan.policy.sha256, plan.suite.sha256, 6, T0, T0, 4)
    assert rows["benchmark_campaigns"] == [
        (*binding, *audit, *controls, None, *candidate, *routing, *archive)
    ]
    assert sorted(row[0] for row in rows["benchmark_campaign_work"]) == sorted(
        work.work_id for work in plan.work()
    )
    assert {row[4:8] for row in rows["benchmark_campaign_work"]} == {("pending", 0, 4, T0)}
    policy_json = canonical_json(plan.policy.as_payload())
    suite_json = canonical_json(plan.suite.manifest())
    assert rows["benchmark_campaign_policies"] == [(plan.policy.sha256, policy_json, T0)]
    assert rows["benchmark_campaign_suites"] == [(plan.suite.sha256, suite_json, 3, T0)]
    assert sha256_text(policy_json) == plan.policy.sha256
    state = report_state(ledger_db, cid)
    assert (state.status, state.attempts, state.max_attempts) == ("pending", 0, 4)
    assert rows["benchmark_campaign_reports"] == []
    # A fresh service (another worker process) needs only the id.
    other = CampaignService(ledger_db, clock=lambda: T0)
    assert other.policy(cid) == plan.policy
    assert other.suite(cid) == plan.suite


def test_create_is_idempotent(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan, clock: LedgerClock
) -> None:
    cid = service.create(plan.policy, plan.suite)
    before = snapshot(ledger_db)
    clock.advance(60)
    assert service.create(plan.policy, plan.suite) == cid
    assert CampaignService(ledger_db, clock=clock).create(plan.policy, plan.suite) == cid
    assert snapshot(ledger_db) == before


def test_create_refuses_other_max_attempts(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    service.create(plan.policy, plan.suite, max_attempts=3)
    with refused(ledger_db, dom.ATTEMPTS_MISMATCH):
        service.create(plan.policy, plan.suite, max_attempts=5)


@pytest.mark.parametrize("max_attempts", [0, 21, True, 2.5, "3"])
def test_create_refuses_bad_max_attempts(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan, max_attempts: object
) -> None:
    with refused(ledger_db, dom.ATTEMPTS_INVALID):
        service.create(plan.policy, plan.suite, max_attempts=max_attempts)  # type: ignore[arg-type]


def test_create_refuses_a_suite_that_is_not_the_policys(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    with refused(ledger_db, dom.SUITE_MISMATCH):
        service.create(plan.policy, make_suite(4))


def test_create_refuses_an_expired_policy(ledger_db: Database, service: CampaignService) -> None:
    plan = make_plan(valid_until=T0 - 1)
    with refused(ledger_db, dom.VALIDITY_EXPIRED):
        service.create(plan.policy, plan.suite)


def test_create_refuses_wrong_types_and_times(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    with refused(ledger_db, dom.POLICY_INVALID):
        service.create(plan.policy.as_payload(), plan.suite)  # type: ignore[arg-type]
    with refused(ledger_db, dom.SUITE_INVALID):
        service.create(plan.policy, plan.suite.manifest())  # type: ignore[arg-type]
    with refused(ledger_db, dom.TIME_INVALID):
        service.create(plan.policy, plan.suite, now=math.nan)


def test_create_verifies_an_existing_campaigns_binding(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    cid = service.create(plan.policy, plan.suite)
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET work_id = :new"
        " WHERE campaign_id = :c AND suite_case_key = 'case-0000' AND target_locale = 'de-DE'",
        new="benchmark-work-" + "0" * 64,
        c=cid,
    )
    with refused(ledger_db, dom.STATE_INVALID):
        service.create(plan.policy, plan.suite)


def test_create_verifies_stored_content(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    service.create(plan.policy, plan.suite)
    execute(ledger_db, "UPDATE benchmark_campaign_suites SET suite_json = suite_json || ' '")
    with refused(ledger_db, dom.STATE_INVALID):
        service.create(plan.policy, plan.suite)


def test_two_campaigns_share_one_stored_suite(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    service.create(plan.policy, plan.suite)
    other = CampaignPlan(make_plan(candidate_model_version="2026-02").policy, plan.suite)
    assert service.create(other.policy, other.suite) != plan.campaign_id
    rows = snapshot(ledger_db)
    assert len(rows["benchmark_campaign_suites"]) == 1
    assert len(rows["benchmark_campaign_policies"]) == 2


# -- campaigns without a stored policy (adopted from the legacy store) -------------------------


def _forget_policy(db: Database) -> None:
    execute(db, "DELETE FROM benchmark_campaign_policies")
    execute(db, "DELETE FROM benchmark_campaign_suites")


def test_legacy_campaign_works_once_registered(
    ledger_db: Database, clock: LedgerClock, plan: CampaignPlan
) -> None:
    cid = CampaignService(ledger_db, clock=clock).create(plan.policy, plan.suite)
    _forget_policy(ledger_db)
    service = CampaignService(ledger_db, clock=clock)  # a worker that never saw the policy
    with refused(ledger_db, dom.POLICY_UNREGISTERED):
        service.claim(cid, "w-1")
    health = service.health(cid)
    assert (health.status, health.reasons) == ("blocked", (dom.POLICY_UNREGISTERED,))
    assert service.register(plan.policy, plan.suite) == cid
    assert service.register(plan.policy, plan.suite) == cid  # again: a no-op
    assert complete_all(CampaignService(ledger_db, clock=clock), cid) == 6
    assert service.health(cid).reasons == (dom.REPORT_MISSING,)


def test_register_refuses_what_does_not_match(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    cid = service.create(plan.policy, plan.suite)
    _forget_policy(ledger_db)
    with refused(ledger_db, dom.SUITE_MISMATCH):
        service.register(plan.policy, make_suite(5))
    other = make_plan(candidate_model_id="another")
    with refused(ledger_db, dom.NOT_FOUND):
        service.register(other.policy, other.suite)
    execute(ledger_db, "DELETE FROM benchmark_campaign_report_state")
    execute(ledger_db, "DELETE FROM benchmark_campaign_work WHERE target_locale = 'fr-FR'")
    with refused(ledger_db, dom.STATE_INVALID):
        service.register(plan.policy, plan.suite)
    assert cid


def test_unknown_campaigns(ledger_db: Database, service: CampaignService) -> None:
    for campaign_id in ("benchmark-campaign-" + "0" * 64, "nonsense", None):
        with refused(ledger_db, dom.NOT_FOUND):
            service.claim(campaign_id, "w-1")  # type: ignore[arg-type]
        with pytest.raises(CampaignBlocked) as caught:
            service.status(campaign_id)  # type: ignore[arg-type]
        assert caught.value.code == dom.NOT_FOUND
        health = service.health(campaign_id)  # type: ignore[arg-type]
        assert health.status == "blocked"
        assert health.reasons == (dom.NOT_FOUND,)


LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy" / "v3.sqlite"


def test_a_legacy_database_adopted_by_alembic_waits_for_registration(tmp_path: Path) -> None:
    path = tmp_path / "legacy.sqlite"
    shutil.copyfile(LEGACY, path)
    db = Database(f"sqlite:///{path}")
    try:
        db.upgrade()
        service = CampaignService(db, clock=lambda: 1_768_600_000.0)
        cid = "benchmark-campaign-a5c5badfd55877ab37880d1862b63063d4e9f9ac553821aa9830263ed244e03c"
        with pytest.raises(CampaignBlocked) as caught:
            service.claim(cid, "w-1")
        assert caught.value.code == dom.POLICY_UNREGISTERED
        assert service.health(cid).reasons == (dom.POLICY_UNREGISTERED,)
    finally:
        db.dispose()


def test_a_database_without_the_claim_index_is_refused(ledger_db: Database) -> None:
    """A schema check must compare indexes too, not only column names: no ready index, refused."""
    execute(ledger_db, "DROP INDEX benchmark_campaign_claimable")
    with pytest.raises(SchemaError) as caught:
        CampaignService(ledger_db)
    assert caught.value.code == "benchmark.campaign.schema_invalid"
    assert "benchmark_campaign_claimable" in str(caught.value)
