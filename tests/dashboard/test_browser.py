"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright.

- while real worker processes (``benchledger campaign work``) drain a campaign,
  the open campaign page's counts and progress bar follow the database without
  a reload;
- a study page's budget bars show the study's numbers;
- a hostile study name renders as text and runs nothing.

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

from .helpers import CHROMIUM_ARGS, HOSTILE, chromium_or_skip, make_campaign, make_study

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
