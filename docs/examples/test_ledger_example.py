"""An example test module for code built on benchledger.

It needs nothing but ``pip install 'benchledger[testing]'`` (benchledger,
pytest and factory-boy) and runs as it stands with plain ``pytest``: the
``benchledger.testing`` plugin loads by itself and provides the fixtures used
below. Each test gets a migrated database of its own (SQLite by default; give
``--ledger-url`` or ``BENCHLEDGER_TEST_URL`` for PostgreSQL).
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from benchledger import Database, StudyError
from benchledger.domain.study_runs import MaterialRef
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.testing import LedgerClock
from benchledger.testing.factories import (
    TEST_OWNER,
    CampaignPlanFactory,
    CampaignRowFactory,
    EnvelopeFactory,
    MaterialRowFactory,
    ReservationRowFactory,
    StudyRowFactory,
    TrialRowFactory,
    case_result,
)


def test_the_database_is_migrated_and_empty(ledger_db: Database) -> None:
    assert ledger_db.current_revision() is not None
    ledger_db.require_current_schema()


def test_a_worker_finishes_a_campaign(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    # A campaign as CampaignService.create stores it: 1 locale x 3 cases, all pending.
    plan = CampaignPlanFactory(suite__case_count=3, policy__required_locales=["de-DE"])
    campaign_id = CampaignRowFactory(plan=plan).campaign_id

    while (claim := campaign_service.claim(campaign_id, "worker-1")) is not None:
        result = case_result(plan, claim.target_locale, claim.suite_case_key, score=0.8)
        campaign_service.complete(claim, result)

    report_claim = campaign_service.claim_report(campaign_id, "reporter")
    assert report_claim is not None
    report = campaign_service.summarize(campaign_id)
    campaign_service.complete_report(report_claim)
    assert report["overall"] == {"items": 3, "mean_score": 0.8, "pass_rate": 1.0, "passed": 3}
    assert campaign_service.health(campaign_id).report_ready


def test_an_expired_lease_comes_back(
    ledger_session: Session, campaign_service: CampaignService, ledger_clock: LedgerClock
) -> None:
    campaign_id = CampaignRowFactory(plan__suite__case_count=1).campaign_id
    first = campaign_service.claim(campaign_id, "worker-1", lease_seconds=60)
    assert first is not None

    ledger_clock.advance(61)  # no sleeping: the services read the test's clock

    second = campaign_service.claim(campaign_id, "worker-2")
    assert second is not None
    # worker-1 stopped renewing (it died): that costs the item no attempt.
    assert (second.work_id, second.attempt) == (first.work_id, 1)


def test_a_ready_campaign_is_healthy(
    ledger_session: Session, campaign_service: CampaignService
) -> None:
    campaign = CampaignRowFactory(finalized=True)  # every item done, report stored
    health = campaign_service.health(campaign.campaign_id)
    assert (health.status, health.reasons, health.report_ready) == ("healthy", (), True)


def test_admission_is_refused_when_the_budget_is_spent(
    ledger_session: Session, study_service: StudyService
) -> None:
    # An open study with room for exactly one attempt, and one member trial.
    envelope = EnvelopeFactory()
    study = StudyRowFactory(state="open", limits=envelope)
    material = MaterialRowFactory(material__envelope=envelope)
    trial = TrialRowFactory(study=study, material=material)
    # One admission (a run and its reservation) already charges the whole budget.
    ReservationRowFactory(study=study, material=material, trial=trial, run__state="failed")

    page = study_service.get(TEST_OWNER, study.id)
    assert page.charged == envelope
    assert page.remaining.attempt_slots == 0

    another = TrialRowFactory(study=study, material=material, replicate=1)
    with pytest.raises(StudyError) as refused:
        study_service.admit(
            TEST_OWNER,
            study.id,
            revision=study_service.get(TEST_OWNER, study.id).study.revision,
            admission_epoch=page.study.admission_epoch,
            trial_id=another.id,
            request_key="admit-second-attempt",
        )
    assert refused.value.code == "unavailable"


def test_the_service_takes_over_from_factory_rows(
    ledger_session: Session, study_service: StudyService
) -> None:
    study = StudyRowFactory()
    material = MaterialRowFactory()
    trial = study_service.prepare_trial(
        TEST_OWNER,
        study.id,
        revision=study.revision,
        material=MaterialRef(material.sha256),
        replicate=0,
        request_key="add-first-member",
    )
    assert study_service.get(TEST_OWNER, study.id).study.trial_ids == (trial.id,)
