"""The results page, its downloads, the compare page, and what was fixed on the others:
names and candidates, short ids, the rate of a young campaign, flow control, the failed
items' advice, one spelling per code, a favicon, and 400 for every bad query parameter."""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchledger.db import Database
from benchledger.domain.results import RESULT_COLUMNS
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.services.campaigns.views import RATE_WINDOW_SECONDS
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock

from .helpers import BAD_CASE, make_campaign, make_pair, make_study, result_for

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`")


@pytest.fixture
def pair(ledger_db: Database, ledger_clock: LedgerClock) -> dict[str, Any]:
    service = CampaignService(ledger_db, clock=ledger_clock)
    return {**make_pair(service, ledger_clock), "service": service}


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# -- the results page -----------------------------------------------------------------


def test_the_results_summary_agrees_with_the_provisional_report(
    client: Any, pair: dict[str, Any]
) -> None:
    service: CampaignService = pair["service"]
    b = pair["b"]
    summary = client.get(f"/api/campaigns/{b}/results/summary").json()
    report = service.load_report(b, provisional=True)
    for row in summary["locales"]:
        expected = report["locales"][row["locale"]]
        assert row["items"] == expected["items"]
        assert row["succeeded"] == expected["succeeded"]
        assert row["passed"] == expected["passed"]
        assert row["pass_rate"] == pytest.approx(expected["pass_rate"])
        assert row["mean_score"] == pytest.approx(expected["mean_score"])
    assert summary["overall"]["failed"] == 1
    # B's scores: 0.9 on even cases, 0.3 on odd ones; fr-FR's last case never succeeded.
    histogram = {round(b["low"], 1): b["count"] for b in summary["histogram"]}
    assert sum(histogram.values()) == 11
    assert histogram[0.9] == 6 and histogram[0.3] == 5
    # Durations 0.1 s, 0.2 s, ... per attempt: nearest-rank percentiles.
    durations = sorted(pair["durations"]["b"])
    for p in (50, 95, 99):
        rank = math.ceil(p * len(durations) / 100)
        assert summary["durations"][f"p{p}"] == pytest.approx(durations[rank - 1])
    timeline = summary["timeline"]
    assert timeline["attempts"] == len(durations)
    assert sum(bucket["failures"] for bucket in timeline["buckets"]) == 2  # retry, then failed
    assert sum(bucket["retry_scheduled"] for bucket in timeline["buckets"]) == 1


def test_the_results_page_charts_and_pages_the_items(client: Any, pair: dict[str, Any]) -> None:
    b = pair["b"]
    page = client.get(f"/campaigns/{b}/results").text
    assert "challenger" in page and "test-provider / model-b @ 2024-06" in page
    # Pass rate bars: de-DE 3 of 6, fr-FR 3 of 5 succeeded.
    assert 'data-locale="de-DE" data-pass-rate="0.5"' in page
    assert 'data-locale="fr-FR" data-pass-rate="0.6"' in page
    assert re.search(r'<rect class="fill" x="110" y="2" width="200.00"', page)
    assert page.count('<rect data-count="') == 10  # the histogram's bars
    assert 'id="timeline"' in page and '<b id="timeline-failures">2</b>' in page
    assert 'id="durations"' in page
    assert page.count("<tr data-work-id=") == 12
    # Filters: the failed item only, with its full code and the command line's advice.
    failed = client.get(f"/campaigns/{b}/results?status=failed").text
    assert failed.count("<tr data-work-id=") == 1
    assert f"<code>{BAD_CASE}</code>" in failed
    assert f"benchledger campaign retry {short_id(b)}" in failed
    french = client.get(f"/campaigns/{b}/results?locale=fr-FR").text
    assert french.count("<tr data-work-id=") == 6 and "<td>de-DE</td>" not in french
    # Paging: 5 at a time, the next page continues after the last one shown.
    first = client.get(f"/campaigns/{b}/results?limit=5").text
    assert first.count("<tr data-work-id=") == 5
    link = re.search(r'id="next-items" href="([^"]+)"', first)
    assert link is not None
    second = client.get(link.group(1).replace("&amp;", "&")).text
    assert second.count("<tr data-work-id=") == 5
    assert set(re.findall(r'data-work-id="([^"]+)"', first)).isdisjoint(
        re.findall(r'data-work-id="([^"]+)"', second)
    )
    api = client.get(f"/api/campaigns/{b}/results?locale=fr-FR&status=failed").json()
    assert [item["error_code"] for item in api["items"]] == [BAD_CASE]
    assert api["items"][0]["case_key"] == pair["failing"]


def test_downloads_stream_every_item(client: Any, pair: dict[str, Any]) -> None:
    service: CampaignService = pair["service"]
    b = pair["b"]
    response = client.get(f"/api/campaigns/{b}/results.csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert f'filename="{short_id(b)}-results.csv"' in response.headers["content-disposition"]
    rows = _rows(response.text)
    assert list(rows[0]) == list(RESULT_COLUMNS)
    expected = [item.as_dict() for item in service.iter_results(b)]
    assert [row["work_id"] for row in rows] == [item["work_id"] for item in expected]
    failed = _rows(client.get(f"/api/campaigns/{b}/results.csv?status=failed").text)
    assert [(row["case_key"], row["error_code"]) for row in failed] == [(pair["failing"], BAD_CASE)]
    parquet = client.get(f"/api/campaigns/{b}/results.parquet?locale=de-DE")
    assert parquet.status_code == 200
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.num_rows == 6
    assert set(table.column("locale").to_pylist()) == {"de-DE"}
    assert table.column_names == list(RESULT_COLUMNS)
    refused = client.get(f"/api/campaigns/{b}/results.csv?status=nope")
    assert (refused.status_code, refused.json()["error"]) == (400, "ledger.dashboard.query_invalid")
    assert client.get(f"/api/campaigns/{b}/results.xlsx").status_code == 404


# -- the compare page -----------------------------------------------------------------


def test_the_compare_form_offers_campaigns_of_one_suite(client: Any, pair: dict[str, Any]) -> None:
    a, b, other = pair["a"], pair["b"], pair["other"]
    start = client.get("/compare").text
    assert all(short_id(cid) in start for cid in (a, b, other))
    chosen = client.get(f"/compare?a={short_id(a)}").text
    pick_b = chosen[chosen.index('id="pick-b"') :]
    pick_b = pick_b[: pick_b.index("</select>")]
    assert f'value="{b}"' in pick_b and other not in pick_b and f'value="{a}"' not in pick_b


def test_the_compare_page_shows_the_paired_statistics(client: Any, pair: dict[str, Any]) -> None:
    service: CampaignService = pair["service"]
    a, b = pair["a"], pair["b"]
    expected = service.compare(a, b, seed=0, resamples=2_000)
    assert expected.comparison is not None
    page = client.get(f"/compare?a={a}&b={b}").text
    assert "baseline" in page and "challenger" in page and "model-a" in page
    assert f'<b id="paired">{expected.paired}</b>' in page
    assert '<tr data-reason="b_not_succeeded"><td>b not succeeded</td><td class="num">1<' in page
    overall = expected.comparison.overall
    cells = {
        "both-pass": overall.passed_a - overall.a_pass_b_fail,
        "a-only": overall.a_pass_b_fail,
        "b-only": overall.a_fail_b_pass,
        "both-fail": overall.pairs - overall.passed_a - overall.a_fail_b_pass,
    }
    for cell, count in cells.items():
        assert f'id="{cell}">{count}<' in page, cell
    for entry in expected.comparison.locales:
        low, high = entry.stats.interval.low, entry.stats.interval.high
        assert f'data-locale="{entry.locale}" data-low="{low}" data-high="{high}"' in page
    assert page.count("<circle ") == len(expected.comparison.locales) + 1
    flips = page[page.index('id="flips"') :]
    assert flips.count("<tr><td>") == len(expected.comparison.flips)
    assert "2,000</b> resamples" in page
    api = client.get(f"/api/compare?a={short_id(a)}&b={short_id(b)}&resamples=500&seed=7").json()
    assert api == {
        **service.compare(a, b, seed=7, resamples=500).as_payload(),
        "seed": 7,
        "resamples": 500,
    }
    differs = client.get(f"/api/compare?a={a}&b={pair['other']}")
    assert (differs.status_code, differs.json()["error"]) == (
        409,
        "benchmark.campaign.compare.suite_differs",
    )
    refused = client.get(f"/compare?a={a}&b={pair['other']}").text
    assert "benchmark.campaign.compare.suite_differs" in refused
    missing = client.get("/api/compare?a=ffffffffffff&b=" + a)
    assert (missing.status_code, missing.json()["error"]) == (400, "ledger.dashboard.query_invalid")


# -- what was fixed on the other pages -------------------------------------------------


def test_names_candidates_and_short_ids_everywhere(client: Any, pair: dict[str, Any]) -> None:
    a, b = pair["a"], pair["b"]
    listing = client.get("/campaigns").text
    assert "baseline" in listing and "test-provider / model-a @ 2024-06" in listing
    assert short_id(a) in listing
    page = client.get(f"/campaigns/{short_id(b)}").text  # the CLI's 12 digits
    assert page.count("challenger") >= 3  # heading, health, report
    assert page.count("test-provider / model-b @ 2024-06") >= 3
    assert client.get(f"/api/campaigns/{short_id(b)}/status").json()["campaign_id"] == b
    assert client.get(f"/campaigns/{b[19:25]}/results").status_code == 200
    for route in ("/campaigns/zzzz", "/campaigns/12", "/api/campaigns/abcdef0123/status"):
        response = client.get(route)
        assert response.status_code == 404, route
    api = client.get("/api/campaigns").json()
    assert {item["name"] for item in api["campaigns"]} == {"baseline", "challenger", None}
    filtered = client.get("/api/campaigns?model=model-b").json()
    assert [item["campaign_id"] for item in filtered["campaigns"]] == [b]
    by_name = client.get("/campaigns?name=BASE").text
    assert short_id(a) in by_name and short_id(b) not in by_name


def test_one_spelling_per_code(client: Any, pair: dict[str, Any]) -> None:
    b = pair["b"]
    partial = re.compile(r"(?<!benchmark\.campaign\.)dependency\.tiny\.bad_case")
    for route in ("/campaigns", f"/campaigns/{b}", f"/campaigns/{b}/results?status=failed"):
        page = client.get(route).text
        assert BAD_CASE in page, route
        assert partial.search(page) is None, (route, partial.findall(page))
    page = client.get(f"/campaigns/{b}").text
    assert f"last error of some items (the evaluator&#39;s code): {BAD_CASE}" in page
    live = client.get(f"/api/campaigns/{b}").json()
    assert [group["code"] for group in live["failures"]] == [BAD_CASE]
    assert BAD_CASE in live["health"]["reason_codes"]
    listing = client.get("/api/campaigns").json()
    (item,) = [c for c in listing["campaigns"] if c["campaign_id"] == b]
    assert BAD_CASE in item["health"]["reason_codes"]


def test_failed_items_get_the_command_lines_advice(client: Any, pair: dict[str, Any]) -> None:
    b = pair["b"]
    page = client.get(f"/campaigns/{b}").text
    advice = page[page.index('id="failed-advice"') :]
    advice = advice[: advice.index("</p>")]
    assert f"benchledger campaign results {short_id(b)} --status failed" in advice
    assert f"benchledger campaign retry {short_id(b)}" in advice
    health = client.get(f"/api/campaigns/{b}/health").json()
    (failed,) = [e for e in health["explained"] if e["code"] == "benchmark.campaign.failed"]
    assert f"benchledger campaign retry {short_id(b)}" in failed["action"]
    assert 'id="failed-advice"' not in client.get(f"/campaigns/{pair['a']}").text


def test_a_young_campaign_is_rated_over_its_life(
    ledger_db: Database, ledger_clock: LedgerClock, client: Any
) -> None:
    service = CampaignService(ledger_db, clock=ledger_clock)
    young = make_campaign(service, cases=10, prefix="young")  # 20 items
    for _ in range(20):
        ledger_clock.advance(1)
        claim = service.claim(young, "fast")
        assert claim is not None
        service.complete(claim, result_for(claim))
    ledger_clock.advance(2)  # 22 s old
    progress = client.get(f"/api/campaigns/{young}").json()["progress"]
    assert progress["over_life"] is True
    assert progress["window_seconds"] == pytest.approx(22)
    assert progress["rate_per_minute"] == pytest.approx(20 * 60 / 22)
    assert "over its life" in client.get(f"/campaigns/{young}").text
    # Older than the window: the completions of the whole minutes overlapping the window,
    # over the seconds those minutes cover (never more than the window's own count).
    ledger_clock.advance(RATE_WINDOW_SECONDS)
    later = client.get(f"/api/campaigns/{young}").json()["progress"]
    assert later["over_life"] is False
    assert RATE_WINDOW_SECONDS <= later["window_seconds"] <= RATE_WINDOW_SECONDS + 60
    assert later["rate_per_minute"] <= 20 * 60 / RATE_WINDOW_SECONDS


def test_flow_control_is_visible(
    ledger_db: Database, ledger_clock: LedgerClock, client: Any
) -> None:
    service = CampaignService(ledger_db, clock=ledger_clock)
    cid = make_campaign(service, cases=3, prefix="flow")
    assert "no flow-control cap set" in client.get(f"/campaigns/{cid}").text
    service.set_limits(cid, max_concurrent_leases=1)
    assert service.claim(cid, "w1") is not None
    flow = client.get(f"/api/campaigns/{cid}").json()["flow"]
    assert (flow["state"], flow["capped_by"]) == ("capped", ["max_concurrent_leases"])
    page = client.get(f"/campaigns/{cid}").text
    assert "Capped</b> by max concurrent leases (1 of 1 live)" in page
    service.set_limits(cid, max_claims_per_minute=0)
    assert client.get(f"/api/campaigns/{cid}").json()["flow"]["state"] == "paused"
    assert "Paused</b>" in client.get(f"/campaigns/{cid}").text
    service.cancel(cid)
    assert "Cancelled</b>" in client.get(f"/campaigns/{cid}").text


def test_throttling_and_the_limit_group_are_visible(
    ledger_db: Database, ledger_clock: LedgerClock, client: Any
) -> None:
    service = CampaignService(ledger_db, clock=ledger_clock)
    cid = make_campaign(service, cases=3, prefix="throttle")
    group = service.status(cid).limit_group
    assert group is not None
    page = client.get(f"/campaigns/{cid}").text
    assert "No item waits on throttling." in page and "not held back" in page
    claim = service.claim(cid, "w1")
    assert claim is not None
    service.throttle(claim, "api.http_429", retry_after=30)
    service.set_group_limits(group, max_concurrent_leases=0)
    page = client.get(f"/campaigns/{cid}").text
    assert "1 throttled</b> item(s)" in page
    assert f'Limit group <code>{group}</code>: <b class="warn">waiting on its group</b>' in page
    payload = client.get(f"/api/campaigns/{cid}").json()["status"]
    assert payload["throttled"] == 1 and payload["waiting_on_group"] is True
    assert payload["throttled_due_at"] == ledger_clock() + 30


def test_a_favicon_is_served(client: Any) -> None:
    for route in ("/favicon.ico", "/static/favicon.svg"):
        response = client.get(route)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("image/svg+xml")
        assert response.text.startswith("<svg")
    assert '<link rel="icon" href="/static/favicon.svg"' in client.get("/campaigns").text


def test_a_provisional_report_shows_on_a_blocked_campaign(
    client: Any, pair: dict[str, Any]
) -> None:
    page = client.get(f"/campaigns/{pair['b']}").text
    assert 'id="provisional"' in page and "<b>Provisional</b>" in page
    report = pair["service"].load_report(pair["b"], provisional=True)
    assert f"{report['overall']['succeeded']} / {report['overall']['items']}" in page


# -- every query parameter: 400 or 200, never 500 --------------------------------------


def _routes(pair: dict[str, Any], study: str) -> dict[str, tuple[str, ...]]:
    """Each route the dashboard serves, with every query parameter it reads."""
    a, b = pair["a"], pair["b"]
    return {
        "/campaigns": ("order", "cursor", "limit", "provider", "model", "suite", "name"),
        "/api/campaigns": ("order", "cursor", "limit", "provider", "model", "suite", "name"),
        f"/campaigns/{b}/results": ("status", "locale", "cursor", "limit"),
        f"/api/campaigns/{b}/results": ("status", "locale", "cursor", "limit"),
        f"/api/campaigns/{b}/results.csv": ("status", "locale"),
        f"/compare?b={b}": ("a", "seed", "resamples", "flips_from"),
        f"/api/compare?a={a}": ("b", "seed", "resamples"),
        "/studies": ("cursor", "limit"),
        "/api/studies": ("cursor", "limit"),
        f"/studies/{study}": ("before", "limit"),
        f"/api/studies/{study}/audit": ("before", "limit"),
    }


HOSTILE_VALUES = st.one_of(
    st.sampled_from(
        [
            str(2**63),
            str(2**64 + 1),
            "9" * 40,
            "-1",
            "-0",
            "0",
            "٣",
            "\uff10",
            "1٣",
            "",
            " ",
            " 5",
            "5 ",
            "\t",
            "1_0",
            "+1",
            "1e3",
            "0x10",
            "nan",
            "\x00",
            "a\x00b",
            "é" * 300,
            "benchmark-campaign-" + "0" * 64,
            "benchmark-work-" + "f" * 64,
            "ffff",
        ]
    ),
    st.text(max_size=30),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)


@pytest.fixture
def query_routes(ledger_db: Database, ledger_clock: LedgerClock) -> dict[str, tuple[str, ...]]:
    service = CampaignService(ledger_db, clock=ledger_clock)
    pair = make_pair(service, ledger_clock, cases=2)
    study, _run = make_study(StudyService(ledger_db, clock=ledger_clock))
    return _routes(pair, study)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_query_parameter_is_400_or_200_never_500(
    client: Any, query_routes: dict[str, tuple[str, ...]], data: st.DataObject
) -> None:
    route, names = data.draw(st.sampled_from(sorted(query_routes.items())))
    name = data.draw(st.sampled_from(names))
    value = data.draw(HOSTILE_VALUES)
    url = route + ("&" if "?" in route else "?") + urlencode({name: value})
    response = client.get(url)
    assert response.status_code in (200, 400), (url, response.text[:300])
    if response.status_code == 400:
        if "json" in response.headers["content-type"]:
            body = response.json()
            assert body["error"] and body["message"]
        else:
            assert 'class="refusal"' in response.text


def test_every_query_parameter_sample(
    client: Any, query_routes: dict[str, tuple[str, ...]]
) -> None:
    """The hostile values named in the issue, on every parameter of every route."""
    for route, names in query_routes.items():
        for name in names:
            for value in (str(2**63), "-1", "٣", "\uff10", " ", " 7", "\x00"):
                url = route + ("&" if "?" in route else "?") + urlencode({name: value})
                assert client.get(url).status_code in (200, 400), url


def test_a_huge_audit_cursor_is_refused_not_overflowed(
    client: Any, ledger_db: Database, ledger_clock: LedgerClock
) -> None:
    study, _run = make_study(StudyService(ledger_db, clock=ledger_clock))
    for before in (str(2**63), str(2**63 - 1 + 1), "٣", "\uff10", "-5"):
        for route in (f"/api/studies/{study}/audit", f"/studies/{study}"):
            response = client.get(route, params={"before": before})
            assert response.status_code == 400, (route, before)
    assert (
        client.get(f"/api/studies/{study}/audit", params={"before": 2**63 - 1}).status_code == 200
    )
    from benchledger.services.studies.views import StudyViews

    with pytest.raises(Exception) as refused:
        StudyViews(ledger_db).audit(study, before=2**63)
    assert getattr(refused.value, "status", None) == 400
