"""Edits made behind the service's back (plain SQL) are detected everywhere they matter."""

from __future__ import annotations

import pytest

from benchledger.adapters.verification import HmacAttestationSigner, HmacAttestationVerifier
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import CampaignPlan
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

from .conftest import execute, make_policy, refused, result_for

KEY = b"evaluator-secret-key-0123456789"


def first_result(db: Database) -> tuple[str, str]:
    import sqlalchemy as sa

    with db.engine.connect() as connection:
        row = connection.execute(
            sa.text(
                "SELECT work_id, result_json FROM benchmark_campaign_work"
                " ORDER BY target_locale, suite_case_key LIMIT 1"
            )
        ).one()
    return row[0], row[1]


def rewrite_result(db: Database, *, keep_hash: bool, score: float = 0.01) -> None:
    """Change the first item's score; update its sha256 too unless ``keep_hash``."""
    work_id, text = first_result(db)
    edited = text.replace('"score":0.8', f'"score":{score}')
    assert edited != text
    if keep_hash:
        execute(
            db,
            "UPDATE benchmark_campaign_work SET result_json = :t WHERE work_id = :w",
            t=edited,
            w=work_id,
        )
    else:
        execute(
            db,
            "UPDATE benchmark_campaign_work SET result_json = :t, result_sha256 = :h"
            " WHERE work_id = :w",
            t=edited,
            h=sha256_text(edited),
            w=work_id,
        )


def finish(
    service: CampaignService, cid: str, sign: HmacAttestationSigner | None = None
) -> dict[str, object]:
    while (claim := service.claim(cid, "w-1")) is not None:
        result = result_for(claim)
        if sign is not None:
            result = sign.sign(result, claim.job_payload["policy_sha256"])
        service.complete(claim, result)
    return service.summarize(cid)


def assert_code(call: object, code: str) -> None:
    with pytest.raises(CampaignBlocked) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == code


def test_result_text_edited_without_its_hash(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    finish(service, cid)
    rewrite_result(ledger_db, keep_hash=True)
    assert service.health(cid).reasons == (dom.STATE_INVALID,)
    assert_code(lambda: service.summarize(cid), dom.STATE_INVALID)
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_result_hash_edited(ledger_db: Database, service: CampaignService, cid: str) -> None:
    finish(service, cid)
    execute(ledger_db, "UPDATE benchmark_campaign_work SET result_sha256 = :h", h="0" * 64)
    assert service.health(cid).status == "blocked"
    assert_code(lambda: service.summarize(cid), dom.STATE_INVALID)


def test_result_and_hash_edited_after_the_report(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    """Structural checks pass, but the report's results digest no longer matches."""
    finish(service, cid)
    rewrite_result(ledger_db, keep_hash=False)
    health = service.health(cid)
    assert (health.status, health.reasons, health.report_ready) == (
        "blocked",
        (dom.REPORT_INVALID,),
        False,
    )
    assert_code(lambda: service.summarize(cid), dom.REPORT_INVALID)
    assert_code(lambda: service.load_report(cid), dom.REPORT_INVALID)


def test_report_edited_with_its_hash(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    report = finish(service, cid)
    forged = canonical_json({**report, "overall": {**report["overall"], "mean_score": 0.99}})  # type: ignore[dict-item]
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_reports SET report_json = :j, report_sha256 = :h",
        j=forged,
        h=sha256_text(forged),
    )
    assert service.health(cid).reasons == (dom.REPORT_INVALID,)
    assert_code(lambda: service.load_report(cid), dom.REPORT_INVALID)
    assert_code(lambda: service.summarize(cid), dom.REPORT_INVALID)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE benchmark_campaign_reports SET report_sha256 = '" + "1" * 64 + "'",
        "UPDATE benchmark_campaign_reports SET results_sha256 = '" + "1" * 64 + "'",
        "UPDATE benchmark_campaign_reports SET policy_sha256 = '" + "1" * 64 + "'",
        "UPDATE benchmark_campaign_reports SET report_json = report_json || ' '",
        "UPDATE benchmark_campaign_reports SET created_at = 1e11",
    ],
)
def test_report_row_edits(
    ledger_db: Database, service: CampaignService, cid: str, statement: str
) -> None:
    finish(service, cid)
    execute(ledger_db, statement)
    assert service.health(cid).reasons == (dom.REPORT_INVALID,)
    assert_code(lambda: service.load_report(cid), dom.REPORT_INVALID)


