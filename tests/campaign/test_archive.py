"""archive(): a finished campaign's items dropped, its report kept and still verified."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from benchledger import Worker
from benchledger.db import Database, head_revision
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_archive import (
    SUMMARY_SCHEMA,
    ArchiveOutcome,
    SummaryTally,
    archive_problem,
    archive_seal,
)
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.integrity import Problem
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import T0, complete_all, execute, make_plan

WORK = "benchmark_campaign_work"
ATTEMPTS = "benchmark_campaign_attempts"
CLAIMS = "benchmark_campaign_claims"
#: Three passed items of a locale (the kit's results score 0.8) said to be two.
PASSED_3_TO_2 = {"a": '"passed":3', "b": '"passed":2'}


def finished(service: CampaignService, **create: Any) -> str:
    """A campaign of 2 locales x 3 cases, every item succeeded, its report final."""
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite, **create)
    complete_all(service, cid)
    service.summarize(cid)
    return cid


def rows(db: Database, table: str, campaign_id: str) -> int:
    with db.engine.connect() as connection:
        return int(
            connection.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE campaign_id = :c"), {"c": campaign_id}
            ).scalar_one()
        )


def campaign_row(db: Database, campaign_id: str) -> Any:
    with db.engine.connect() as connection:
        return connection.execute(
            sa.text("SELECT * FROM benchmark_campaigns WHERE campaign_id = :c"), {"c": campaign_id}
        ).one()


def kinds(service: CampaignService, campaign_id: str) -> set[Problem]:
    return {problem.kind for problem in service.verify(campaign_id).problems}


# -- what it keeps and what it drops ----------------------------------------------------------


def test_archive_drops_the_items_and_keeps_the_verified_report(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    cid = finished(service, max_claims_per_minute=100)  # the claim log has rows too
    report = service.load_report(cid)
    assert (rows(ledger_db, WORK, cid), rows(ledger_db, ATTEMPTS, cid)) == (6, 6)
    assert rows(ledger_db, CLAIMS, cid) == 6
    other = service.create(make_plan(cases=2).policy, make_plan(cases=2).suite)
    complete_all(service, other)
    clock.advance(100)

    outcome = service.archive(cid)

    assert isinstance(outcome, ArchiveOutcome)
    assert (outcome.campaign_id, outcome.archived_at, outcome.items) == (cid, T0 + 100, 6)
    assert outcome.dropped == {ATTEMPTS: 6, CLAIMS: 6, WORK: 6}
    assert outcome.exported is None
    assert outcome.results_sha256 == report["results_sha256"]
    for table in (WORK, ATTEMPTS, CLAIMS):
        assert rows(ledger_db, table, cid) == 0
    # Another campaign's rows are untouched.
    assert (rows(ledger_db, WORK, other), rows(ledger_db, ATTEMPTS, other)) == (4, 4)
    row = campaign_row(ledger_db, cid)
    assert (row.archived_at, row.archived_items, row.archived_results_sha256) == (
        T0 + 100,
        6,
        report["results_sha256"],
    )
    assert row.archived_seal == archive_seal(
        cid, T0 + 100, 6, report["results_sha256"], row.archived_summary_json, outcome.report_sha256
    )
    # The archive ran the audit: it is the campaign's last one, and current.
    assert (row.verified_at, row.verified_ok, row.verified_problems, row.updated_at) == (
        T0 + 100,
        True,
        0,
        T0 + 100,
    )
    with ledger_db.engine.connect() as connection:
        kept = connection.execute(
            sa.text("SELECT report_sha256 FROM benchmark_campaign_reports WHERE campaign_id = :c"),
            {"c": cid},
        ).scalar_one()
    assert kept == outcome.report_sha256 == sha256_text(canonical_json(report))

    # The summary: what the report says per locale, with the succeeded count beside it.
    summary = dict(outcome.summary)
    assert summary["schema"] == SUMMARY_SCHEMA and summary["pass_score"] == 0.5
    assert json.loads(row.archived_summary_json) == summary
    for locale in ("de-DE", "fr-FR"):
        assert summary["locales"][locale] == {
            "items": 3,
            "succeeded": 3,
            "passed": 3,
            "pass_rate": 1.0,
            "mean_score": 0.8,
        }
        assert report["locales"][locale] == {
            "items": 3,
            "passed": 3,
            "pass_rate": 1.0,
            "mean_score": 0.8,
        }
    assert summary["overall"]["items"] == 6
    payload = outcome.as_payload()
    assert payload["dropped_rows"] == {ATTEMPTS: 6, CLAIMS: 6, WORK: 6}
    assert payload["summary"] == summary


def test_every_read_of_an_archived_campaign_behaves(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    cid = finished(service)
    report = service.load_report(cid)
    clock.advance(100)
    service.archive(cid)
    clock.advance(3600 * 24)  # long after: nothing is stalled, nothing is due

    status = service.status(cid)
    assert status.archived_at == T0 + 100
    assert (status.complete, status.blocked, status.next_due_at) == (True, False, None)
    assert dict(status.counts) == {**dom.empty_counts(), "succeeded": 6}
    assert (status.verified_ok, status.verified_current) == (True, True)
    assert status.report_finalization["status"] == "succeeded"
    assert status.as_payload()["archived_at"] == T0 + 100

    health = service.health(cid)
    assert (health.status, health.reasons, health.report_ready) == ("healthy", (), True)
    assert health.archived_at == T0 + 100 and health.as_payload()["archived_at"] == T0 + 100
    deep = service.health(cid, verify=True)
    assert deep.status == "healthy" and deep.integrity is not None and deep.integrity.ok

    (listed,) = [c for c in service.list().campaigns if c.campaign_id == cid]
    assert listed.archived_at == T0 + 100 and listed.as_payload()["archived_at"] == T0 + 100

    audit = service.verify(cid)
    # campaign row, policy, suite, report state, report: no item, no history left
    assert (audit.ok, audit.rows_checked) == (True, 5)
    assert service.load_report(cid) == report

    kept = service.load_report(cid, provisional=True)
    assert kept["provisional"] is False and kept["archived_at"] == T0 + 100
    assert kept["locales"]["de-DE"]["succeeded"] == 3 and kept["overall"]["items"] == 6

    # Nothing is due: workers find nothing, and say so without an error.
    assert service.claim(cid, "w-2") is None
    assert service.claim_report(cid, "w-2") is None
    assert service.report_finalization_required(cid) is False
    summary = Worker(service, cid, "w-2", lambda claim, beat: {}).run()
    assert summary.cases == 0
    with refused(ledger_db, dom.ARCHIVED):
        service.retry(cid)
    with refused(ledger_db, dom.FINISHED):
        service.cancel(cid)


def test_reads_of_the_dropped_items_refuse_with_archived(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    plan = make_plan()
    twin = service.create(
        attrs.evolve(plan.policy, valid_until=plan.policy.valid_until + 1), plan.suite
    )
    service.archive(cid)
    for read in (
        lambda: service.results(cid),
        lambda: list(service.iter_results(cid)),
        lambda: service.attempts(cid),
        lambda: service.compare(cid, twin),
        lambda: service.compare(twin, cid),
        lambda: service.summarize(cid),
        lambda: service.create(plan.policy, plan.suite),
        lambda: service.archive(cid),
    ):
        with refused(ledger_db, dom.ARCHIVED):
            read()


def test_a_campaign_past_its_validity_is_archived_all_the_same(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    """Retention is for old campaigns: the policy's deadline does not stop an archive.
    What it stops is unchanged by the archive: reading the report (``validity_expired``,
    as before), and health says so."""
    plan = make_plan(valid_until=T0 + 3600)
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)
    service.summarize(cid)
    clock.advance(7200)
    with refused(ledger_db, dom.VALIDITY_EXPIRED):
        service.load_report(cid)
    assert service.archive(cid).items == 6
    assert service.verify(cid).ok
    with refused(ledger_db, dom.VALIDITY_EXPIRED):
        service.load_report(cid)
    assert dom.VALIDITY_EXPIRED in service.health(cid).reasons


def test_delete_removes_an_archived_campaign(ledger_db: Database, service: CampaignService) -> None:
    cid = finished(service)
    service.archive(cid)
    outcome = service.delete(cid)
    assert outcome.rows["benchmark_campaigns"] == 1 and WORK not in outcome.rows
    with pytest.raises(CampaignBlocked) as missing:
        service.status(cid)
    assert missing.value.code == dom.NOT_FOUND


# -- refusals: the database unchanged -----------------------------------------------------------


def test_archive_is_refused_until_the_campaign_is_finished(
    ledger_db: Database, service: CampaignService
) -> None:
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite)
    with refused(ledger_db, dom.INCOMPLETE):
        service.archive(cid)
    claim = service.claim(cid, "w-1")
    assert claim is not None
    service.fail(claim, "flaky", retryable=False)
    complete_all(service, cid)  # every other item succeeded; one failed for good
    with refused(ledger_db, dom.INCOMPLETE):
        service.archive(cid)


def test_archive_is_refused_until_the_report_is_final(
    ledger_db: Database, service: CampaignService
) -> None:
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite)
    complete_all(service, cid)  # every item succeeded; no report yet
    with refused(ledger_db, dom.REPORT_MISSING):
        service.archive(cid)
    lease = service.claim_report(cid, "w-1")
    assert lease is not None
    with refused(ledger_db, dom.REPORT_MISSING):  # finalizing, not final
        service.archive(cid)


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        (  # a result edited behind the ledger's back
            "UPDATE benchmark_campaign_work SET result_json = replace(result_json, '0.8', '0.9')"
            " WHERE work_id = (SELECT min(work_id) FROM benchmark_campaign_work)",
            Problem.RESULT_HASH,
        ),
        (  # the kept report edited
            "UPDATE benchmark_campaign_reports SET report_json = replace(report_json, :a, :b)",
            Problem.REPORT_INVALID,
        ),
        (  # an attempt's history rewritten
            "UPDATE benchmark_campaign_attempts SET attempt = 7"
            " WHERE attempt_id = (SELECT min(attempt_id) FROM benchmark_campaign_attempts)",
            Problem.HISTORY,
        ),
    ],
)
def test_archive_is_refused_when_the_audit_finds_a_problem_now(
    ledger_db: Database, service: CampaignService, statement: str, kind: Problem
) -> None:
    cid = finished(service)
    assert service.verify(cid).ok  # an old, clean audit is not trusted: it runs again
    execute(ledger_db, statement, **PASSED_3_TO_2)
    with refused(ledger_db, dom.INTEGRITY_FAILED) as caught:
        service.archive(cid)
    assert "integrity audit" in caught.value.message
    assert kind in kinds(service, cid)


def test_archive_refuses_what_is_not_a_campaign(
    ledger_db: Database, service: CampaignService
) -> None:
    for campaign_id in ("benchmark-campaign-" + "0" * 64, "nonsense", None):
        with refused(ledger_db, dom.NOT_FOUND):
            service.archive(campaign_id)  # type: ignore[arg-type]
    cid = finished(service)
    with refused(ledger_db, dom.DEPENDENCY_INVALID):
        service.archive(cid, export=5)  # type: ignore[arg-type]
    with refused(ledger_db, dom.TIME_INVALID):
        service.archive(cid, now=-1)


# -- the export: every item before it is dropped ------------------------------------------------


def test_export_takes_every_item_with_its_result_before_the_rows_go(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    before = list(service.iter_results(cid))
    with ledger_db.engine.connect() as connection:
        stored = dict(
            connection.execute(
                sa.text("SELECT work_id, result_json FROM benchmark_campaign_work")
            ).all()
        )
    taken: list[dict[str, Any]] = []

    def export(items: Iterator[dict[str, Any]]) -> None:
        assert rows(ledger_db, WORK, cid) == 6  # nothing dropped while it runs
        taken.extend(items)

    outcome = service.archive(cid, export=export)
    assert outcome.exported == 6
    assert [record["work_id"] for record in taken] == [item.work_id for item in before]
    for record, item in zip(taken, before, strict=True):
        assert {key: record[key] for key in item.as_dict()} == item.as_dict()
        text = stored[record["work_id"]]
        assert canonical_json(record["result"]) == text
        assert record["result_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert rows(ledger_db, WORK, cid) == 0


def test_an_export_that_fails_or_stops_early_archives_nothing(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)

    def broken(items: Iterator[dict[str, Any]]) -> None:
        next(items)
        raise OSError("disk full")

    before = rows(ledger_db, WORK, cid)
    with pytest.raises(OSError, match="disk full"):
        service.archive(cid, export=broken)
    assert rows(ledger_db, WORK, cid) == before and campaign_row(ledger_db, cid).archived_at is None

    def two(items: Iterator[dict[str, Any]]) -> None:
        next(items)
        next(items)

    with refused(ledger_db, dom.EXPORT_INCOMPLETE) as caught:
        service.archive(cid, export=two)
    assert "after 2 of 6" in caught.value.message
    assert service.archive(cid, export=lambda items: sum(1 for _ in items)).exported == 6


def test_an_archive_that_loses_the_race_is_refused_and_drops_nothing_more(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    rival = CampaignService(ledger_db, clock=service.clock)
    won: list[ArchiveOutcome] = []

    def export(items: Iterator[dict[str, Any]]) -> None:
        next(items)  # this archive's read has begun; another one commits meanwhile
        won.append(rival.archive(cid))
        for _ in items:
            pass

    with pytest.raises(CampaignBlocked) as lost:
        service.archive(cid, export=export)
    assert lost.value.code == dom.ARCHIVED
    assert won[0].dropped[WORK] == 6
    assert service.verify(cid).ok


# -- verify after the archive: the kept report is still guarded ---------------------------------


def test_tampering_with_the_kept_report_is_caught(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    service.archive(cid)
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_reports SET report_json = replace(report_json, :a, :b)",
        **PASSED_3_TO_2,
    )
    assert kinds(service, cid) == {Problem.REPORT_INVALID}
    assert service.status(cid).verified_ok is False
    assert service.health(cid).status == "blocked"
    with refused(ledger_db, dom.REPORT_INVALID):
        service.load_report(cid)


def test_a_forged_report_with_its_own_digest_is_caught_by_the_seal(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    service.archive(cid)
    report = service.load_report(cid)
    forged = canonical_json({**report, "pass_score": 0.1})
    execute(
        ledger_db,
        "UPDATE benchmark_campaign_reports SET report_json = :t, report_sha256 = :s",
        t=forged,
        s=sha256_text(forged),
    )
    assert kinds(service, cid) == {Problem.ARCHIVE}
    with refused(ledger_db, dom.ARCHIVE_INVALID):
        service.load_report(cid)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE benchmark_campaigns SET archived_items = 5",
        "UPDATE benchmark_campaigns SET archived_at = archived_at + 1",
        "UPDATE benchmark_campaigns SET archived_summary_json = "
        "replace(archived_summary_json, :a, :b)",
        "UPDATE benchmark_campaigns SET archived_seal = NULL",
        # the recorded digest and the report's, rewritten together: the seal still differs
        "UPDATE benchmark_campaigns SET archived_results_sha256 = :z",
    ],
)
def test_edited_archive_facts_are_caught(
    ledger_db: Database, service: CampaignService, statement: str
) -> None:
    cid = finished(service)
    service.archive(cid)
    zeros = "0" * 64
    params = {"z": zeros} if ":z" in statement else PASSED_3_TO_2 if ":a" in statement else {}
    execute(ledger_db, statement, **params)
    if ":z" in statement:
        execute(ledger_db, "UPDATE benchmark_campaign_reports SET results_sha256 = :z", z=zeros)
    assert Problem.ARCHIVE in kinds(service, cid)


def test_rows_put_back_after_the_archive_are_caught(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    with ledger_db.engine.connect() as connection:
        item = connection.execute(sa.text(f"SELECT * FROM {WORK} LIMIT 1")).one()._asdict()
    service.archive(cid)
    columns = ", ".join(item)
    values = ", ".join(f":{name}" for name in item)
    execute(ledger_db, f"INSERT INTO {WORK} ({columns}) VALUES ({values})", **item)
    assert kinds(service, cid) == {Problem.ITEM_UNEXPECTED}
    with refused(ledger_db, dom.STATE_INVALID):
        service.load_report(cid)


def test_archive_facts_on_a_campaign_never_archived_are_an_edit(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    execute(ledger_db, "UPDATE benchmark_campaigns SET archived_items = 6")
    assert kinds(service, cid) == {Problem.ARCHIVE}


# -- the schema -------------------------------------------------------------------------------


def test_a_downgrade_below_the_archive_is_refused_while_a_campaign_is_archived(
    ledger_db: Database, service: CampaignService
) -> None:
    cid = finished(service)
    service.archive(cid)
    with pytest.raises(Exception, match="archived"):
        ledger_db.downgrade("0013")
    assert ledger_db.current_revision() == head_revision()  # all of it rolled back
    service.delete(cid)
    ledger_db.downgrade("0013")
    ledger_db.upgrade()
    assert ledger_db.current_revision() == head_revision()


# -- the pure parts ---------------------------------------------------------------------------


def test_the_summary_counts_as_the_provisional_report_does() -> None:
    tally = SummaryTally()
    tally.add("de-DE", True, (0.9, True))
    tally.add("de-DE", True, None)  # succeeded without a score: not passed, no score
    tally.add("fr-FR", False, None)
    tally.add("de-DE", True, (0.2, False))
    assert tally.count == 4
    assert tally.locales() == {
        "de-DE": {
            "items": 3,
            "succeeded": 3,
            "passed": 1,
            "pass_rate": round(1 / 3, 6),
            "mean_score": round(1.1 / 3, 6),
        },
        "fr-FR": {"items": 1, "succeeded": 0, "passed": 0, "pass_rate": None, "mean_score": None},
    }
    assert tally.overall()["items"] == 4 and tally.overall()["passed"] == 1


def test_archive_problem_names_what_is_off() -> None:
    from types import SimpleNamespace

    tally = SummaryTally()
    for locale in ("a", "b"):
        tally.add(locale, True, (1.0, True))
    text = canonical_json(tally.payload(0.5))
    digest, report_sha = "1" * 64, "2" * 64
    report = SimpleNamespace(results_sha256=digest, report_sha256=report_sha)
    good = SimpleNamespace(
        archived_at=10.0,
        archived_items=2,
        archived_results_sha256=digest,
        archived_summary_json=text,
        archived_seal=archive_seal("c", 10.0, 2, digest, text, report_sha),
    )

    def check(**changes: Any) -> str | None:
        row = SimpleNamespace(**{**vars(good), **changes})
        return archive_problem(
            row,
            campaign_id="c",
            work_count=2,
            locales=("a", "b"),
            case_count=1,
            report_row=changes.pop("report", report),
            limit=20.0,
        )

    assert check() is None
    assert check(archived_at=30.0) is not None  # later than now
    assert check(archived_items=3) is not None
    assert check(archived_results_sha256="x") is not None
    assert check(archived_summary_json="{") is not None
    assert check(archived_summary_json=text.replace('"items":2', '"items":"2"')) is not None
    assert check(archived_seal="0" * 64) is not None
    assert check(report=None) is not None
