"""verify(): the integrity audit streams every row, reports what it finds, and records it."""

from __future__ import annotations

import hashlib
import json

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from benchledger.cli import main
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain import campaign_audit, integrity
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.canonical import CanonicalJsonError, canonical_json, parse_canonical_json
from benchledger.domain.integrity import IntegrityProblem, IntegrityReport, Problem, ProblemLog
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns import reads as campaign_reads
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns import integrity as campaign_integrity
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import T0, complete_all, execute, make_plan, snapshot


def finished(service: CampaignService, plan: CampaignPlan) -> str:
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    service.summarize(cid)
    return cid


def test_a_clean_campaign_verifies_and_the_audit_is_recorded(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    fresh = service.verify(cid)
    # campaign row, policy, suite, 6 items, report state (no report yet)
    assert (fresh.ok, fresh.problems, fresh.rows_checked, fresh.verified_at) == (True, (), 10, T0)
    complete_all(service, cid)
    report = service.summarize(cid)
    clock.advance(30)
    before = snapshot(ledger_db)
    audit = service.verify(cid)
    assert audit.as_payload() == {
        "schema": integrity.INTEGRITY_SCHEMA,
        "campaign_id": cid,
        "ok": True,
        "reasons": [],
        "problems": [],
        "rows_checked": 11,
        "verified_at": T0 + 30,
    }
    after = snapshot(ledger_db)
    # The audit's only write: its outcome on the campaign row (not a change of progress).
    assert [table for table, rows in after.items() if rows != before[table]] == [
        "benchmark_campaigns"
    ]
    with ledger_db.engine.connect() as connection:
        recorded = connection.execute(
            sa.text(
                "SELECT updated_at, verified_at, verified_ok, verified_problems"
                " FROM benchmark_campaigns"
            )
        ).one()
    assert tuple(recorded) == (T0, T0 + 30, True, 0)
    status = service.status(cid)
    assert (status.verified_at, status.verified_ok, status.blocked) == (T0 + 30, True, False)
    assert status.as_payload()["verified_ok"] is True
    assert service.load_report(cid) == report


def test_results_are_sealed_when_they_are_recorded(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    complete_all(service, cid)
    with ledger_db.engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT work_id, attempts, max_attempts, result_sha256, result_seal"
                " FROM benchmark_campaign_work"
            )
        ).all()
    assert len(rows) == 6
    for row in rows:
        text = f"benchledger-result-seal-v1:{row[0]}:{row[1]}:{row[2]}:{row[3]}"
        assert row.result_seal == hashlib.sha256(text.encode()).hexdigest()
        assert row.result_seal == integrity.result_seal(row[0], row[1], row[2], row[3])


