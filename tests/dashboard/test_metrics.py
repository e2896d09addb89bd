"""``GET /metrics``: the ledger in Prometheus' text format, on each backend.

Every scrape is parsed with prometheus_client's own parser; the values are the
ones the known state below must give, computed by hand, not read back from the
services.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from benchledger.db import Database
from benchledger.examples import study as ex
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns import metrics as campaign_metrics
from benchledger.services.campaigns.actions import short_id
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.metrics import WorkerMetrics

from .helpers import client_for, finish, make_campaign, make_study, result_for

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`")

GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "examples" / "grafana-dashboard.json"
CANDIDATE = "test-provider / test-model @ 1.0"
DIMENSIONS = ("attempt_slots", "admitted_wall_seconds", "retained_bytes", "peak_staging_bytes")

#: Every family /metrics writes (counters by their family name, without ``_total``).
FAMILIES = {
    "benchledger_campaign_work_items",
    "benchledger_campaign_items",
    "benchledger_campaign_items_throttled",
    "benchledger_campaign_waiting_on_group",
    "benchledger_campaign_completions",
    "benchledger_campaign_failures",
    "benchledger_campaign_retries_scheduled",
    "benchledger_campaign_lease_losses",
    "benchledger_campaign_attempts",
    "benchledger_campaign_leases_expired",
    "benchledger_campaign_item_errors",
    "benchledger_campaign_report_state",
    "benchledger_campaign_complete",
    "benchledger_campaign_blocked",
    "benchledger_campaign_cancelled",
    "benchledger_campaign_archived",
    "benchledger_campaign_created_timestamp_seconds",
    "benchledger_campaign_last_activity_timestamp_seconds",
    "benchledger_campaign_next_due_timestamp_seconds",
    "benchledger_campaign_verify_ok",
    "benchledger_campaign_verified_timestamp_seconds",
    "benchledger_campaign_verify_age_seconds",
    "benchledger_campaign_verify_current",
    "benchledger_campaign_changes_since_verify",
    "benchledger_campaign_status_error",
    "benchledger_study_state",
    "benchledger_study_budget_limit",
    "benchledger_study_budget_used",
    "benchledger_study_budget_reserved",
    "benchledger_study_budget_remaining",
    "benchledger_metrics_read_seconds",
    "benchledger_limit_group_cap",
    "benchledger_limit_group_live_leases",
    "benchledger_limit_group_claims_last_minute",
    "benchledger_limit_group_cost_last_minute",
}


class Scrape:
    """One parsed scrape: its families and every sample by (name, labels)."""

    def __init__(self, text: str) -> None:
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in self.families.values():
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, metric: str, /, **labels: str) -> float | None:
        return self.samples.get((metric, frozenset(labels.items())))

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}

    def of(self, metric: str, /, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
        """The samples of ``metric`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return {
            found: value
            for (sample, found), value in self.samples.items()
            if sample == metric and wanted <= found
        }


def scrape(client: Any, **headers: str) -> Scrape:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return Scrape(response.text)


def the_campaign(cid: str, name: str = "") -> dict[str, str]:
    return {"campaign": short_id(cid), "name": name, "candidate": CANDIDATE}


@pytest.fixture
def campaigns(ledger_db: Database, ledger_clock: LedgerClock) -> CampaignService:
    return CampaignService(ledger_db, clock=ledger_clock)


def known_state(campaigns: CampaignService, clock: LedgerClock) -> str:
    """Six items: 1 succeeded, 1 retrying, 1 failed for good, 1 live lease, 1 lease expired
    (not taken back), 1 pending; audited at the start, 3 outcomes since."""
    cid = make_campaign(campaigns, cases=3)
    campaigns.rename(cid, "nightly")
    assert campaigns.verify(cid).ok
    clock.advance(10)
    done = campaigns.claim(cid, "worker-a")
    assert done is not None
    campaigns.complete(done, result_for(done))
    clock.advance(30)
    retry = campaigns.claim(cid, "worker-b")
    assert retry is not None
    campaigns.fail(retry, "test.flaky", retryable=True, delay_seconds=120)
    final = campaigns.claim(cid, "worker-c")
    assert final is not None
    campaigns.fail(final, "test.broken", retryable=False)
    assert campaigns.claim(cid, "worker-d", lease_seconds=300) is not None
    clock.advance(5)
    assert campaigns.claim(cid, "worker-e", lease_seconds=10) is not None
    clock.advance(60)  # worker-e's lease ran out 50 s ago; nobody took it back
    return cid


def test_metrics_carry_every_series_with_the_known_states_values(
    ledger_db: Database, ledger_clock: LedgerClock, campaigns: CampaignService
) -> None:
    start = ledger_clock.peek()
    cid = known_state(campaigns, ledger_clock)
    ledger_clock.advance(1)
    done = make_campaign(campaigns, cases=1, prefix="done")
    finish(campaigns, done)
    study_id, _run = make_study(StudyService(ledger_db, clock=ledger_clock), name="sweep")
    with client_for(ledger_db, ledger_clock) as client:
        got = scrape(client)
    assert set(got.families) == FAMILIES
    mine = the_campaign(cid, "nightly")
    counts = {"pending": 1, "leased": 2, "retry_wait": 1, "succeeded": 1, "failed": 1}
    for status, count in counts.items():
        assert got.value("benchledger_campaign_items", **mine, status=status) == count
    assert got.value("benchledger_campaign_work_items", **mine) == 6
    assert got.value("benchledger_campaign_completions_total", **mine) == 1
    assert got.value("benchledger_campaign_failures_total", **mine) == 2
    assert got.value("benchledger_campaign_retries_scheduled_total", **mine) == 1
    assert got.value("benchledger_campaign_lease_losses_total", **mine) == 0
    attempts = {"succeeded": 1, "failed": 1, "retry_scheduled": 1, "lease_expired": 0}
    for outcome, count in attempts.items():
        assert got.value("benchledger_campaign_attempts_total", **mine, outcome=outcome) == count
    assert got.value("benchledger_campaign_leases_expired", **mine) == 1
    assert got.of("benchledger_campaign_item_errors", **mine) == {
        frozenset({**mine, "code": "test.flaky"}.items()): 1,
        frozenset({**mine, "code": "test.broken"}.items()): 1,
    }
    assert got.of("benchledger_campaign_report_state", **mine) == {
        frozenset({**mine, "state": state}.items()): float(state == "pending")
        for state in ("pending", "leased", "retry_wait", "succeeded", "failed")
    }
    assert got.value("benchledger_campaign_complete", **mine) == 0
    assert got.value("benchledger_campaign_blocked", **mine) == 1  # one item failed for good
    assert got.value("benchledger_campaign_cancelled", **mine) == 0
    assert got.value("benchledger_campaign_created_timestamp_seconds", **mine) == start
    # the pending item has been due since the campaign was created
    assert got.value("benchledger_campaign_next_due_timestamp_seconds", **mine) == start
    activity = got.value("benchledger_campaign_last_activity_timestamp_seconds", **mine)
    assert activity is not None and start + 40 <= activity <= start + 105
    # audited at the start; 106 s ago, three item outcomes since
    assert got.value("benchledger_campaign_verify_ok", **mine) == 1
    assert got.value("benchledger_campaign_verified_timestamp_seconds", **mine) == start
    assert got.value("benchledger_campaign_verify_age_seconds", **mine) == 106
    assert got.value("benchledger_campaign_verify_current", **mine) == 0
    assert got.value("benchledger_campaign_changes_since_verify", **mine) == 3

    finished = the_campaign(done)
    assert got.value("benchledger_campaign_items", **finished, status="succeeded") == 2
    assert got.value("benchledger_campaign_report_state", **finished, state="succeeded") == 1
    assert got.value("benchledger_campaign_complete", **finished) == 1
    assert got.value("benchledger_campaign_blocked", **finished) == 0
    assert got.value("benchledger_campaign_completions_total", **finished) == 2
    # nothing will be due again, and it was never audited: those series are absent
    for absent in ("next_due_timestamp_seconds", "verify_ok", "verify_age_seconds"):
        assert not got.of(f"benchledger_campaign_{absent}", **finished)
    assert not got.of("benchledger_campaign_status_error")

    study = {"study": study_id, "name": "sweep"}
    assert got.value("benchledger_study_state", **study, state="open") == 1
    assert got.value("benchledger_study_state", **study, state="draft") == 0
    limits, envelope = ex.LIMITS.to_document(), ex.ENVELOPE.to_document()
    for dimension in DIMENSIONS:  # one run admitted, not settled: its envelope is reserved
        at = {**study, "dimension": dimension}
        assert got.value("benchledger_study_budget_limit", **at) == limits[dimension]
        assert got.value("benchledger_study_budget_used", **at) == envelope[dimension]
        assert got.value("benchledger_study_budget_reserved", **at) == envelope[dimension]
        remaining = limits[dimension] - envelope[dimension]
        assert got.value("benchledger_study_budget_remaining", **at) == remaining
    assert (got.value("benchledger_metrics_read_seconds") or -1) >= 0


def test_a_lost_lease_taken_back_and_a_cancel_move_their_series(
    ledger_db: Database, ledger_clock: LedgerClock, campaigns: CampaignService
) -> None:
    cid = known_state(campaigns, ledger_clock)
    mine = the_campaign(cid, "nightly")
    with client_for(ledger_db, ledger_clock) as client:
        before = scrape(client)
        assert campaigns.claim(cid, "worker-f") is not None  # sweeps worker-e's lease
        campaigns.cancel(cid)
        after = scrape(client)
    assert before.value("benchledger_campaign_leases_expired", **mine) == 1
    assert after.value("benchledger_campaign_leases_expired", **mine) == 0
    assert before.value("benchledger_campaign_lease_losses_total", **mine) == 0
    assert after.value("benchledger_campaign_lease_losses_total", **mine) == 1
    assert after.value("benchledger_campaign_attempts_total", **mine, outcome="lease_expired") == 1
    assert after.value("benchledger_campaign_cancelled", **mine) == 1
    # counters the sweep did not touch keep their values
    for name in ("completions", "failures", "retries_scheduled"):
        sample = f"benchledger_campaign_{name}_total"
        assert after.value(sample, **mine) == before.value(sample, **mine)


def test_the_history_counters_stay_exact_as_they_settle_and_campaigns_go(
    ledger_db: Database,
    ledger_clock: LedgerClock,
    campaigns: CampaignService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Running totals: rows settled for good, rows counted afresh, and a deleted campaign
    (whose history ids SQLite hands out again) starting the count over."""
    monkeypatch.setattr(campaign_metrics, "COLD_SLACK_IDS", 0)  # settle at the first scrape
    first = make_campaign(campaigns, cases=3, prefix="first")
    second = make_campaign(campaigns, cases=2, prefix="second")

    def outcome(cid: str, ok: bool) -> None:
        claim = campaigns.claim(cid, "worker")
        assert claim is not None
        if ok:
            campaigns.complete(claim, result_for(claim))
        else:
            campaigns.fail(claim, "test.flaky", retryable=True, delay_seconds=3600)

    def totals(got: Scrape, cid: str) -> tuple[float | None, float | None]:
        labels = the_campaign(cid)
        return (
            got.value("benchledger_campaign_attempts_total", **labels, outcome="succeeded"),
            got.value("benchledger_campaign_attempts_total", **labels, outcome="retry_scheduled"),
        )

    with client_for(ledger_db, ledger_clock) as client:
        outcome(first, True)
        outcome(second, False)
        assert totals(scrape(client), first) == (1, 0)  # settled at once
        outcome(first, False)
        got = scrape(client)  # counted afresh: the mark waits SETTLE_SECONDS
        assert (totals(got, first), totals(got, second)) == ((1, 1), (0, 1))
        ledger_clock.advance(campaign_metrics.SETTLE_SECONDS + 1)
        assert totals(scrape(client), first) == (1, 1)  # settled up to the last scrape's top
        for _ in range(2):
            outcome(second, True)
        for _ in range(2):  # twice: the second settles the newest rows
            ledger_clock.advance(campaign_metrics.SETTLE_SECONDS + 1)
            got = scrape(client)
            assert (totals(got, first), totals(got, second)) == ((1, 1), (2, 1))
        # The newest history rows go with their campaign; SQLite hands their ids out again.
        campaigns.delete(second, force=True)
        for _ in range(2):
            outcome(first, True)
        got = scrape(client)
    assert totals(got, first) == (3, 1)
    assert not got.of("benchledger_campaign_work_items", campaign=short_id(second))


def corrupt(db: Database, campaign_id: str) -> None:
    """The campaign row's work count no longer matches its policy: status refuses it."""
    with db.engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE benchmark_campaigns SET work_count = 7 WHERE campaign_id = :c"),
            {"c": campaign_id},
        )


def test_a_campaign_whose_status_is_refused_says_why(
    ledger_db: Database, ledger_clock: LedgerClock, campaigns: CampaignService
) -> None:
    cid = make_campaign(campaigns, cases=2)
    corrupt(ledger_db, cid)
    with client_for(ledger_db, ledger_clock) as client:
        got = scrape(client)
    mine = the_campaign(cid)
    assert got.of("benchledger_campaign_status_error", **mine) == {
        frozenset({**mine, "code": "benchmark.campaign.state_invalid"}.items()): 1
    }
    assert got.value("benchledger_campaign_work_items", **mine) == 7
    assert not got.of("benchledger_campaign_items", **mine)


def test_the_token_gate_applies_to_metrics(
    ledger_db: Database, ledger_clock: LedgerClock, campaigns: CampaignService
) -> None:
    make_campaign(campaigns, cases=1)
    with client_for(ledger_db, ledger_clock, token="s3cret-token") as client:
        refused = client.get("/metrics")
        assert refused.status_code == 401
        assert refused.json()["error"] == "ledger.dashboard.unauthorized"
        wrong = client.get("/metrics", headers={"Authorization": "Bearer not-it"})
        assert wrong.status_code == 401
        got = scrape(client, Authorization="Bearer s3cret-token")  # as Prometheus sends it
    assert got.of("benchledger_campaign_work_items")


def _strings(value: Any, key: str | None = None) -> list[tuple[str | None, str]]:
    """Every string of the dashboard with its key (queries, variables, titles), however
    deeply nested."""
    if isinstance(value, dict):
        return [found for name, item in value.items() for found in _strings(item, name)]
    if isinstance(value, list):
        return [found for item in value for found in _strings(item, key)]
    return [(key, value)] if isinstance(value, str) else []


def test_the_grafana_dashboard_queries_only_metrics_a_scrape_exports(
    ledger_db: Database, ledger_clock: LedgerClock, campaigns: CampaignService
) -> None:
    strings = _strings(json.loads(GRAFANA.read_text(encoding="utf-8")))
    assert len([text for key, text in strings if key == "expr"]) >= 8
    cid = known_state(campaigns, ledger_clock)
    assert campaigns.verify(cid).ok is True
    refused = make_campaign(campaigns, cases=1, prefix="refused")
    corrupt(ledger_db, refused)
    make_study(StudyService(ledger_db, clock=ledger_clock))
    with client_for(ledger_db, ledger_clock) as client:
        exported = scrape(client).names()  # samples, not only families: every series has data
    worker = WorkerMetrics()  # a worker's own exposition, as its port serves it
    worker.finished(0.2, None)
    exported |= Scrape(worker.exposition().decode()).names()
    # every metric named anywhere: panel queries, the campaign variable's query, text
    used = {name for _, text in strings for name in re.findall(r"\bbenchledger_\w+", text)}
    assert len(used) >= 20
    assert used <= exported, sorted(used - exported)


def test_throttling_and_limit_groups_have_their_series(
    ledger_db: Database, ledger_clock: LedgerClock, campaigns: CampaignService
) -> None:
    cid = make_campaign(campaigns, cases=2, prefix="throttled")
    group = campaigns.status(cid).limit_group
    assert group is not None
    campaigns.set_group_limits(group, max_concurrent_leases=1, max_claims_per_minute=50)
    claim = campaigns.claim(cid, "w1")
    assert claim is not None
    campaigns.throttle(claim, "api.http_429", retry_after=30)
    held = campaigns.claim(cid, "w1")
    assert held is not None
    with client_for(ledger_db, ledger_clock) as client:
        got = scrape(client)
    assert set(got.families) == FAMILIES
    mine = the_campaign(cid)
    assert got.value("benchledger_campaign_items_throttled", **mine) == 1
    assert got.value("benchledger_campaign_waiting_on_group", **mine) == 1  # 1 of 1 live
    assert got.value("benchledger_campaign_attempts_total", **mine, outcome="throttled") == 1
    assert got.value("benchledger_limit_group_cap", group=group, cap="live_leases") == 1
    assert got.value("benchledger_limit_group_cap", group=group, cap="claims_per_minute") == 50
    assert got.value("benchledger_limit_group_cap", group=group, cap="cost_per_minute") is None
    assert got.value("benchledger_limit_group_live_leases", group=group) == 1
    assert got.value("benchledger_limit_group_claims_last_minute", group=group) == 2
    assert got.value("benchledger_limit_group_cost_last_minute", group=group) == 0
