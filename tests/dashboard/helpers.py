"""Helpers of the dashboard tests: the app over the real database, campaigns, studies.

The app is the real ASGI application on the test's migrated database (SQLite
file or the run's PostgreSQL server), driven over HTTP by Starlette's test
client; the browser tests serve it with uvicorn and open it in Debian's
Chromium.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from benchledger.dashboard import DashboardSettings, create_app

#: A string no page may show unescaped: markup, both quotes, an ampersand.
HOSTILE = "<script>window.__xss=1</script>\"q\" 'a'&amp"
CHROMIUM = Path(os.environ.get("BENCHLEDGER_CHROMIUM", "/usr/bin/chromium"))
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


def client_for(db: Database, clock: Any, **settings: Any) -> TestClient:
    app = create_app(db, DashboardSettings(**settings), clock=clock)
    return TestClient(app, follow_redirects=False)


def make_campaign(
    service: CampaignService,
    *,
    cases: int = 3,
    prefix: str = "case",
    locales: tuple[str, ...] = ("de-DE", "fr-FR"),
    **policy: Any,
) -> str:
    """A campaign of ``cases`` x ``locales`` items, case keys ``{prefix}-0000``, ..."""
    suite = SuiteFactory(
        cases=[
            SuiteCaseFactory(key=f"{prefix}-{index:04d}", source_id=f"source/{index}")
            for index in range(cases)
        ]
    )
    policy_value = CampaignPolicyFactory(suite=suite, required_locales=locales, **policy)
    return service.create(policy_value, suite, max_attempts=3)


def result_for(claim: Any) -> dict[str, Any]:
    """A result the default verifier accepts for ``claim``'s item."""
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.8,
    }


def work_some(service: CampaignService, campaign_id: str, clock: LedgerClock) -> dict[str, Any]:
    """One success, one retryable failure, one failure for good, one live lease."""
    done = service.claim(campaign_id, "worker-a")
    assert done is not None
    service.complete(done, result_for(done))
    clock.advance(30)
    retry = service.claim(campaign_id, "worker-b")
    assert retry is not None
    service.fail(retry, "test.flaky", retryable=True, delay_seconds=120, detail=HOSTILE)
    final = service.claim(campaign_id, "worker-c")
    assert final is not None
    service.fail(final, "test.broken", retryable=False, detail="secret detail text")
    leased = service.claim(campaign_id, "worker-d", lease_seconds=300)
    assert leased is not None
    return {"done": done, "retry": retry, "final": final, "leased": leased}


def finish(service: CampaignService, campaign_id: str) -> None:
    """Every item succeeded and the report finalized."""
    from benchledger.workers.drivers import run_next_case, run_report_finalization

    def evaluate(claim: Any, heartbeat: Any) -> dict[str, Any]:
        return result_for(claim)

    while run_next_case(service, campaign_id, "finisher", evaluate, clock=service.clock):
        pass
    run_report_finalization(service, campaign_id, "finisher", clock=service.clock)


def make_study(service: StudyService, name: str = "sweep") -> tuple[str, str]:
    """A study with one trial, opened, one admitted run: (study id, run id)."""
    from benchledger.examples import study as ex

    owner = "olivia"
    service.bootstrap_owner(owner)
    material = service.register_material(
        owner, recipe={"lr": "3e-4"}, envelope=ex.ENVELOPE, trainer_id="my-trainer"
    )
    study = service.create(
        owner, name=name, limits=ex.LIMITS, policy=ex.example_policy(), request_key="create-0001"
    )
    trial = service.prepare_trial(
        owner, study.id, revision=1, material=material, replicate=1, request_key="trial-0001"
    )
    study = service.open_study(owner, study.id, revision=2, request_key="open-0001")
    admission = service.admit(
        owner,
        study.id,
        revision=study.revision,
        trial_id=trial.id,
        admission_epoch=study.admission_epoch,
        request_key="admit-0001",
    )
    return study.id, admission.run.id


def chromium_or_skip() -> Path:
    """Debian's Chromium; missing, the test is skipped, or fails under CI=true."""
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    message = f"no Chromium at {CHROMIUM}: install Debian's chromium package"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {message} (scripts/ensure-chromium.sh does)")
    pytest.skip(message)


#: A code in the campaign namespace, as an evaluator's dependency reports it.
BAD_CASE = "benchmark.campaign.dependency.tiny.bad_case"


def make_pair(service: CampaignService, clock: LedgerClock, cases: int = 6) -> dict[str, Any]:
    """Two campaigns of one suite (``baseline`` on model-a, ``challenger`` on model-b),
    worked to the end but one item of B failed for good; and a third of another suite.

    Scores: A's case i is 0.9 unless i % 3 == 0 (0.2); B's is 0.9 when i is even (0.3).
    Every attempt takes ``0.1 * n`` seconds (n counts the attempts of the campaign); the
    clock moves 10 s per attempt. B's last fr-FR case fails once (retried), then for good.
    """
    suite = SuiteFactory(
        cases=[
            SuiteCaseFactory(key=f"item-{index:04d}", source_id=f"source/{index}")
            for index in range(cases)
        ]
    )
    ids = {}
    for side, model, name in (("a", "model-a", "baseline"), ("b", "model-b", "challenger")):
        policy = CampaignPolicyFactory(
            suite=suite, candidate_model_id=model, candidate_model_version="2024-06"
        )
        ids[side] = service.create(policy, suite, max_attempts=3, name=name)
    other = SuiteFactory(cases=[SuiteCaseFactory(key="other-0000", source_id="source/x")])
    ids["other"] = service.create(
        CampaignPolicyFactory(suite=other, candidate_model_id="model-c"), other, max_attempts=3
    )
    durations: dict[str, list[float]] = {"a": [], "b": []}
    failing = f"item-{cases - 1:04d}"
    for side in ("a", "b"):
        attempt = 0
        while (claim := service.claim(ids[side], f"worker-{side}")) is not None:
            attempt += 1
            clock.advance(10)
            duration = round(0.1 * attempt, 3)
            durations[side].append(duration)
            index = int(claim.suite_case_key.split("-")[1])
            if side == "b" and claim.target_locale == "fr-FR" and claim.suite_case_key == failing:
                service.fail(
                    claim,
                    BAD_CASE,
                    retryable=claim.attempt == 1,
                    delay_seconds=0,
                    duration_seconds=duration,
                )
                continue
            if side == "a":
                score = 0.2 if index % 3 == 0 else 0.9
            else:
                score = 0.9 if index % 2 == 0 else 0.3
            result = {**result_for(claim), "score": score}
            service.complete(claim, result, duration_seconds=duration)
    return {**ids, "durations": durations, "failing": failing, "cases": cases}