def test_unknown_campaigns_are_a_problem_not_an_exception(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    before = snapshot(ledger_db)
    for campaign_id in ("benchmark-campaign-" + "0" * 64, "nonsense", None, 5):
        report = service.verify(campaign_id)  # type: ignore[arg-type]
        assert [problem.kind for problem in report.problems] == [Problem.NOT_FOUND]
        assert report.reasons == (dom.NOT_FOUND,) and report.rows_checked == 0
    assert snapshot(ledger_db) == before  # nothing recorded for what does not exist


def test_verify_refuses_a_progress_that_is_not_callable(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    with refused(ledger_db, dom.DEPENDENCY_INVALID):
        service.verify(cid, progress=5)  # type: ignore[arg-type]
    with refused(ledger_db, dom.TIME_INVALID):
        service.verify(cid, now=-1)


def test_items_stream_in_batches_with_progress(
    ledger_db: Database, service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(cases=5)  # 10 items
    cid = finished(service, plan)
    monkeypatch.setattr(campaign_reads, "AUDIT_BATCH", 4)
    seen: list[tuple[int, int]] = []
    report = service.verify(cid, progress=lambda done, total: seen.append((done, total)))
    assert report.ok and report.rows_checked == 15
    assert seen == [(4, 10), (8, 10), (10, 10)]


def test_large_results_are_read_again_for_the_report_not_kept(
    ledger_db: Database, service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond the in-memory bound, the report builder gets the results streamed again."""
    cid = finished(service, make_plan(cases=4))
    monkeypatch.setattr(campaign_integrity, "RESULTS_IN_MEMORY_BYTES", 300)
    monkeypatch.setattr(campaign_reads, "AUDIT_BATCH", 3)
    passes: list[int] = []
    builder_verify = service.report_builder.verify

    def counting_verify(report, policy, suite, results):  # type: ignore[no-untyped-def]
        assert isinstance(results, campaign_integrity._StoredResults)
        assert len(results) == 8 and results[-1] == list(results)[7]
        passes.append(len(list(results)))
        builder_verify(report, policy, suite, results)

    monkeypatch.setattr(service.report_builder, "verify", counting_verify)
    assert service.verify(cid).ok and passes == [8]
    assert service.load_report(cid)["overall"]["items"] == 8
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_reports SET report_json = replace(report_json, :a, :b)",
        a='"items":8',
        b='"items":9',
    )
    assert [problem.kind for problem in service.verify(cid).problems] == [Problem.REPORT_INVALID]


def test_problems_are_counted_with_a_few_examples(
    ledger_db: Database, service: CampaignService, plan: CampaignPlan
) -> None:
    cid = finished(service, make_plan(cases=5))
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = 2")
    (problem,) = service.verify(cid).problems
    assert (problem.kind, problem.code, problem.count) == (
        Problem.RESULT_SEAL,
        dom.STATE_INVALID,
        10,
    )
    assert len(problem.examples) == integrity.MAX_EXAMPLES
    assert all(dom.WORK_ID.fullmatch(example) for example in problem.examples)


def test_a_clock_skewed_row_is_reported_as_clock_skew(
    ledger_db: Database, service: CampaignService, cid: str, clock: LedgerClock
) -> None:
    execute(ledger_db, "UPDATE benchmark_campaign_work SET updated_at = :t", t=T0 + 4)
    assert service.verify(cid).ok  # within the tolerated skew (5 s)
    execute(ledger_db, "UPDATE benchmark_campaign_work SET updated_at = :t", t=T0 + 60)
    report = service.verify(cid)
    assert report.reasons == (dom.REASON_CLOCK_SKEW,) and not report.blocking
    # Recorded as a sound audit: a clock to fix, not evidence against the rows.
    health = service.health(cid)
    assert (health.status, health.verified_ok) == ("healthy", True)
    health = service.health(cid, verify=True)
    assert (health.status, health.reasons) == ("degraded", (dom.REASON_CLOCK_SKEW,))
    clock.advance(60)
    assert service.verify(cid).ok and service.health(cid).status == "healthy"


def test_audit_of_a_campaign_without_a_stored_policy(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    execute(ledger_db, "DELETE FROM benchmark_campaign_policies")
    report = CampaignService(ledger_db).verify(cid)
    assert report.reasons == (dom.POLICY_UNREGISTERED,)
    # Row invariants are still checked without the policy.
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = 1")
    kinds = {problem.kind for problem in CampaignService(ledger_db).verify(cid).problems}
    assert kinds == {Problem.POLICY_UNREGISTERED, Problem.ITEM_STATE}


# -- the pure parts ---------------------------------------------------------------------------


def test_work_ids_match_the_domain_rule() -> None:
    plan = make_plan(cases=3, locales=("de-DE", "ja-JP"))
    make = integrity.work_id_maker(plan.campaign_id, plan.policy.sha256, plan.suite.sha256)
    for work in plan.work():
        assert make(work.target_locale, work.suite_case_key) == work.work_id
    odd = 'ключ "quoted" \\ \u00e9'
    assert make("de-DE", odd) == dom.work_id_for(
        plan.campaign_id, plan.policy.sha256, plan.suite.sha256, "de-DE", odd
    )


def test_a_large_plan_derives_each_batch_of_work_ids_as_a_small_one_keeps_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``MAX_KEPT_IDS`` items the audit derives each batch's work ids instead of
    keeping every one: the same ids, for every range of the plan's items."""
    plan = make_plan(cases=7, locales=("de-DE", "fr-FR", "ja-JP"))
    items = sorted((work.target_locale, work.suite_case_key) for work in plan.work())
    ids = {(w.target_locale, w.suite_case_key): w.work_id for w in plan.work()}

    def item_plan() -> campaign_audit.ItemPlan:
        return campaign_audit.ItemPlan.build(
            plan.campaign_id,
            plan.policy.sha256,
            plan.suite.sha256,
            plan.policy.required_locales,
            [case.key for case in plan.suite.cases],
            default_shape=True,
        )

    kept, derived = item_plan(), item_plan()
    for first in range(len(items)):
        for last in range(first, len(items)):
            span = items[first : last + 1]
            expected = "".join(ids[(locale, key)] for locale, key in span)
            pair = (items[first], items[last])  # (locale, case key) each
            monkeypatch.setattr(campaign_audit, "MAX_KEPT_IDS", len(items))
            assert kept.contiguous_ids(*pair, len(span)) == expected
            monkeypatch.setattr(campaign_audit, "MAX_KEPT_IDS", 0)
            assert derived.contiguous_ids(*pair, len(span)) == expected
    assert kept.ids.text is not None and derived.ids.text is None  # derived: nothing kept


def test_results_digest_matches_the_domain_rule() -> None:
    digests = [hashlib.sha256(str(index).encode()).hexdigest() for index in range(5)]
    running = integrity.ResultsDigest()
    assert running.hexdigest() == dom.results_sha256([])
    for digest in digests:
        running.add(digest)
    assert running.hexdigest() == dom.results_sha256(digests)
    running.add("not a digest")
    assert running.hexdigest() is None


@pytest.mark.parametrize(
    "value",
    [{"a": [1, 2.5, None, True], "b": "é\u2028"}, [], {"deep": [[[[]]]]}, "text", 0],
)
def test_stored_json_parses_like_the_canonical_parser(value: object) -> None:
    text = canonical_json(value)
    assert integrity.parse_stored_json(text) == parse_canonical_json(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"b":1,"a":2}',
        '{"a": 1}',
        "[1e400]",
        "NaN",
        '"\\ud800"',
        "[" * 66 + "]" * 66,  # nested deeper than 64 levels
        "1" * 5000,
        "not json",
        "",
    ],
)
def test_stored_json_refuses_what_the_canonical_parser_refuses(text: str) -> None:
    with pytest.raises(CanonicalJsonError):
        parse_canonical_json(text)
    with pytest.raises(CanonicalJsonError):
        integrity.parse_stored_json(text)


def test_value_objects() -> None:
    log = ProblemLog()
    assert not log and log.problems() == ()
    for index in range(7):
        log.add(Problem.ITEM_STATE, f"w-{index}")
    log.add(Problem.ITEM_MISSING, "campaign", 3)
    assert Problem.ITEM_STATE in log and Problem.RESULT_SEAL not in log
    missing, state = log.problems()  # in the order of Problem
    assert (missing.kind, missing.count, missing.examples) == (
        Problem.ITEM_MISSING,
        3,
        ("campaign",),
    )
    assert (state.count, len(state.examples)) == (7, integrity.MAX_EXAMPLES)
    report = IntegrityReport("c", log.problems(), 12, T0)
    assert not report.ok and report.problem_count == 10 and report.reasons == (dom.STATE_INVALID,)
    assert json.loads(json.dumps(report.as_payload())) == report.as_payload()
    with pytest.raises(ValueError):
        IntegrityProblem(Problem.ITEM_STATE, 1, tuple("abcdef"))
    with pytest.raises(ValueError):
        IntegrityProblem(Problem.ITEM_STATE, 0, ())
    with pytest.raises(TypeError):
        IntegrityReport("c", ("not a problem",), 0, T0)  # type: ignore[arg-type]
    assert set(integrity.PROBLEM_CODES) == set(Problem)


def test_status_refuses_counts_that_do_not_add_up(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    execute(
        ledger_db,
        "INSERT INTO benchmark_campaign_work (work_id, campaign_id, target_locale,"
        " suite_case_key, status, attempts, max_attempts, next_attempt_at, created_at,"
        " updated_at) VALUES ('x', :c, 'de-DE', 'case-0099', 'pending', 0, 3, 0, 0, 0)",
        c=cid,
    )
    with pytest.raises(CampaignBlocked) as caught:
        CampaignService(ledger_db).status(cid)
    assert caught.value.code == dom.STATE_INVALID


# -- benchledger campaign verify ----------------------------------------------------------------


def invoke_cli(*args: str, url: str) -> Result:
    """``benchledger --url URL ARGS`` in this process."""
    return CliRunner().invoke(main, ["--url", url, *args], catch_exceptions=False)


def test_the_verify_command(ledger_db: Database, service: CampaignService) -> None:
    plan = make_plan(cases=4)
    cid = finished(service, plan)
    short = cid.removeprefix(dom.CAMPAIGN_PREFIX)[:8]
    result = invoke_cli("campaign", "verify", short, "--progress", url=ledger_db.url)
    assert result.exit_code == 0, result.output
    assert f"integrity of {cid}: ok" in result.stdout and "rows checked: 13" in result.stdout
    payload = json.loads(
        invoke_cli("campaign", "verify", short, "--json", url=ledger_db.url).stdout
    )
    assert (payload["ok"], payload["rows_checked"], payload["problems"]) == (True, 13, [])
    status = json.loads(invoke_cli("campaign", "status", cid, "--json", url=ledger_db.url).stdout)
    assert status["verified_ok"] is True
    assert ": ok" in invoke_cli("campaign", "status", cid, url=ledger_db.url).stdout
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = 2")
    result = invoke_cli("campaign", "verify", short, "--json", url=ledger_db.url)
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["ok"] is False and payload["reasons"] == [dom.STATE_INVALID]
    assert payload["problems"][0]["kind"] == "result_seal" and payload["problems"][0]["count"] == 8
    assert result.stderr.startswith(f"error: {dom.STATE_INVALID}: the integrity audit found 8")
    text = invoke_cli("campaign", "verify", short, url=ledger_db.url)
    assert text.exit_code == 1 and "result_seal: 8 row(s)" in text.stdout
    health = json.loads(invoke_cli("campaign", "health", cid, "--json", url=ledger_db.url).stdout)
    assert health["status"] == "blocked" and health["verified_ok"] is False
    text = invoke_cli("campaign", "health", cid, url=ledger_db.url).stdout
    assert "integrity_failed: the last integrity audit found a problem" in text
    assert "problems found" in text
    missing = invoke_cli("campaign", "verify", "ffffffff", url=ledger_db.url)
    assert missing.exit_code == 1 and "Traceback" not in missing.output


def test_a_report_rebuilt_and_matched_is_not_rebuilt_again_for_the_same_content(
    ledger_db: Database, service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per process, by content: the same report, results digest, policy and suite."""
    cid = finished(service, make_plan(cases=2))
    rebuilt: list[int] = []
    builder_verify = service.report_builder.verify

    def counting_verify(report, policy, suite, results):  # type: ignore[no-untyped-def]
        rebuilt.append(len(results))
        builder_verify(report, policy, suite, results)

    monkeypatch.setattr(service.report_builder, "verify", counting_verify)
    assert service.verify(cid).ok and service.verify(cid).ok
    assert service.load_report(cid)["overall"]["items"] == 4
    assert rebuilt == [4]
    # Every result is still checked against its digest, and the digests against the report.
    execute(ledger_db, "UPDATE benchmark_campaign_work SET attempts = 2")
    assert [problem.kind for problem in service.verify(cid).problems] == [Problem.RESULT_SEAL]
    with ledger_db.engine.connect() as connection:
        text = connection.execute(
            sa.text("SELECT report_json FROM benchmark_campaign_reports")
        ).scalar_one()
    forged = text.replace('"passed":4', '"passed":3')
    assert forged != text
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_reports SET report_json = :j, report_sha256 = :h",
        j=forged,
        h=hashlib.sha256(forged.encode()).hexdigest(),
    )
    kinds = [problem.kind for problem in service.verify(cid).problems]
    assert Problem.REPORT_INVALID in kinds and rebuilt == [4, 4]
