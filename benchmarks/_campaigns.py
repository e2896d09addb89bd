"""Campaign set-up shared by the campaign benchmarks: plans, results, fast-forward."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain.campaign_plan import CampaignPolicy, Suite, SuiteCase
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.domain.canonical import canonical_json, sha256_text

LOCALES = ("de-DE", "fr-FR", "ja-JP", "pt-BR")
VALID_UNTIL = 4_102_444_800.0


def plan(items: int) -> tuple[CampaignPolicy, Suite]:
    """A fresh policy (unique model id) and suite of ``items`` work items (4 locales)."""
    cases = max(1, items // len(LOCALES))
    suite = Suite(
        SuiteCase(
            key=f"case-{index:06d}",
            source_id=f"bench/{index}",
            source_revision="r1",
            source_text=f"Benchmark sentence number {index}.",
            source_locale="en-US",
        )
        for index in range(cases)
    )
    policy = CampaignPolicy(
        suite_sha256=suite.sha256,
        required_locales=LOCALES,
        valid_until=VALID_UNTIL,
        candidate_provider_id="bench",
        candidate_model_id=f"model-{uuid.uuid4().hex[:8]}",
        candidate_model_version="1",
        candidate_software_version="1",
        candidate_glossary_version="1",
        candidate_policy_version="1",
    )
    return policy, suite


def result(claim: ClaimedCase) -> dict[str, Any]:
    """A result the structural verifier accepts for ``claim``."""
    return {
        "target_locale": claim.target_locale,
        "suite": {
            "case_key": claim.suite_case_key,
            "suite_sha256": claim.job_payload["suite_sha256"],
        },
        "score": 0.5,
    }


def fast_forward(db: Database, campaign_id: str, remaining: int) -> None:
    """Mark all but the last ``remaining`` items succeeded (set-up only, plain SQL)."""
    text = canonical_json({"score": 0.5, "setup": True})
    with db.engine.begin() as connection:
        keep = sa.text(
            "SELECT work_id FROM benchmark_campaign_work WHERE campaign_id = :c"
            " ORDER BY target_locale DESC, suite_case_key DESC LIMIT :n"
        )
        kept = [row[0] for row in connection.execute(keep, {"c": campaign_id, "n": remaining})]
        statement = sa.text(
            "UPDATE benchmark_campaign_work SET status = 'succeeded', attempts = 1,"
            " history_from = 1,"  # set up without a history: it begins after attempt 1
            " result_json = :t, result_sha256 = :h"
            " WHERE campaign_id = :c AND NOT (work_id IN :kept)"
        ).bindparams(sa.bindparam("kept", expanding=True))
        connection.execute(
            statement, {"t": text, "h": sha256_text(text), "c": campaign_id, "kept": kept}
        )
    if db.dialect_name == "postgresql":
        # The set-up's updates left a dead index entry per finished item, ahead of the
        # remaining ones in claim order: vacuum, as the bare references' tables (inserted
        # finished) have none, and as autovacuum would on a long-lived campaign.
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("VACUUM ANALYZE benchmark_campaign_work")
