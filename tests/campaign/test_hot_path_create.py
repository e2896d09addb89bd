"""create() inserts a campaign's items in batches, with the work ids of work_id_for."""

from __future__ import annotations

import pytest

from benchledger.db import Database
from benchledger.domain.campaign import work_id_for, work_ids_for
from benchledger.repositories.campaigns import work as repo
from benchledger.services.campaigns import CampaignService

from .helpers import T0, make_plan, snapshot

CID = "benchmark-campaign-" + "a" * 64


@pytest.mark.parametrize(
    ("locale", "key"),
    [
        ("de-DE", "case-0000"),
        ("ja-JP", "ケース/一"),
        ("pt-BR", 'quote"back\\slash'),
        ("fr-FR", "emoji-\U0001f600-tab\t"),
        ("zh-Hant-TW", "</script>&<>"),
    ],
)
def test_work_ids_for_is_work_id_for(locale: str, key: str) -> None:
    derive = work_ids_for(CID, "b" * 64, "c" * 64)
    assert derive(locale, key) == work_id_for(CID, "b" * 64, "c" * 64, locale, key)


def test_create_inserts_every_item_across_batches(
    ledger_db: Database, service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repo, "INSERT_BATCH", 7)  # 20 items: batches of 7, 7 and 6
    plan = make_plan(cases=10)
    cid = service.create(plan.policy, plan.suite, max_attempts=2)
    rows = snapshot(ledger_db)["benchmark_campaign_work"]
    expected = {
        work_id_for(cid, plan.policy.sha256, plan.suite.sha256, locale, case.key): (
            locale,
            case.key,
        )
        for locale in plan.policy.required_locales
        for case in plan.suite.cases
    }
    assert len(rows) == 20
    stored = {}
    for row in rows:
        (work_id, campaign, locale, key, status, attempts, budget, due, *_rest) = row
        stored[work_id] = (locale, key)
        assert (campaign, status, attempts, budget, due) == (cid, "pending", 0, 2, T0)
    assert stored == expected
    # And the campaign works: every item can be claimed once.
    claimed = {claim.work_id for claim in iter(lambda: service.claim(cid, "w-1"), None)}
    assert claimed == set(expected)
