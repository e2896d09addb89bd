"""The campaign page says whether the last integrity audit is still current."""

from __future__ import annotations

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock

from .helpers import client_for, make_campaign, result_for


def test_the_page_says_how_many_items_changed_since_the_audit(
    ledger_db: Database, ledger_clock: LedgerClock
) -> None:
    campaigns = CampaignService(ledger_db, clock=ledger_clock)
    cid = make_campaign(campaigns, cases=2)
    with client_for(ledger_db, ledger_clock) as client:
        assert campaigns.verify(cid).ok
        ledger_clock.advance(60)  # past the dashboard's health refresh
        assert "Nothing changed since." in client.get(f"/campaigns/{cid}").text
        claim = campaigns.claim(cid, "w-1")
        assert claim is not None
        campaigns.complete(claim, result_for(claim))
        ledger_clock.advance(60)
        health = client.get(f"/api/campaigns/{cid}/health").json()
        assert (health["verified_current"], health["changes_since_verified"]) == (False, 1)
        status = client.get(f"/api/campaigns/{cid}/status").json()
        assert (status["verified_current"], status["changes_since_verified"]) == (False, 1)
        page = client.get(f"/campaigns/{cid}").text
        assert "Not verified since 1 items changed" in page
        assert "Nothing changed since." not in page
