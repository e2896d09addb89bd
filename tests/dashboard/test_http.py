"""Every route of the dashboard over HTTP, on each backend: pages, JSON, refusals, security."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import markupsafe
import pytest
import sqlalchemy as sa

import benchledger
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock

from . import helpers
from .helpers import HOSTILE, client_for, finish, make_campaign, make_study, work_some

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`")


def table_rows(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: what no dashboard request may change."""
    with db.engine.connect() as connection:
        names = sa.inspect(connection).get_table_names()
        return {
            name: sorted(
                (
                    tuple(str(value) for value in row)
                    for row in connection.execute(sa.text(f'SELECT * FROM "{name}"'))
                ),
            )
            for name in names
        }


@pytest.fixture
def ledger(ledger_db: Database, ledger_clock: LedgerClock) -> dict[str, Any]:
    """A ledger with a campaign in progress, a finished one, a study; and every route."""
    campaigns = CampaignService(ledger_db, clock=ledger_clock)
    studies = StudyService(ledger_db, clock=ledger_clock)
    busy = make_campaign(campaigns, cases=3, prefix="busy")
    claims = work_some(campaigns, busy, ledger_clock)
    ledger_clock.advance(1)
    done = make_campaign(campaigns, cases=2, prefix="done")
    finish(campaigns, done)
    study_id, run_id = make_study(studies, name=HOSTILE)
    routes = [
        "/campaigns",
        "/campaigns?order=newest",
        f"/campaigns/{busy}",
        f"/campaigns/{done}",
        "/studies",
        f"/studies/{study_id}",
        "/api/campaigns",
        "/api/campaigns?order=newest&limit=1",
        f"/api/campaigns/{busy}",
        f"/api/campaigns/{busy}/status",
        f"/api/campaigns/{busy}/health",
        f"/api/campaigns/{done}/report",
        "/api/studies",
        f"/api/studies/{study_id}",
        f"/api/studies/{study_id}/audit",
        "/static/dashboard.css",
        "/static/dashboard.js",
        "/static/favicon.svg",
        "/favicon.ico",
        f"/campaigns/{busy}/results",
        f"/campaigns/{busy}/results?status=failed&limit=2",
        f"/api/campaigns/{busy}/results",
        f"/api/campaigns/{busy}/results/summary",
        f"/api/campaigns/{busy}/results.csv",
        f"/api/campaigns/{busy}/results.parquet",
        "/compare",
        f"/compare?a={busy}&b={done}",
        f"/api/compare?a={busy}&b={busy}",
    ]
    return {
        "campaigns": campaigns,
        "studies": studies,
        "busy": busy,
        "done": done,
        "claims": claims,
        "study": study_id,
        "run": run_id,
        "routes": routes,
    }


def test_every_route_answers_get(client: Any, ledger: dict[str, Any]) -> None:
    for route in ledger["routes"]:
        response = client.get(route)
        assert response.status_code == 200, (route, response.text[:500])
        if ".csv" in route or ".parquet" in route:
            assert "attachment" in response.headers["content-disposition"]
        elif route.startswith("/api/"):
            assert response.headers["content-type"].startswith("application/json")
        elif not route.startswith(("/static/", "/favicon")):
            assert response.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
    home = client.get("/")
    assert home.status_code == 307 and home.headers["location"] == "/campaigns"


def test_no_route_writes(client: Any, ledger: dict[str, Any], ledger_db: Database) -> None:
    before = table_rows(ledger_db)
    for route in [*ledger["routes"], "/"]:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = client.request(method, route, json={"status": "succeeded"})
            assert response.status_code == 405, (method, route, response.status_code)
    for route in ledger["routes"]:
        client.get(route)
    assert table_rows(ledger_db) == before


