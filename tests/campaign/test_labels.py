"""Campaigns that say what they measure: the candidate, a name, listing filters; and one
spelling per error code (health reasons name a code once, retry takes its suffix)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_labels import CampaignFilter, Candidate, campaign_name
from benchledger.errors import CampaignBlocked
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import CampaignActions
from benchledger.testing.clock import LedgerClock
from helpers import refused

from .helpers import make_plan


def test_a_campaign_carries_its_candidate_and_an_optional_name(
    service: CampaignService,
) -> None:
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite, name="baseline run")
    status = service.status(cid)
    policy = plan.policy
    assert status.name == "baseline run"
    assert status.candidate == Candidate(
        policy.candidate_provider_id, policy.candidate_model_id, policy.candidate_model_version
    )
    assert status.as_payload()["candidate"]["model_id"] == policy.candidate_model_id
    (summary,) = service.list().campaigns
    assert (summary.name, summary.candidate) == ("baseline run", status.candidate)


def test_the_name_is_metadata_not_identity(ledger_db: Database, service: CampaignService) -> None:
    plan = make_plan()
    cid = service.create(plan.policy, plan.suite)
    assert service.create(plan.policy, plan.suite, name="first") == cid
    assert service.status(cid).name == "first"
    assert service.create(plan.policy, plan.suite) == cid  # no name given: kept
    assert service.status(cid).name == "first"
    service.rename(cid, "second")
    assert service.status(cid).name == "second"
    service.rename(cid, None)
    assert service.status(cid).name is None
    with refused(ledger_db, dom.NOT_FOUND):
        service.rename("benchmark-campaign-" + "0" * 64, "x")


@pytest.mark.parametrize("bad", ["", "   ", "a" * 201, "tab\there", "nul\x00", 7, b"x", "e\u0301"])
def test_a_bad_name_is_refused_and_changes_nothing(
    ledger_db: Database, service: CampaignService, cid: str, bad: object
) -> None:
    with refused(ledger_db, dom.NAME_INVALID):
        service.rename(cid, bad)  # type: ignore[arg-type]
    plan = make_plan(cases=2)
    with refused(ledger_db, dom.NAME_INVALID):
        service.create(plan.policy, plan.suite, name=bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=250))
def test_campaign_name_accepts_exactly_plain_short_text(value: str) -> None:
    import unicodedata

    plain = (
        1 <= len(value) <= 200
        and value.strip() != ""
        and unicodedata.is_normalized("NFC", value)
        and not any(unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"} for c in value)
    )
    try:
        assert campaign_name(value) == value and plain
    except CampaignBlocked as error:
        assert error.code == dom.NAME_INVALID and not plain


def test_list_filters_by_provider_model_suite_and_name(
    service: CampaignService, clock: LedgerClock
) -> None:
    one = make_plan(cases=2, candidate_provider_id="acme", candidate_model_id="m-small")
    two = make_plan(cases=3, candidate_provider_id="acme", candidate_model_id="m-large")
    three = make_plan(cases=4, candidate_provider_id="other", candidate_model_id="m-small")
    ids = []
    for plan, name in ((one, "Nightly small"), (two, "nightly large"), (three, "100% other_x")):
        ids.append(service.create(plan.policy, plan.suite, name=name))
        clock.advance(1)  # listed oldest first

    def listed(**where: str) -> list[str]:
        return [c.campaign_id for c in service.list(where=CampaignFilter(**where)).campaigns]

    assert listed(provider="acme") == ids[:2]
    assert listed(model="m-small") == [ids[0], ids[2]]
    assert listed(provider="acme", model="m-small") == [ids[0]]
    assert listed(name="NIGHTLY") == ids[:2]
    assert listed(name="%") == [ids[2]]  # LIKE's wildcards are matched literally
    assert listed(name="r_x") == [ids[2]]
    assert listed(suite=two.suite.sha256[:8].upper()) == [ids[1]]
    assert listed(provider="nobody") == []
    page = service.list(limit=1, where=CampaignFilter(provider="acme"))
    assert [c.campaign_id for c in page.campaigns] == ids[:1] and page.next_cursor == ids[0]
    rest = service.list(cursor=page.next_cursor, where=CampaignFilter(provider="acme"))
    assert [c.campaign_id for c in rest.campaigns] == ids[1:2]


@pytest.mark.parametrize(
    "where", [{"suite": "xyz"}, {"suite": ""}, {"name": ""}, {"provider": "a" * 201}]
)
def test_a_bad_filter_is_refused(where: dict[str, str]) -> None:
    with pytest.raises(CampaignBlocked) as caught:
        CampaignFilter(**where)
    assert caught.value.code == dom.FILTER_INVALID


def test_a_health_reason_names_its_code_once_and_in_full_when_read_back(
    service: CampaignService, cid: str
) -> None:
    claim = service.claim(cid, "w-1")
    assert claim is not None
    code = dom.dependency_code("tiny.bad_case")
    service.fail(claim, code, retryable=False)
    reasons = service.health(cid).reasons
    assert "benchmark.campaign.error.dependency.tiny.bad_case" in reasons
    assert not any(reason.count("benchmark.campaign.") > 1 for reason in reasons)
    assert dom.code_of_reason("benchmark.campaign.error.dependency.tiny.bad_case") == code
    assert dom.code_of_reason(dom.error_reason("api.http_429")) == "api.http_429"
    assert dom.code_of_reason(dom.error_reason(dom.LEASE_EXPIRED)) == dom.LEASE_EXPIRED
    assert dom.code_of_reason(dom.REASON_FAILED) is None
    assert service.status(cid).error_counts == {code: 1}


def test_retry_takes_a_code_in_full_or_by_a_unique_suffix(
    ledger_db: Database, service: CampaignService, cid: str
) -> None:
    actions = CampaignActions(service)
    for name in ("tiny.bad_case", "huge.bad_case"):
        claim = service.claim(cid, "w-1")
        assert claim is not None
        service.fail(claim, dom.dependency_code(name), retryable=False)
    with refused(ledger_db, dom.INPUT_INVALID) as caught:
        actions.retry(cid, codes=["bad_case"])  # the end of both
    assert "tiny.bad_case" in str(caught.value) and "huge.bad_case" in str(caught.value)
    assert len(actions.retry(cid, codes=["tiny.bad_case"]).work_ids) == 1
    full = dom.dependency_code("huge.bad_case")
    assert len(actions.retry(cid, codes=[full]).work_ids) == 1
    with refused(ledger_db, "benchmark.campaign.nothing_to_retry"):
        actions.retry(cid, codes=["tiny.bad_case"])