def test_status_edited(ledger_db: Database, service: CampaignService, cid: str) -> None:
    finish(service, cid)
    work_id, _ = first_result(ledger_db)
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET status = 'pending' WHERE work_id = :w",
        w=work_id,
    )
    assert service.health(cid).reasons == (dom.STATE_INVALID,)
    assert_code(lambda: service.summarize(cid), dom.INCOMPLETE)
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET status = 'failed' WHERE work_id = :w",
        w=work_id,
    )
    assert service.health(cid).reasons == (dom.STATE_INVALID,)


def test_report_state_edited(ledger_db: Database, service: CampaignService, cid: str) -> None:
    finish(service, cid)
    execute(
        ledger_db, "UPDATE benchmark_campaign_report_state SET status = 'pending', attempts = 0"
    )
    health = service.health(cid)
    assert dom.REPORT_MISSING in health.reasons and not health.report_ready


# -- with a trusted evaluator's attestations -------------------------------------------------


@pytest.fixture
def attested(ledger_db: Database, clock: LedgerClock) -> CampaignService:
    return CampaignService(
        ledger_db, clock=clock, result_verifier=HmacAttestationVerifier({"evaluator": KEY})
    )


def test_attested_results_only(
    ledger_db: Database, attested: CampaignService, plan: CampaignPlan
) -> None:
    cid = attested.create(plan.policy, plan.suite)
    claim = attested.claim(cid, "w-1")
    assert claim is not None
    with refused(ledger_db, dom.RESULT_INVALID):
        attested.complete(claim, result_for(claim))
    wrong_key = HmacAttestationSigner("evaluator", b"not-the-evaluator-key-0000")
    with refused(ledger_db, dom.RESULT_INVALID):
        attested.complete(claim, wrong_key.sign(result_for(claim), plan.policy.sha256))
    signer = HmacAttestationSigner("evaluator", KEY)
    assert attested.complete(claim, signer.sign(result_for(claim), plan.policy.sha256)).status == (
        "succeeded"
    )


def test_attested_result_edited_with_its_hash(
    ledger_db: Database, attested: CampaignService, plan: CampaignPlan
) -> None:
    cid = attested.create(plan.policy, plan.suite)
    finish(attested, cid, HmacAttestationSigner("evaluator", KEY))
    assert attested.health(cid).status == "healthy"
    rewrite_result(ledger_db, keep_hash=False)
    # The signature no longer matches: the stored result itself is untrusted.
    assert attested.health(cid).reasons == (dom.STATE_INVALID,)
    assert_code(lambda: attested.summarize(cid), dom.STATE_INVALID)
    assert_code(lambda: attested.load_report(cid), dom.STATE_INVALID)


def test_attested_result_edited_before_the_report(
    ledger_db: Database, attested: CampaignService, plan: CampaignPlan
) -> None:
    cid = attested.create(plan.policy, plan.suite)
    signer = HmacAttestationSigner("evaluator", KEY)
    while (claim := attested.claim(cid, "w-1")) is not None:
        attested.complete(claim, signer.sign(result_for(claim), plan.policy.sha256))
    rewrite_result(ledger_db, keep_hash=False)
    with refused(ledger_db, dom.STATE_INVALID):
        attested.summarize(cid)  # no report is built from an untrusted result
    assert attested.health(cid).status == "blocked"


def test_campaign_pointed_at_another_policy(
    ledger_db: Database, clock: LedgerClock, plan: CampaignPlan
) -> None:
    """The campaign id is the policy's sha256: a row pointed at another stored policy is caught."""
    service = CampaignService(ledger_db, clock=clock)
    cid = service.create(plan.policy, plan.suite)
    other = CampaignPlan(make_policy(plan.suite, candidate_model_id="someone-else"), plan.suite)
    service.create(other.policy, other.suite)
    execute(
        ledger_db,
        "UPDATE benchmark_campaigns SET policy_sha256 = :p WHERE campaign_id = :c",
        p=other.policy.sha256,
        c=cid,
    )
    fresh = CampaignService(ledger_db, clock=clock)  # nothing cached
    with refused(ledger_db, dom.POLICY_MISMATCH):
        fresh.claim(cid, "w-1")
    assert_code(lambda: fresh.status(cid), dom.POLICY_MISMATCH)
    assert fresh.health(cid).reasons == (dom.STATE_INVALID,)