def test_the_api_has_the_command_lines_payloads(client: Any, ledger: dict[str, Any]) -> None:
    campaigns: CampaignService = ledger["campaigns"]
    busy, done = ledger["busy"], ledger["done"]
    assert client.get(f"/api/campaigns/{busy}/status").json() == (
        campaigns.status(busy).as_payload()
    )
    health = client.get(f"/api/campaigns/{busy}/health").json()
    expected = campaigns.health(busy).as_payload()
    assert {key: health[key] for key in expected} == expected
    assert health["status"] == "blocked"
    assert "benchmark.campaign.failed" in health["reasons"]
    report = client.get(f"/api/campaigns/{done}/report?download=1")
    assert report.json() == campaigns.load_report(done)
    assert "attachment" in report.headers["content-disposition"]
    listing = client.get("/api/campaigns").json()
    assert [item["campaign_id"] for item in listing["campaigns"]] == [busy, done]
    for item in listing["campaigns"]:
        status = campaigns.status(item["campaign_id"]).as_payload()
        assert {key: item[key] for key in status} == status
    newest = client.get("/api/campaigns?order=newest&limit=1").json()
    assert [item["campaign_id"] for item in newest["campaigns"]] == [done]
    after = client.get(f"/api/campaigns?order=newest&limit=1&cursor={newest['next_cursor']}")
    assert [item["campaign_id"] for item in after.json()["campaigns"]] == [busy]
    assert after.json()["next_cursor"] is None


def test_the_campaign_page_shows_what_the_database_holds(
    client: Any, ledger: dict[str, Any]
) -> None:
    busy = ledger["busy"]
    claims = ledger["claims"]
    live = client.get(f"/api/campaigns/{busy}").json()
    assert live["status"]["counts"] == {
        "pending": 2,
        "leased": 1,
        "retry_wait": 1,
        "succeeded": 1,
        "failed": 1,
    }
    assert [lease["worker"] for lease in live["leases"]] == ["worker-d"]
    assert live["leases"][0]["expires_in"] == pytest.approx(300 - 1)  # the clock moved 1 s
    assert [retry["error_code"] for retry in live["retries"]] == ["test.flaky"]
    assert live["retries"][0]["due_in"] == pytest.approx(120 - 1)
    codes = {group["code"]: group for group in live["failures"]}
    assert codes["test.broken"]["count"] == 1
    assert codes["test.broken"]["examples"][0]["suite_case_key"] == claims["final"].suite_case_key
    assert sum(point["count"] for point in live["completions_per_minute"]) == 1
    page = client.get(f"/campaigns/{busy}").text
    assert 'id="count-succeeded">1<' in page
    assert "worker-d" in page and "test.flaky" in page and "test.broken" in page
    # Reasons in words, from the error reference.
    assert "some item failed for good" in page
    assert "Not final yet" in page
    # The lease token and failure details never leave the database (details are hashed).
    for claim in claims.values():
        assert claim.lease_token not in page
        assert claim.lease_token not in str(live)
    assert "secret detail text" not in page


def test_the_report_is_shown_once_final(client: Any, ledger: dict[str, Any]) -> None:
    page = client.get(f"/campaigns/{ledger['done']}").text
    report = ledger["campaigns"].load_report(ledger["done"])
    assert "Download as JSON" in page
    for locale, summary in report["locales"].items():
        assert f"<td>{locale}</td>" in page
        assert f'<td class="num">{summary["items"]}</td>' in page
    refused = client.get(f"/api/campaigns/{ledger['busy']}/report")
    assert refused.status_code == 409
    assert refused.json()["error"] == "benchmark.campaign.report_missing"


def test_the_study_pages(client: Any, ledger: dict[str, Any]) -> None:
    from benchledger.examples import study as ex

    data = client.get(f"/api/studies/{ledger['study']}").json()
    bars = {bar["dimension"]: bar for bar in data["budget"]}
    for name, limit, envelope in zip(
        ("attempt_slots", "admitted_wall_seconds", "retained_bytes", "peak_staging_bytes"),
        ex.LIMITS.values(),
        ex.ENVELOPE.values(),
        strict=True,
    ):
        # One run admitted, not settled: its whole envelope is reserved.
        assert bars[name] == {
            "dimension": name,
            "limit": limit,
            "charged": 0,
            "reserved": envelope,
            "remaining": limit - envelope,
        }
    assert data["study"]["name"] == HOSTILE
    assert [run["run_id"] for run in data["runs"]] == [ledger["run"]]
    assert [entry["action"] for entry in data["history"]][:2] == [
        "studies.create",
        "studies.prepare_trial",
    ]
    audit = client.get(f"/api/studies/{ledger['study']}/audit?limit=2").json()
    assert len(audit["entries"]) == 2 and audit["next_before"] is not None
    older = client.get(
        f"/api/studies/{ledger['study']}/audit?limit=2&before={audit['next_before']}"
    ).json()
    assert older["entries"][0]["id"] < audit["entries"][-1]["id"]
    page = client.get(f"/studies/{ledger['study']}").text
    assert f"{ex.LIMITS.attempt_slots:,}</b>" in page
    listing = client.get("/api/studies").json()
    assert [study["id"] for study in listing["studies"]] == [ledger["study"]]


