"""An archived campaign on the dashboard and in /metrics: shown as archived, its report served,
its dropped items refused with their code, nothing crashes."""

from __future__ import annotations

import pytest

from benchledger.db import Database
from benchledger.domain.campaign_codes import ARCHIVED
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.testing.clock import LedgerClock

from .helpers import client_for, finish, make_campaign, result_for
from .test_metrics import scrape, the_campaign

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`")


@pytest.fixture
def archived(ledger_db: Database, ledger_clock: LedgerClock) -> str:
    campaigns = CampaignService(ledger_db, clock=ledger_clock)
    cid = make_campaign(campaigns)
    campaigns.rename(cid, "archived one")
    finish(campaigns, cid)
    ledger_clock.advance(60)
    campaigns.archive(cid)
    return cid


def test_the_pages_say_archived_and_serve_the_report(
    ledger_db: Database, ledger_clock: LedgerClock, archived: str
) -> None:
    short = short_id(archived)
    with client_for(ledger_db, ledger_clock) as client:
        listing = client.get("/campaigns")
        page = client.get(f"/campaigns/{short}")
        status = client.get(f"/api/campaigns/{short}/status")
        report = client.get(f"/api/campaigns/{short}/report")
        results = client.get(f"/campaigns/{short}/results")
        api_results = client.get(f"/api/campaigns/{short}/results")
        summary = client.get(f"/api/campaigns/{short}/results/summary")
        download = client.get(f"/api/campaigns/{short}/results.csv")
    assert listing.status_code == 200 and 'class="archived"' in listing.text
    assert page.status_code == 200 and 'id="archived"' in page.text
    assert 'id="results-link"' not in page.text  # nothing left to page through
    assert status.json()["archived_at"] is not None
    assert report.status_code == 200 and report.json()["overall"]["items"] == 6
    assert results.status_code == 409 and ARCHIVED in results.text
    for response in (api_results, summary, download):
        assert response.status_code == 409 and response.json()["error"] == ARCHIVED


def test_metrics_count_the_archived_campaign(
    ledger_db: Database, ledger_clock: LedgerClock, archived: str
) -> None:
    with client_for(ledger_db, ledger_clock) as client:
        got = scrape(client)
    mine = the_campaign(archived, "archived one")
    assert got.value("benchledger_campaign_archived", **mine) == 1
    assert got.value("benchledger_campaign_complete", **mine) == 1
    assert got.value("benchledger_campaign_items", **mine, status="succeeded") == 6
    assert got.value("benchledger_campaign_verify_ok", **mine) == 1
    assert not got.of("benchledger_campaign_status_error")


def test_attempt_counters_start_over_for_the_archived_campaign_only(
    ledger_db: Database, ledger_clock: LedgerClock
) -> None:
    """Archiving deletes history rows (SQLite may hand their ids out again): the scrape's
    running totals start over, so no later attempt of another campaign goes uncounted."""
    campaigns = CampaignService(ledger_db, clock=ledger_clock)
    other = make_campaign(campaigns, prefix="other", cases=6)  # 12 items
    first = campaigns.claim(other, "w-1")
    assert first is not None
    campaigns.complete(first, result_for(first))
    cid = make_campaign(campaigns)
    finish(campaigns, cid)  # the newest history rows are the archived campaign's
    succeeded = {"outcome": "succeeded"}
    attempts = "benchledger_campaign_attempts_total"
    with client_for(ledger_db, ledger_clock) as client:
        scrape(client)
        ledger_clock.advance(120)  # every id seen so far is settled
        before = scrape(client)
        campaigns.archive(cid)
        finish(campaigns, other)  # 11 more attempts, from the ids the archive freed on
        after = scrape(client)
    assert before.value(attempts, **the_campaign(cid), **succeeded) == 6
    assert before.value(attempts, **the_campaign(other), **succeeded) == 1
    assert after.value(attempts, **the_campaign(cid), **succeeded) == 0
    assert after.value(attempts, **the_campaign(other), **succeeded) == 12
    # Completions are the items that succeeded (the status): the archive keeps that count.
    completions = "benchledger_campaign_completions_total"
    assert after.value(completions, **the_campaign(cid)) == 6
