"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright.

- while real worker processes (``benchledger campaign work``) drain a campaign,
  the open campaign page's counts and progress bar follow the database without
  a reload;
- a study page's budget bars show the study's numbers;
- a hostile study name renders as text and runs nothing;
- a campaign's results page draws its charts, filters its items and downloads
  them; the compare page lists only A's suite for B and plots the comparison;
  nothing is loaded from anywhere else and wide codes never widen the page.

SQLite file databases: the page, the server and the workers share one file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock

from .helpers import (
    BAD_CASE,
    CHROMIUM_ARGS,
    HOSTILE,
    chromium_or_skip,
    make_campaign,
    make_pair,
    make_study,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Using `httpx`")]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(executable), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    db.upgrade()
    try:
        yield db
    finally:
        db.dispose()


@pytest.fixture
def served(database: Database) -> Iterator[str]:
    """The dashboard served by uvicorn on a free loopback port; its base URL."""
    import uvicorn

    from benchledger.dashboard import DashboardSettings, create_app

    app = create_app(database, DashboardSettings(poll_seconds=0.5, health_refresh_seconds=1))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _count(page: Any, state: str) -> int:
    return int(page.text_content(f"#count-{state}").replace(",", ""))


def test_the_campaign_page_follows_real_workers_without_a_reload(
    browser: Any, database: Database, served: str
) -> None:
    service = CampaignService(database)
    campaign_id = make_campaign(service, cases=30, prefix="live")
    work_count = 60
    page = browser.new_page()
    page.goto(f"{served}/campaigns/{campaign_id}")
    assert _count(page, "succeeded") == 0
    assert _count(page, "pending") == work_count
    page.evaluate("window.__loadedOnce = true")
    listing = browser.new_page()
    listing.goto(f"{served}/campaigns")
    row = f"tr[data-campaign='{campaign_id}']"
    assert listing.text_content(f"{row} td[data-bind='counts.succeeded']") == "0"
    listing.evaluate("window.__loadedOnce = true")
    env = {
        **os.environ,
        "BENCHLEDGER_EXAMPLE_WORK_MS": "60",
        "BENCHLEDGER_DATABASE_URL": database.url,
    }
    workers = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("benchledger")),
            "campaign",
            "work",
            campaign_id,
            "--workers",
            "2",
            "--evaluator",
            "benchledger.examples.evaluator:evaluate",
            "--retry-base-seconds",
            "0",
            "--poll-seconds",
            "0.1",
            "--no-progress",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Part way: the numbers moved while the workers run, the page never reloaded.
        page.wait_for_function(
            "() => { const n = Number(document.getElementById('count-succeeded')"
            ".textContent.replace(/,/g, '')); return n > 0 && n < 60; }",
            timeout=30_000,
        )
        _out, err = workers.communicate(timeout=120)
    finally:
        if workers.poll() is None:
            workers.kill()
    assert workers.returncode == 0, err
    status = service.status(campaign_id)
    assert status.counts["succeeded"] == work_count
    page.wait_for_function(
        "() => document.getElementById('count-succeeded').textContent === '60'"
        " && document.getElementById('count-pending').textContent === '0'",
        timeout=15_000,
    )
    assert page.evaluate("window.__loadedOnce") is True  # same document: no reload
    for state, count in status.counts.items():
        assert _count(page, state) == count
    bar = page.locator(".progress-block svg [data-seg='succeeded']")
    assert float(bar.get_attribute("width") or 0) == pytest.approx(1000.0)
    assert page.text_content("#percent-done") == "100.0%"
    # The report section follows once the report is final (fetched, not reloaded).
    page.wait_for_function(
        "() => document.getElementById('report').dataset.state === 'final'", timeout=15_000
    )
    assert page.evaluate("window.__loadedOnce") is True
    page.close()
    # The campaigns list followed too, without a reload.
    listing.wait_for_function(
        f"() => document.querySelector(\"{row} td[data-bind='counts.succeeded']\")"
        ".textContent === '60'",
        timeout=15_000,
    )
    assert listing.evaluate("window.__loadedOnce") is True
    assert listing.text_content(f"{row} td[data-bind='waiting']") == "0"
    listing.close()


def test_a_study_page_shows_its_budget_and_a_hostile_name_as_text(
    browser: Any, database: Database, served: str
) -> None:
    from benchledger.examples import study as ex

    study_id, _run = make_study(StudyService(database), name=HOSTILE)
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{served}/studies/{study_id}")
    assert page.text_content("#study-name") == HOSTILE
    assert page.title().startswith("Study " + HOSTILE)
    for name, limit, envelope in zip(
        ("attempt_slots", "admitted_wall_seconds", "retained_bytes", "peak_staging_bytes"),
        ex.LIMITS.values(),
        ex.ENVELOPE.values(),
        strict=True,
    ):
        box = page.locator(f"[data-budget='{name}']")
        shown = {
            key: int((box.locator(f"[data-b='{key}']").text_content() or "").replace(",", ""))
            for key in ("charged", "reserved", "remaining", "limit")
        }
        assert shown == {
            "charged": 0,
            "reserved": envelope,
            "remaining": limit - envelope,
            "limit": limit,
        }
        reserved = float(box.locator("[data-seg='reserved']").get_attribute("width") or 0)
        assert reserved == pytest.approx(1000 * envelope / limit, abs=0.01)
    page.wait_for_timeout(1200)  # a refresh or two: still text, nothing ran
    assert page.text_content("#study-name") == HOSTILE
    assert page.evaluate("window.__xss") is None
    assert dialogs == []
    listing = browser.new_page()
    listing.goto(f"{served}/studies")
    assert listing.text_content("td.name") == HOSTILE
    assert listing.evaluate("window.__xss") is None
    listing.close()
    page.close()