def test_hostile_strings_are_escaped_everywhere(
    ledger_db: Database, ledger_clock: LedgerClock, client: Any
) -> None:
    campaigns = CampaignService(ledger_db, clock=ledger_clock)
    campaign_id = make_campaign(campaigns, cases=2, prefix=HOSTILE)
    first = campaigns.claim(campaign_id, HOSTILE)
    assert first is not None
    campaigns.fail(first, "test.hostile", retryable=True, delay_seconds=60, detail=HOSTILE)
    second = campaigns.claim(campaign_id, HOSTILE)
    assert second is not None
    studies = StudyService(ledger_db, clock=ledger_clock)
    study_id, _run = make_study(studies, name=HOSTILE)
    for route in (
        "/campaigns",
        f"/campaigns/{campaign_id}",
        "/studies",
        f"/studies/{study_id}",
        "/campaigns/" + HOSTILE,
        "/studies/" + HOSTILE,
    ):
        page = client.get(route).text
        assert "<script>" not in page, route
        assert "__xss" not in page or html.escape("<script>") in page, route
    escaped = str(markupsafe.escape(HOSTILE))  # <, >, &, both quotes
    campaign_page = client.get(f"/campaigns/{campaign_id}").text
    assert campaign_page.count(escaped) >= 3  # case keys of the lease, the retry; the worker
    study_page = client.get(f"/studies/{study_id}").text
    assert escaped in study_page
    # Only the package's own script is loaded; no inline script at all.
    assert re.findall(r"<script[^>]*>", study_page) == ['<script src="/static/dashboard.js" defer>']


def test_refusals_are_coded(client: Any, ledger: dict[str, Any]) -> None:
    missing = "benchmark-campaign-" + "0" * 64
    cases = {
        f"/api/campaigns/{missing}": (404, "benchmark.campaign.not_found"),
        "/api/campaigns/not-an-id": (404, "benchmark.campaign.not_found"),
        "/api/campaigns?cursor=nope": (400, "benchmark.campaign.page_invalid"),
        "/api/campaigns?limit=0": (400, "benchmark.campaign.page_invalid"),
        "/api/campaigns?limit=x": (400, "ledger.dashboard.query_invalid"),
        "/api/campaigns?order=sideways": (400, "ledger.dashboard.query_invalid"),
        "/api/studies/nope": (404, "not_found"),
        f"/api/studies/{ledger['study']}/audit?before=0": (400, "invalid"),
        "/api/nothing": (404, "ledger.dashboard.page_missing"),
    }
    for route, (status, code) in cases.items():
        response = client.get(route)
        assert (response.status_code, response.json()["error"]) == (status, code), route
        assert response.json()["message"]
    page = client.get(f"/campaigns/{missing}")
    assert page.status_code == 404
    assert "benchmark.campaign.not_found" in page.text
    assert "no campaign with this id in this database" in page.text


def test_the_token_is_required_on_every_request(
    ledger_db: Database, ledger_clock: LedgerClock, ledger: dict[str, Any]
) -> None:
    token = "s3cret-token"
    with client_for(ledger_db, ledger_clock, token=token) as gated:
        for route in [*ledger["routes"], "/", "/nothing"]:
            refused = gated.get(route)
            assert refused.status_code == 401, route
            assert refused.json()["error"] == "ledger.dashboard.unauthorized"
            wrong = gated.get(route, headers={"Authorization": "Bearer s3cret-tokem"})
            assert wrong.status_code == 401
            assert gated.get(route, headers={"Authorization": f"Bearer {token}"}).status_code in (
                200,
                307,
                404,
            )
        assert gated.get("/campaigns?token=wrong").status_code == 401
        traded = gated.get("/campaigns?order=newest&token=" + token)
        assert traded.status_code == 303
        assert traded.headers["location"].endswith("/campaigns?order=newest")
        assert "httponly" in traded.headers["set-cookie"].lower()
        page = gated.get("/campaigns?order=newest")  # the cookie now
        assert page.status_code == 200
        assert token not in page.text


