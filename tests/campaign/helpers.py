"""Helpers of the campaign tests: plans, results, table snapshots, raw SQL and plain rows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.services.campaigns import CampaignService
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory

T0 = 1_767_225_600.0  # the LedgerClock's default start
TABLES = (
    "benchmark_campaigns",
    "benchmark_campaign_work",
    "benchmark_campaign_reports",
    "benchmark_campaign_report_state",
    "benchmark_campaign_policies",
    "benchmark_campaign_suites",
    "benchmark_campaign_attempts",
)


def make_suite(cases: int = 3, prefix: str = "case") -> Suite:
    """A suite of ``cases`` kit-made cases with predictable keys (``case-0000``, ...)."""
    return SuiteFactory(
        cases=[
            SuiteCaseFactory(
                key=f"{prefix}-{index:04d}",
                source_id=f"source/{index}",
                source_text=f"Save your changes before leaving page {index}.",
            )
            for index in range(cases)
        ]
    )


def make_policy(
    suite: Suite, locales: tuple[str, ...] = ("de-DE", "fr-FR"), **changes: Any
) -> CampaignPolicy:
    """The kit's policy bound to ``suite``, with ``changes`` applied."""
    return CampaignPolicyFactory(**{"suite": suite, "required_locales": locales, **changes})


def make_plan(
    cases: int = 3, locales: tuple[str, ...] = ("de-DE", "fr-FR"), **changes: Any
) -> CampaignPlan:
    suite = make_suite(cases)
    return CampaignPlan(make_policy(suite, locales, **changes), suite)


def result_for(claim: ClaimedCase, score: float = 0.8, **extra: Any) -> dict[str, Any]:
    """A result the structural verifier accepts for ``claim``'s item."""
    result: dict[str, Any] = {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": score,
    }
    result.update(extra)
    return result


def snapshot(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every campaign table, in a stable order."""
    with db.engine.connect() as connection:
        return {
            table: sorted(
                tuple(row) for row in connection.execute(sa.text(f"SELECT * FROM {table}"))
            )
            for table in TABLES
        }


def execute(db: Database, statement: str, **params: Any) -> int:
    """Raw SQL in its own committed transaction (to tamper with stored state)."""
    with db.engine.begin() as connection:
        return connection.execute(sa.text(statement), params).rowcount


def work_row(db: Database, work_id: str) -> Any:
    with db.engine.connect() as connection:
        return connection.execute(
            sa.text("SELECT * FROM benchmark_campaign_work WHERE work_id = :w"), {"w": work_id}
        ).one()


def report_state(db: Database, campaign_id: str) -> Any:
    with db.engine.connect() as connection:
        return connection.execute(
            sa.text("SELECT * FROM benchmark_campaign_report_state WHERE campaign_id = :c"),
            {"c": campaign_id},
        ).one()


def complete_all(service: CampaignService, campaign_id: str, worker: str = "w-1") -> int:
    done = 0
    while (claim := service.claim(campaign_id, worker)) is not None:
        service.complete(claim, result_for(claim))
        done += 1
    return done


def plain_report_state(**changes: Any) -> SimpleNamespace:
    """A consistent report-state row (pending, never attempted), no database: with
    ``changes`` applied, what the pure report-state rules are tested on."""
    values: dict[str, Any] = {
        "status": "pending",
        "lease_owner": None,
        "lease_token": None,
        "lease_expires_at": None,
        "attempts": 0,
        "max_attempts": 3,
        "last_error_code": None,
        "last_error_detail_hash": None,
        "next_attempt_at": 100.0,
        "created_at": 100.0,
        "updated_at": 100.0,
    }
    values.update(changes)
    return SimpleNamespace(**values)
