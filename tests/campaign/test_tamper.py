"""Edits made behind the service's back (plain SQL): the integrity audit catches every kind.

One test (or one parameter) per kind of tampering: ``verify()`` names it (kind
and code), and where a read depends on the edited rows, that read refuses too
(``summarize``, ``load_report``, ``claim``, ``status``). ``load_report`` never
returns a report whose stored hash or binding does not verify.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from benchledger.adapters.verification import HmacAttestationSigner, HmacAttestationVerifier
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain import campaign_audit
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.integrity import IntegrityReport, Problem
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import T0, execute, make_policy, result_for

KEY = b"evaluator-secret-key-0123456789"


def first_result(db: Database) -> tuple[str, str]:
    with db.engine.connect() as connection:
        row = connection.execute(
            sa.text(
                "SELECT work_id, result_json FROM benchmark_campaign_work"
                " ORDER BY target_locale, suite_case_key LIMIT 1"
            )
        ).one()
    return row[0], row[1]


def rewrite_result(db: Database, *, keep_hash: bool, score: float = 0.01) -> str:
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
    return work_id


def finish(
    service: CampaignService, cid: str, sign: HmacAttestationSigner | None = None
) -> dict[str, Any]:
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


def kinds(report: IntegrityReport) -> dict[str, int]:
    return {str(problem.kind): problem.count for problem in report.problems}


def audit(db: Database, clock: LedgerClock, cid: str) -> IntegrityReport:
    """The audit of a fresh service (nothing cached), with its outcome recorded."""
    report = CampaignService(db, clock=clock).verify(cid)
    assert not report.ok
    return report


# -- results ------------------------------------------------------------------------------------


def test_result_text_edited_without_its_hash(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    work_id = rewrite_result(ledger_db, keep_hash=True)
    report = audit(ledger_db, clock, cid)
    # The digest still matches the report's binding; the rebuilt report does not.
    assert kinds(report) == {"result_hash": 1, "report_invalid": 1}
    assert report.problems[0].examples == (work_id,)
    assert report.reasons == (dom.REPORT_INVALID, dom.STATE_INVALID)
    assert_code(lambda: service.summarize(cid), dom.STATE_INVALID)
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_result_hash_edited(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    execute(ledger_db, "UPDATE benchmark_campaign_work SET result_sha256 = :h", h="0" * 64)
    assert kinds(audit(ledger_db, clock, cid)) == {
        "result_hash": 6,
        "result_seal": 6,
        "report_invalid": 1,
    }
    assert_code(lambda: service.summarize(cid), dom.STATE_INVALID)
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_result_and_hash_edited_after_the_report(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    """Hash and structure are consistent; the seal and the report's binding are not."""
    finish(service, cid)
    rewrite_result(ledger_db, keep_hash=False)
    assert kinds(audit(ledger_db, clock, cid)) == {"result_seal": 1, "report_invalid": 1}
    assert_code(lambda: service.summarize(cid), dom.REPORT_INVALID)
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_result_that_is_not_canonical_json(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    work_id, _ = first_result(ledger_db)
    text = '{"not": "canonical" }'
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET result_json = :t, result_sha256 = :h"
        " WHERE work_id = :w",
        t=text,
        h=sha256_text(text),
        w=work_id,
    )
    assert kinds(audit(ledger_db, clock, cid)) == {
        "result_invalid": 1,
        "result_seal": 1,
        "report_invalid": 1,
    }
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_result_moved_to_another_item(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    """A valid result of one item copied onto another (hash, and even seal inputs, intact)."""
    finish(service, cid)
    with ledger_db.engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT work_id, result_json, result_sha256 FROM benchmark_campaign_work"
                " ORDER BY target_locale, suite_case_key LIMIT 2"
            )
        ).all()
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET result_json = :t, result_sha256 = :h"
        " WHERE work_id = :w",
        t=rows[0].result_json,
        h=rows[0].result_sha256,
        w=rows[1].work_id,
    )
    assert {"result_invalid", "result_seal"} <= set(kinds(audit(ledger_db, clock, cid)))
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_succeeded_attempt_count_changed(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    """1 -> 2 on a succeeded item: every invariant still holds; the seal does not."""
    finish(service, cid)
    work_id, _ = first_result(ledger_db)
    execute(
        ledger_db, "UPDATE benchmark_campaign_work SET attempts = 2 WHERE work_id = :w", w=work_id
    )
    report = audit(ledger_db, clock, cid)
    assert kinds(report) == {"result_seal": 1}
    assert report.problems[0].examples == (work_id,)
    assert_code(lambda: service.load_report(cid), dom.STATE_INVALID)


def test_seal_removed(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    execute(ledger_db, "UPDATE benchmark_campaign_work SET result_seal = NULL")
    assert kinds(audit(ledger_db, clock, cid)) == {"result_seal": 6}


def test_item_status_edited(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    work_id, _ = first_result(ledger_db)
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET status = 'pending' WHERE work_id = :w",
        w=work_id,
    )
    found = kinds(audit(ledger_db, clock, cid))
    assert found["item_state"] == 1 and "report_state" in found
    assert_code(lambda: service.summarize(cid), dom.INCOMPLETE)
    assert_code(lambda: service.load_report(cid), dom.INCOMPLETE)
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_work SET status = 'failed' WHERE work_id = :w",
        w=work_id,
    )
    assert kinds(audit(ledger_db, clock, cid))["item_state"] == 1


# -- item rows (each a state the service never writes) ------------------------------------------

ITEM_EDITS = {
    "succeeded_without_result": (
        "UPDATE benchmark_campaign_work SET status = 'succeeded', attempts = 1",
        "item_state",
    ),
    "pending_with_attempts": ("UPDATE benchmark_campaign_work SET attempts = 2", "item_state"),
    "failed_without_code": (
        "UPDATE benchmark_campaign_work SET status = 'failed', attempts = 1",
        "item_state",
    ),
    "leased_without_owner": (
        "UPDATE benchmark_campaign_work SET status = 'leased', attempts = 1,"
        " lease_token = 't', lease_expires_at = 1e10",
        "item_state",
    ),
    "lease_fields_while_pending": (
        "UPDATE benchmark_campaign_work SET lease_owner = 'w'",
        "item_state",
    ),
    "retry_wait_spent": (
        "UPDATE benchmark_campaign_work SET status = 'retry_wait', attempts = 3,"
        " last_error_code = 'a.b'",
        "item_state",
    ),
    "bad_error_code": (
        "UPDATE benchmark_campaign_work SET status = 'retry_wait', attempts = 1,"
        " last_error_code = 'NOT A CODE'",
        "item_state",
    ),
    "bad_detail_hash": (
        "UPDATE benchmark_campaign_work SET status = 'retry_wait', attempts = 1,"
        " last_error_code = 'a.b', last_error_detail_hash = 'zz'",
        "item_state",
    ),
    "created_after_updated": (
        "UPDATE benchmark_campaign_work SET created_at = updated_at + 1",
        "item_state",
    ),
    "negative_time": ("UPDATE benchmark_campaign_work SET next_attempt_at = -1", "item_state"),
    "updated_in_the_future": (
        "UPDATE benchmark_campaign_work SET updated_at = 1e11, created_at = 1e11",
        "future_time",
    ),
    "result_on_a_pending_item": (
        "UPDATE benchmark_campaign_work SET result_json = '{}', result_sha256 = '" + "0" * 64 + "'",
        "item_state",
    ),
    "budget_of_one_item": (
        "UPDATE benchmark_campaign_work SET max_attempts = 5"
        " WHERE target_locale = 'de-DE' AND suite_case_key = 'case-0001'",
        "attempt_budget",
    ),
    "missing_item": (
        "DELETE FROM benchmark_campaign_work WHERE target_locale = 'de-DE'"
        " AND suite_case_key = 'case-0001'",
        "item_missing",
    ),
    "work_id_edited": (
        "UPDATE benchmark_campaign_work SET work_id = 'benchmark-work-" + "0" * 64 + "'"
        " WHERE target_locale = 'de-DE' AND suite_case_key = 'case-0001'",
        "item_unexpected",
    ),
    "item_moved_to_another_case": (
        "UPDATE benchmark_campaign_work SET suite_case_key = 'case-0009'"
        " WHERE target_locale = 'de-DE' AND suite_case_key = 'case-0001'",
        "item_unexpected",
    ),
}


@pytest.mark.parametrize("ids", ["kept", "derived"])
@pytest.mark.parametrize(("statement", "kind"), list(ITEM_EDITS.values()), ids=list(ITEM_EDITS))
def test_item_edits(
    ledger_db: Database,
    clock: LedgerClock,
    cid: str,
    statement: str,
    kind: str,
    ids: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each edit is found whether the audit keeps the plan's work ids between audits or
    (a plan over ``MAX_KEPT_IDS`` items) derives each batch's as the items stream."""
    if ids == "derived":
        monkeypatch.setattr(campaign_audit, "MAX_KEPT_IDS", 0)
    assert execute(ledger_db, statement) >= 1
    report = audit(ledger_db, clock, cid)
    assert kind in kinds(report)
    if kind in ("item_missing", "item_unexpected"):
        assert set(kinds(report)) <= {"item_missing", "item_unexpected"}
    assert report.as_payload()["ok"] is False


# -- the campaign row, its policy and suite -------------------------------------------------------

CAMPAIGN_EDITS = {
    "policy_edited": (
        "UPDATE benchmark_campaign_policies SET policy_json = replace(policy_json,"
        " 'test-model', 'other-model')",
        "policy_corrupt",
    ),
    "policy_deleted": ("DELETE FROM benchmark_campaign_policies", "policy_unregistered"),
    "suite_count_edited": ("UPDATE benchmark_campaign_suites SET case_count = 4", "suite_corrupt"),
    "suite_text_edited": (
        "UPDATE benchmark_campaign_suites SET suite_json = replace(suite_json,"
        " 'page 1.', 'page one.')",
        "suite_corrupt",
    ),
    "campaign_count_edited": ("UPDATE benchmark_campaigns SET work_count = 7", "work_count"),
    "campaign_budget_edited": ("UPDATE benchmark_campaigns SET max_attempts = 4", "attempt_budget"),
    "campaign_updated_in_the_future": (
        "UPDATE benchmark_campaigns SET updated_at = 1e11",
        "future_time",
    ),
    "campaign_created_in_the_future": (
        "UPDATE benchmark_campaigns SET created_at = 1e11",
        "campaign_times",
    ),
    "campaign_created_and_updated_in_the_future": (
        "UPDATE benchmark_campaigns SET created_at = 1e11, updated_at = 1e11",
        "future_time",
    ),
}


@pytest.mark.parametrize(
    ("statement", "kind"), list(CAMPAIGN_EDITS.values()), ids=list(CAMPAIGN_EDITS)
)
def test_campaign_edits(
    ledger_db: Database, clock: LedgerClock, cid: str, statement: str, kind: str
) -> None:
    assert execute(ledger_db, statement) >= 1
    report = audit(ledger_db, clock, cid)
    assert kind in kinds(report)
    # The cheap reads do not present the campaign as clean either: blocked since the audit
    # (a row dated in the future: clock skew, which health sees on the campaign row itself).
    fresh = CampaignService(ledger_db, clock=clock)
    health = fresh.health(cid)
    if kind == "future_time":
        assert (health.status, health.reasons) == ("degraded", (dom.REASON_CLOCK_SKEW,))
        assert health.verified_ok is True and fresh.status(cid).verified_ok is True
        return
    assert health.status == "blocked" and health.verified_ok is False
    try:
        status = fresh.status(cid)
    except CampaignBlocked:
        return  # refused outright (policy, suite or counts no longer bind)
    assert status.verified_ok is False


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
    assert "policy_mismatch" in kinds(audit(ledger_db, clock, cid))


# -- the report and its finalization state --------------------------------------------------------


def test_report_edited_with_its_hash(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    report = finish(service, cid)
    forged = canonical_json({**report, "overall": {**report["overall"], "mean_score": 0.99}})
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_reports SET report_json = :j, report_sha256 = :h",
        j=forged,
        h=sha256_text(forged),
    )
    assert kinds(audit(ledger_db, clock, cid)) == {"report_invalid": 1}
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
    ids=["report_sha256", "results_sha256", "policy_sha256", "report_json", "created_at"],
)
def test_report_row_edits(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str, statement: str
) -> None:
    finish(service, cid)
    execute(ledger_db, statement)
    assert kinds(audit(ledger_db, clock, cid)) == {"report_invalid": 1}
    # load_report never hands out a report whose hash or binding does not verify.
    assert_code(lambda: service.load_report(cid), dom.REPORT_INVALID)
    health = service.health(cid)
    assert health.status == "blocked" and not health.report_ready
    assert service.status(cid).verified_ok is False


REPORT_STATE_EDITS = {
    "pending_with_a_report": "UPDATE benchmark_campaign_report_state SET status = 'pending',"
    " attempts = 0",
    "leased_without_token": "UPDATE benchmark_campaign_report_state SET status = 'leased',"
    " lease_owner = 'r'",
    "failed_without_code": "UPDATE benchmark_campaign_report_state SET status = 'failed'",
    "budget_edited": "UPDATE benchmark_campaign_report_state SET max_attempts = 5",
    "created_after_updated": "UPDATE benchmark_campaign_report_state"
    " SET created_at = updated_at + 1",
}


@pytest.mark.parametrize(
    "statement", list(REPORT_STATE_EDITS.values()), ids=list(REPORT_STATE_EDITS)
)
def test_report_state_edits(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str, statement: str
) -> None:
    finish(service, cid)
    execute(ledger_db, statement)
    found = kinds(audit(ledger_db, clock, cid))
    assert "report_state" in found
    with pytest.raises(CampaignBlocked) as caught:
        service.load_report(cid)
    assert caught.value.code in (dom.REPORT_STATE_INVALID, dom.REPORT_MISSING)


def test_report_state_updated_in_the_future(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    execute(ledger_db, "UPDATE benchmark_campaign_report_state SET updated_at = 1e11")
    assert kinds(audit(ledger_db, clock, cid)) == {"future_time": 1}
    assert_code(lambda: service.load_report(cid), dom.REPORT_STATE_INVALID)


def test_report_deleted(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    finish(service, cid)
    execute(ledger_db, "DELETE FROM benchmark_campaign_reports")
    assert kinds(audit(ledger_db, clock, cid)) == {"report_state": 1}
    assert_code(lambda: service.load_report(cid), dom.REPORT_STATE_INVALID)


def test_report_on_an_unfinished_campaign(
    ledger_db: Database, service: CampaignService, clock: LedgerClock, cid: str
) -> None:
    execute(
        ledger_db,
        "INSERT INTO benchmark_campaign_reports VALUES (:c, :p, :r, '{}', :h, :t)",
        c=cid,
        p=cid.removeprefix(dom.CAMPAIGN_PREFIX),
        r="0" * 64,
        h=sha256_text("{}"),
        t=T0,
    )
    assert {"report_state", "report_invalid"} <= set(kinds(audit(ledger_db, clock, cid)))


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
    assert attested.verify(cid).ok and attested.health(cid).status == "healthy"
    rewrite_result(ledger_db, keep_hash=False)
    # The signature no longer matches: the stored result itself is untrusted.
    report = attested.verify(cid)
    assert kinds(report) == {"result_invalid": 1, "result_seal": 1, "report_invalid": 1}
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
    assert kinds(attested.verify(cid)) == {"result_invalid": 1, "result_seal": 1}
    assert attested.health(cid).status == "blocked"  # since the audit


def test_every_kind_of_problem_has_a_test() -> None:
    """Each :class:`Problem` kind is produced by some test of this module."""
    tested = {kind for _statement, kind in ITEM_EDITS.values()}
    tested |= {kind for _statement, kind in CAMPAIGN_EDITS.values()}
    tested |= {
        "not_found",  # test_verify.py
        "policy_mismatch",
        "result_hash",
        "result_invalid",
        "result_seal",
        "report_state",
        "report_invalid",
        "history",  # test_history_audit.py
        "report_unverifiable",  # tests/schema/test_legacy_adoption.py
        "archive",  # test_archive.py
    }
    assert tested == {str(kind) for kind in Problem}
