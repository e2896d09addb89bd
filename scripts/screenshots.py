#!/usr/bin/env python3
"""Screenshots of every dashboard page, for docs/dashboard.md.

    .venv/bin/python scripts/screenshots.py [--db demo.db] [--out docs/images]

Runs the demo into the database when it has no campaign yet, runs two named
campaigns of one suite to their end in this process (a baseline and a
``-lite`` challenger, whose ja-JP items fail for good) for the results and
compare pages, starts one more campaign with two real worker processes
(``campaign work``, slow example evaluator) so that a campaign page shows
live leases and retries, serves the dashboard on a free loopback port, and
photographs each page in Debian's
headless Chromium (``/usr/bin/chromium``) through Playwright. The workers
are interrupted afterwards (Ctrl-C: nothing is lost).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from benchledger.dashboard import DashboardSettings, create_app
from benchledger.db import Database
from benchledger.examples import example_policy, example_suite
from benchledger.services.campaigns import CampaignService
from benchledger.workers.drivers import run_next_case

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_to_the_end(service: CampaignService, campaign_id: str) -> None:
    """Every item claimed and evaluated until none is due (retries due at once); each
    evaluation takes 5 ms, so the duration percentiles have something to show."""
    from benchledger.examples.evaluator import WORK_MS_ENV, evaluate

    os.environ.setdefault(WORK_MS_ENV, "5")
    while run_next_case(service, campaign_id, "screenshots", evaluate, retry_base_seconds=0):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="demo.db")
    parser.add_argument("--out", default="docs/images")
    args = parser.parse_args()
    url = f"sqlite:///{Path(args.db).resolve()}"
    if not Path(args.db).exists():
        subprocess.run(
            [str(Path(sys.executable).with_name("benchledger")), "--url", url, "demo"], check=True
        )
    # A campaign in progress: live leases, a retry queue, completions per minute.
    suite = example_suite(cases=150)
    policy = example_policy(suite, candidate_model_id="mt-screenshot-lite")
    database = Database(url)
    service = CampaignService(database)
    campaign_id = service.create(policy, suite, max_attempts=3, name="live screenshot run")
    # Two finished campaigns of one suite: the results page and the compare page.
    pair_suite = example_suite(cases=40)
    pair = {}
    for side, model, name in (
        ("a", "mt-screenshot-base", "baseline"),
        ("b", "mt-screenshot-lite", "lite challenger"),
    ):
        pair_policy = example_policy(pair_suite, candidate_model_id=model)
        pair[side] = service.create(pair_policy, pair_suite, max_attempts=3, name=name)
        run_to_the_end(service, pair[side])
    database.dispose()
    workers = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("benchledger")),
            "--url",
            url,
            "campaign",
            "work",
            campaign_id,
            "--workers",
            "2",
            "--evaluator",
            "benchledger.examples.evaluator:evaluate",
            "--retry-base-seconds",
            "30",
            "--no-progress",
        ],
        env={**os.environ, "BENCHLEDGER_EXAMPLE_WORK_MS": "150"},
        stderr=subprocess.DEVNULL,
    )
    time.sleep(25)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(url, DashboardSettings()), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/api/studies")
            study_id = page.evaluate("() => JSON.parse(document.body.innerText)")["studies"][0][
                "id"
            ]
            shots = {
                "dashboard-campaigns.png": "/campaigns?order=newest",
                "dashboard-campaign.png": f"/campaigns/{campaign_id}",
                "dashboard-results.png": f"/campaigns/{pair['b']}/results?limit=15",
                "dashboard-compare.png": f"/compare?a={pair['a']}&b={pair['b']}",
                "dashboard-studies.png": "/studies",
                "dashboard-study.png": f"/studies/{study_id}",
            }
            for name, path in shots.items():
                page.goto(base + path)
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(out / name), full_page=True)
                print(out / name)
            browser.close()
    finally:
        workers.send_signal(signal.SIGINT)
        workers.wait(timeout=60)
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    main()