def _offsite(page: Any, served: str) -> list[str]:
    """Every request the page makes that is not to the dashboard itself."""
    offsite: list[str] = []
    page.on(
        "request",
        lambda request: (
            None if request.url.startswith((served, "data:")) else offsite.append(request.url)
        ),
    )
    return offsite


def test_the_results_page_charts_filters_and_downloads(
    browser: Any, database: Database, served: str, tmp_path: Path
) -> None:
    clock = LedgerClock()
    pair = make_pair(CampaignService(database, clock=clock), clock)
    b = pair["b"]
    page = browser.new_page(viewport={"width": 900, "height": 900})
    offsite = _offsite(page, served)
    page.goto(f"{served}/campaigns/{b[19:31]}/results")  # the CLI's short id
    assert page.locator("#pass-rates g.hbar").count() == 3  # two locales and overall
    widths = {
        g.get_attribute("data-locale"): float(g.locator("rect.fill").get_attribute("width") or 0)
        for g in page.locator("#pass-rates g.hbar").all()
    }
    assert widths == {
        "de-DE": pytest.approx(200),
        "fr-FR": pytest.approx(240),
        "overall": pytest.approx(400 * 6 / 11, abs=0.01),
    }
    counts = [
        int(r.get_attribute("data-count") or 0) for r in page.locator("#histogram rect").all()
    ]
    assert sum(counts) == 11
    assert page.locator("#durations td").count() == 3
    assert int(page.text_content("#timeline-failures") or 0) == 2
    assert "challenger" in (page.title() or "")
    page.select_option("select[name=status]", "failed")
    page.click("#item-filters button[type=submit]")
    page.wait_for_url("**status=failed**")
    rows = page.locator("#item-rows tr[data-work-id]")
    assert rows.count() == 1
    assert BAD_CASE in (rows.first.text_content() or "")
    with page.expect_download() as download_info:
        page.click("#download-csv")
    path = tmp_path / "failed.csv"
    download_info.value.save_as(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and BAD_CASE in lines[1]
    # The live page of B: its long codes wrap, the page is no wider than the window.
    page.goto(f"{served}/campaigns/{b}")
    page.wait_for_selector("#reasons dt")
    assert BAD_CASE in (page.text_content("#reasons") or "")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert page.evaluate("[...document.querySelectorAll('link[rel=icon]')].map(l => l.href)") == [
        f"{served}/static/favicon.svg"
    ]
    assert offsite == []
    page.close()


def test_the_compare_page_picks_two_campaigns_of_one_suite(
    browser: Any, database: Database, served: str
) -> None:
    clock = LedgerClock()
    service = CampaignService(database, clock=clock)
    pair = make_pair(service, clock)
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    offsite = _offsite(page, served)
    page.goto(f"{served}/compare")
    assert page.locator("#pick-a option").count() == 4  # the prompt and three campaigns
    assert page.locator("#pick-b").is_disabled()
    with page.expect_navigation():
        page.select_option("#pick-a", pair["a"])  # the script reloads with A's suite
    offered = [o.get_attribute("value") for o in page.locator("#pick-b option").all()]
    assert offered == ["", pair["b"]]  # not A itself, not the other suite's campaign
    page.select_option("#pick-b", pair["b"])
    with page.expect_navigation():
        page.click("#compare-form button[type=submit]")
    expected = service.compare(pair["a"], pair["b"], seed=0, resamples=2_000)
    assert expected.comparison is not None
    assert int(page.text_content("#paired") or 0) == expected.paired
    rows = page.locator("#forest g.row")
    assert rows.count() == len(expected.comparison.locales) + 1
    for entry in expected.comparison.locales:
        row = page.locator(f"#forest g.row[data-locale='{entry.locale}']")
        x1 = float(row.locator("line.interval").get_attribute("x1") or 0)
        x2 = float(row.locator("line.interval").get_attribute("x2") or 0)
        cx = float(row.locator("circle").get_attribute("cx") or 0)
        assert x1 <= cx <= x2
    overall = expected.comparison.overall
    assert int(page.text_content("#a-only") or 0) == overall.a_pass_b_fail
    assert int(page.text_content("#b-only") or 0) == overall.a_fail_b_pass
    assert page.locator("#flips tbody tr").count() == len(expected.comparison.flips)
    assert "2,000" in (page.text_content(".legend") or "")
    assert offsite == []
    page.close()