def test_the_database_password_never_reaches_a_page(ledger_clock: LedgerClock) -> None:
    from benchledger.dashboard.app import _database_label

    label = _database_label(Database("postgresql+psycopg://ops:hunter2pw@db.example/ledger"))
    assert "hunter2pw" not in label and "ledger" in label


def test_health_reasons_are_explained_from_the_error_reference() -> None:
    from benchledger.dashboard import reference
    from benchledger.domain import campaign as dom

    reasons = [
        dom.REASON_FAILED,
        dom.REASON_STALLED,
        dom.REASON_CLOCK_SKEW,
        dom.REASON_REPORT_FAILED,
        dom.LEASE_EXPIRED,
        dom.STATE_INVALID,
        dom.REPORT_MISSING,
        dom.error_reason("benchmark.campaign.dependency.example.timeout"),
        dom.report_error_reason("benchmark.campaign.report_lease_expired"),
    ]
    for reason in reasons:
        explained = reference.explain(reason)
        assert explained.meaning != reference.UNKNOWN, reason
        assert explained.action
    nested = reference.explain(reasons[-2])
    assert nested.inner is not None
    assert "DependencyFailed" in nested.inner.meaning
    assert reference.explain("made.up").meaning == reference.UNKNOWN


def test_the_last_integrity_audit_is_shown(
    client: Any, ledger: dict[str, Any], ledger_clock: LedgerClock
) -> None:
    done = ledger["done"]
    page = client.get(f"/campaigns/{done}").text
    assert "No integrity audit recorded yet" in page
    audit = ledger["campaigns"].verify(done)
    assert audit.ok
    ledger_clock.advance(60)  # past the dashboard's health refresh
    health = client.get(f"/api/campaigns/{done}/health").json()
    assert health["verified_at"] == pytest.approx(ledger_clock() - 60)
    assert health["verified_ok"] is True
    page = client.get(f"/campaigns/{done}").text
    assert "Last integrity audit" in page and "found nothing wrong" in page
    # Reading the page ran no audit: the recorded one is the only one.
    status = client.get(f"/api/campaigns/{done}/status").json()
    assert status["verified_at"] == health["verified_at"]


def test_large_campaigns_are_read_off_the_request_path(
    ledger_db: Database, ledger_clock: LedgerClock, ledger: dict[str, Any]
) -> None:
    """Above ``inline_check_items``, the report is verified in a background thread."""
    import time

    done = ledger["done"]
    expected = ledger["campaigns"].load_report(done)
    with client_for(ledger_db, ledger_clock, inline_check_items=1) as large:
        first = large.get(f"/api/campaigns/{done}/report")
        assert (first.status_code, first.json()) == (202, {"checking": True})
        meanwhile = large.get(f"/campaigns/{done}").text  # (the check may be done already)
        assert "being verified" in meanwhile or "Download as JSON" in meanwhile
        deadline = time.monotonic() + 30
        while (answer := large.get(f"/api/campaigns/{done}/report")).status_code == 202:
            assert time.monotonic() < deadline, "the background verification never finished"
            time.sleep(0.05)
        assert answer.json() == expected
        assert "Download as JSON" in large.get(f"/campaigns/{done}").text
        # The completions chart: read inline the first time, then served from the cache.
        live = large.get(f"/api/campaigns/{ledger['busy']}").json()
        assert sum(point["count"] for point in live["completions_per_minute"]) == 1


def test_the_assets_ship_in_the_package() -> None:
    from benchledger.dashboard import reference

    here = Path(benchledger.__file__).resolve().parent / "dashboard"
    for name in ("dashboard.css", "dashboard.js"):
        text = (here / "static" / name).read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text  # nothing from elsewhere
    templates = list((here / "templates").glob("*.html"))
    assert len(templates) >= 6
    for template in templates:
        text = template.read_text(encoding="utf-8")
        assert not any(f'{attr}="http' in text for attr in ("src", "href")), template.name
    assert reference.rows()  # the error reference is found (packaged or in the checkout)


def test_a_missing_browser_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(helpers, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        helpers.chromium_or_skip()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        helpers.chromium_or_skip()
