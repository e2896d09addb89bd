"""Campaign factories make exactly what the service would: hashes, ids, healthy rows."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger import Database
from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.adapters.verification import StructuralResultVerifier
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite, SuiteCase
from benchledger.domain.canonical import canonical_json, sha256_json, sha256_text
from benchledger.models.campaign import (
    CampaignRow,
    ReportRow,
    ReportStateRow,
    StoredPolicyRow,
    StoredSuiteRow,
    WorkRow,
)
from benchledger.services.campaigns import CampaignService
from benchledger.testing import LedgerClock
from benchledger.testing.factories import (
    TEST_FAILURE_CODE,
    CampaignPlanFactory,
    CampaignPolicyFactory,
    CampaignRowFactory,
    ClaimLogRowFactory,
    ReportRowFactory,
    ReportStateRowFactory,
    StoredPolicyRowFactory,
    StoredSuiteRowFactory,
    SuiteCaseFactory,
    SuiteFactory,
    WorkRowFactory,
    case_result,
    plan_results,
)

# -- value objects (no database) ---------------------------------------------------------


def test_value_factories_return_the_real_value_objects() -> None:
    assert isinstance(SuiteCaseFactory(), SuiteCase)
    assert isinstance(SuiteFactory(), Suite)
    assert isinstance(CampaignPolicyFactory(), CampaignPolicy)
    assert isinstance(CampaignPlanFactory(), CampaignPlan)


def test_suite_hash_is_the_suites_own() -> None:
    suite = SuiteFactory(case_count=4)
    assert len(suite.cases) == 4
    assert len(set(suite.keys)) == 4
    rebuilt = Suite(SuiteCase(**case.as_payload()) for case in suite.cases)
    assert suite.sha256 == rebuilt.sha256 == sha256_json(suite.manifest())
    assert Suite.from_manifest(suite.manifest()) == suite


def test_fresh_suites_differ_and_given_cases_are_kept() -> None:
    assert SuiteFactory().sha256 != SuiteFactory().sha256
    cases = SuiteCaseFactory.build_batch(2)
    assert SuiteFactory(cases=cases).cases == tuple(cases)


def test_policy_binds_its_suite_and_derives_the_campaign_id() -> None:
    suite = SuiteFactory()
    policy = CampaignPolicyFactory(suite=suite, required_locales=["ja", "pt-BR"])
    assert policy.suite_sha256 == suite.sha256
    assert policy.sha256 == sha256_json(policy.as_payload())
    assert policy.campaign_id == dom.campaign_id_for(policy.sha256)
    assert CampaignPolicy.from_payload(policy.as_payload()) == policy


def test_plan_is_consistent_and_sized_by_its_parameters() -> None:
    plan = CampaignPlanFactory(suite__case_count=3, policy__required_locales=["de", "ja"])
    assert plan.policy.suite_sha256 == plan.suite.sha256
    assert plan.work_count == 6
    work = list(plan.work())
    assert len({item.work_id for item in work}) == 6
    for item in work:
        assert item.work_id == dom.work_id_for(
            plan.campaign_id,
            plan.policy.sha256,
            plan.suite.sha256,
            item.target_locale,
            item.suite_case_key,
        )


def test_case_results_pass_the_default_verifier() -> None:
    plan = CampaignPlanFactory()
    verifier = StructuralResultVerifier()
    for result in plan_results(plan, score=0.25):
        verifier.verify_result(result, plan.policy)
        assert result["passed"] is False


# -- rows, checked by the service --------------------------------------------------------


def _rows(session: Session, model: type, campaign_id: str) -> list[object]:
    column = model.campaign_id  # type: ignore[attr-defined]
    return list(session.scalars(sa.select(model).where(column == campaign_id)))


def test_campaign_is_healthy_and_what_create_would_store(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    plan = CampaignPlanFactory(suite__case_count=3)
    row = CampaignRowFactory(plan=plan)
    assert row.campaign_id == plan.campaign_id
    health = campaign_service.health(row.campaign_id)
    assert (health.status, health.reasons) == ("healthy", ())
    assert health.work_count == 6
    assert dict(health.counts)["pending"] == 6
    # create() of the same policy verifies the stored binding, attempts and content.
    assert campaign_service.create(plan.policy, plan.suite) == row.campaign_id
    with pytest.raises(dom.CampaignBlocked) as raised:
        campaign_service.create(plan.policy, plan.suite, max_attempts=5)
    assert raised.value.code == dom.ATTEMPTS_MISMATCH


def test_stored_content_rows_equal_the_services(
    ledger_session: Session, ledger_db: Database, campaign_service: CampaignService
) -> None:
    plan = CampaignPlanFactory()
    campaign_service.create(plan.policy, plan.suite)
    made_policy = StoredPolicyRowFactory.build(policy=plan.policy)
    made_suite = StoredSuiteRowFactory.build(suite=plan.suite)
    with ledger_db.read() as session:
        policy = session.get(StoredPolicyRow, plan.policy.sha256)
        suite = session.get(StoredSuiteRow, plan.suite.sha256)
    assert policy is not None and suite is not None
    assert (made_policy.policy_sha256, made_policy.policy_json) == (
        policy.policy_sha256,
        policy.policy_json,
    )
    assert sha256_text(made_policy.policy_json) == made_policy.policy_sha256
    assert (made_suite.suite_sha256, made_suite.suite_json, made_suite.case_count) == (
        suite.suite_sha256,
        suite.suite_json,
        suite.case_count,
    )


def test_factory_campaign_rows_equal_a_created_campaigns(
    ledger_session: Session, ledger_db: Database, ledger_clock: LedgerClock
) -> None:
    """Same plan, same time: the rows of create() and of the factory are identical."""
    plan = CampaignPlanFactory(policy__required_locales=["de", "fr", "ja"])
    CampaignService(ledger_db, clock=ledger_clock).create(plan.policy, plan.suite)
    columns = {
        model: [c.key for c in sa.inspect(model).columns]
        for model in (CampaignRow, WorkRow, ReportStateRow)
    }
    with ledger_db.read() as session:
        created = {
            model: sorted(
                tuple(getattr(r, c) for c in keys) for r in _rows(session, model, plan.campaign_id)
            )
            for model, keys in columns.items()
        }
    with ledger_db.write() as session:  # make room for the factory's copy
        for model in (WorkRow, ReportStateRow, CampaignRow):
            session.execute(sa.delete(model).where(model.campaign_id == plan.campaign_id))
    CampaignRowFactory(plan=plan)
    ledger_session.commit()
    with ledger_db.read() as session:
        made = {
            model: sorted(
                tuple(getattr(r, c) for c in keys) for r in _rows(session, model, plan.campaign_id)
            )
            for model, keys in columns.items()
        }
    assert made == created


@pytest.mark.parametrize(
    ("work_status", "status", "reasons"),
    [
        ("pending", "healthy", ()),
        ("leased", "healthy", ()),
        ("succeeded", "degraded", (dom.REPORT_MISSING,)),
        ("retry_wait", "degraded", (dom.error_reason(TEST_FAILURE_CODE),)),
        (
            "failed",
            "blocked",
            (dom.error_reason(TEST_FAILURE_CODE), dom.REASON_FAILED),
        ),
    ],
)
def test_every_work_status_is_a_consistent_state(
    ledger_session: Session,
    campaign_service: CampaignService,
    work_status: str,
    status: str,
    reasons: tuple[str, ...],
) -> None:
    row = CampaignRowFactory(work_status=work_status)
    health = campaign_service.health(row.campaign_id)
    assert dom.STATE_INVALID not in health.reasons
    assert (health.status, health.reasons) == (status, tuple(sorted(reasons)))
    assert dict(health.counts)[work_status] == row.work_count


def test_finalized_campaign_has_a_verifiable_report(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    plan = CampaignPlanFactory()
    row = CampaignRowFactory(plan=plan, finalized=True, score=0.75)
    health = campaign_service.health(row.campaign_id)
    assert (health.status, health.reasons, health.report_ready) == ("healthy", (), True)
    report = campaign_service.load_report(row.campaign_id)
    assert report == DefaultReportBuilder().build(plan.policy, plan.suite, plan_results(plan, 0.75))
    assert report["overall"]["mean_score"] == 0.75
    assert campaign_service.summarize(row.campaign_id) == report
    assert campaign_service.status(row.campaign_id).complete


def test_succeeded_campaign_finalizes_through_the_service(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    plan = CampaignPlanFactory()
    row = CampaignRowFactory(plan=plan, work_status="succeeded")
    assert campaign_service.report_finalization_required(row.campaign_id)
    claim = campaign_service.claim_report(row.campaign_id, "reporter")
    assert claim is not None
    report = campaign_service.summarize(row.campaign_id)
    campaign_service.complete_report(claim)
    made = ReportRowFactory.build(plan=plan, campaign=row)
    assert report == DefaultReportBuilder().build(plan.policy, plan.suite, plan_results(plan))
    assert canonical_json(report) == made.report_json
    with campaign_service.db.read() as session:
        stored = session.get(ReportRow, row.campaign_id)
    assert stored is not None
    assert (stored.report_sha256, stored.results_sha256) == (
        made.report_sha256,
        made.results_sha256,
    )
    assert campaign_service.health(row.campaign_id).status == "healthy"


def test_each_row_factory_alone_makes_a_healthy_campaign(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    work = WorkRowFactory()
    state = ReportStateRowFactory()
    report = ReportRowFactory()
    for campaign_id in (work.campaign_id, state.campaign_id, report.campaign_id):
        health = campaign_service.health(campaign_id)
        assert (health.status, health.reasons) == ("healthy", ())
    assert campaign_service.status(work.campaign_id).work_count == 1
    assert campaign_service.health(report.campaign_id).report_ready


def test_a_factory_campaign_runs_end_to_end_on_the_test_clock(
    ledger_session: Session, campaign_service: CampaignService, ledger_clock: LedgerClock
) -> None:
    plan = CampaignPlanFactory(suite__case_count=1, policy__required_locales=["de"])
    campaign_id = CampaignRowFactory(plan=plan).campaign_id
    claim = campaign_service.claim(campaign_id, "worker-a", lease_seconds=60)
    assert claim is not None
    assert claim.lease_expires_at == ledger_clock.peek() + 60
    ledger_clock.advance(61)  # the lease expires: the item comes back
    again = campaign_service.claim(campaign_id, "worker-b")
    assert again is not None and again.attempt == 1  # worker-a's lost lease cost nothing
    result = case_result(plan, again.target_locale, again.suite_case_key)
    assert campaign_service.complete(again, result).status == "succeeded"
    rc = campaign_service.claim_report(campaign_id, "reporter")
    assert rc is not None
    campaign_service.summarize(campaign_id)
    campaign_service.complete_report(rc)
    assert campaign_service.health(campaign_id).report_ready


def test_leased_rows_hold_a_live_lease_until_it_expires(
    ledger_session: Session, campaign_service: CampaignService, ledger_clock: LedgerClock
) -> None:
    work = WorkRowFactory(status="leased")
    assert work.lease_expires_at > ledger_clock.peek()
    assert campaign_service.claim(work.campaign_id, "other") is None
    ledger_clock.set(work.lease_expires_at)
    claim = campaign_service.claim(work.campaign_id, "other")
    assert claim is not None and claim.attempt == 1  # the lost lease gave its attempt back


def test_timestamps_follow_the_clock_and_skew_is_reported(
    ledger_session: Session, campaign_service: CampaignService, ledger_clock: LedgerClock
) -> None:
    row = CampaignRowFactory()
    assert row.created_at == ledger_clock.peek()
    ledger_clock.set(row.created_at - 3600)  # the reader's clock is an hour behind
    assert dom.REASON_CLOCK_SKEW in campaign_service.health(row.campaign_id).reasons


def test_a_factory_made_finished_campaign_passes_the_integrity_audit(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    row = CampaignRowFactory(plan=CampaignPlanFactory(suite__case_count=2), finalized=True)
    report = campaign_service.verify(row.campaign_id)
    assert report.ok, report.as_payload()
    assert report.rows_checked >= 4


def test_logged_claims_count_against_the_claims_per_minute_cap(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    capped = CampaignRowFactory(
        plan=CampaignPlanFactory(suite__case_count=2), max_claims_per_minute=2
    )
    ClaimLogRowFactory(campaign=capped)
    assert campaign_service.claim(capped.campaign_id, "w-1") is not None  # 1 logged + this one
    full = CampaignRowFactory(
        plan=CampaignPlanFactory(suite__case_count=2), max_claims_per_minute=2
    )
    ClaimLogRowFactory.create_batch(2, campaign=full)
    assert campaign_service.claim(full.campaign_id, "w-1") is None  # two in the last minute
