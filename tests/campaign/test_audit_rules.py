"""The audit's row rules and health's rules are pure: tested on plain rows, no database.

A batch proved clean at once (``clean_batch``) must be exactly a batch in which
the row-by-row rule (``check_item``) finds nothing; whatever one row shows, the
batch is refused whole and the row rule reports it.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchledger.adapters.verification import StructuralResultVerifier
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_audit import ItemPlan, ItemRow, ItemTally, check_item, clean_batch
from benchledger.domain.campaign_health import (
    HealthFacts,
    LastProgress,
    assess_health,
    report_state_inconsistent,
)
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.integrity import Problem, ProblemLog, result_seal
from benchledger.errors import CampaignBlocked

from .helpers import make_plan, plain_report_state

NOW = 1_000.0
LIMIT = NOW + 5


def _result(plan: CampaignPlan, locale: str, key: str, score: Any, **extra: Any) -> dict[str, Any]:
    suite = {"case_key": key, "suite_sha256": plan.suite.sha256}
    return {"target_locale": locale, "suite": suite, "score": score, **extra}


def _row(work_id: str, locale: str, key: str, text: str, **changes: Any) -> ItemRow:
    digest = sha256_text(text)
    row = ItemRow(
        work_id=work_id,
        target_locale=locale,
        suite_case_key=key,
        status="succeeded",
        attempts=1,
        max_attempts=3,
        next_attempt_at=NOW - 10,
        lease_owner=None,
        lease_token=None,
        lease_expires_at=None,
        last_error_code=None,
        last_error_detail_hash=None,
        result_json=text,
        result_sha256=digest,
        created_at=NOW - 20,
        updated_at=NOW - 10,
        result_seal=result_seal(work_id, 1, 3, digest),
    )
    return row._replace(**changes)


def _rows(plan: CampaignPlan, **extra: Any) -> list[ItemRow]:
    ordered = sorted(plan.work(), key=lambda w: (w.target_locale, w.suite_case_key))
    return [
        _row(
            w.work_id,
            w.target_locale,
            w.suite_case_key,
            canonical_json(_result(plan, w.target_locale, w.suite_case_key, index / 10, **extra)),
        )
        for index, w in enumerate(ordered)
    ]


def _audit(plan: CampaignPlan, default_shape: bool = True) -> tuple[ItemPlan, Any]:
    keys = [case.key for case in plan.suite.cases]
    items = ItemPlan.build(
        plan.campaign_id,
        plan.policy.sha256,
        plan.suite.sha256,
        plan.policy.required_locales,
        keys,
        default_shape=default_shape,
    )
    verifier = StructuralResultVerifier()

    def check(value: Any) -> None:
        verifier.verify_result(value, plan.policy)

    return items, check


def _by_rows(rows: list[ItemRow], items: ItemPlan, check: Any) -> tuple[ItemTally, ProblemLog]:
    tally, log = ItemTally(collect=True), ProblemLog()
    for row in rows:
        check_item(row, items, 3, LIMIT, log, tally, check)
    return tally, log


def _facts(tally: ItemTally) -> tuple[Any, ...]:
    return (
        tally.seen,
        tally.expected,
        tally.succeeded,
        tally.previous,
        tally.digest.hexdigest(),
        tally.texts,
        tally.locales,
        tally.scores,
        tally.passed,
    )


@pytest.mark.parametrize("default_shape", [True, False])
@pytest.mark.parametrize("extra", [{}, {"passed": True}, {"note": "kept as given"}])
def test_a_clean_batch_is_accounted_as_the_row_rule_would(
    default_shape: bool, extra: dict[str, Any]
) -> None:
    plan = make_plan(cases=3)
    items, check = _audit(plan, default_shape)
    rows = _rows(plan, **extra)
    expected, log = _by_rows(rows, items, check)
    assert not log
    tally = ItemTally(collect=True)
    assert clean_batch(rows[:4], items, 3, LIMIT, tally, check)
    assert clean_batch(rows[4:], items, 3, LIMIT, tally, check)
    assert _facts(tally) == _facts(expected)


def _tampered(plan: CampaignPlan, rows: list[ItemRow], case: str) -> list[ItemRow]:
    row = rows[2]
    text = row.result_json
    value = _result(plan, row.target_locale, row.suite_case_key, 0.5)

    def resealed(new_text: str, target: ItemRow = row) -> ItemRow:
        digest = sha256_text(new_text)
        seal = result_seal(target.work_id, target.attempts, target.max_attempts, digest)
        return target._replace(result_json=new_text, result_sha256=digest, result_seal=seal)

    changed = {
        "status": row._replace(status="pending"),
        "attempts": row._replace(attempts=2),
        "budget": row._replace(max_attempts=4),
        "future": row._replace(updated_at=LIMIT + 1),
        "lease": row._replace(lease_owner="w-1"),
        "created_after_updated": row._replace(created_at=row.updated_at + 1),
        "not_a_float": row._replace(created_at=1),
        "work_id": row._replace(work_id=rows[3].work_id),
        "hash": row._replace(result_sha256="0" * 64),
        "seal": row._replace(result_seal="0" * 64),
        "whitespace": resealed(text.replace(",", ", ")),
        "escaped": resealed(text.replace("score", "\\u0073core")),
        "score_out_of_range": resealed(canonical_json({**value, "score": 1.5})),
        "score_not_canonical": resealed(text.replace(":0.2,", ":0.20,")),
        "score_a_string": resealed(canonical_json({**value, "score": "0.5"})),
        "passed_not_bool": resealed(canonical_json({**value, "passed": 1})),
        "another_item": resealed(rows[3].result_json),
        "not_an_object": resealed("[1]"),
        "nan": resealed(text.replace(":0.2,", ":NaN,")),
    }
    if case == "split":
        # Two texts that are one object only together, then a text of two objects:
        # as many values as rows, each hashed and sealed, but no row's own text is JSON.
        first, second, third = (r.result_json for r in rows[1:4])
        return [
            rows[0],
            resealed(first[:-1] + ',"zz":[{}', rows[1]),
            resealed("{}]}", rows[2]),
            resealed(second + "," + third, rows[3]),
            *rows[4:],
        ]
    return [*rows[:2], changed[case], *rows[3:]]


CASES = [
    ("status", Problem.ITEM_STATE),  # a pending row with a result
    ("attempts", Problem.RESULT_SEAL),
    ("budget", Problem.ATTEMPT_BUDGET),
    ("future", Problem.FUTURE_TIME),
    ("lease", Problem.ITEM_STATE),
    ("created_after_updated", Problem.ITEM_STATE),
    ("not_a_float", None),  # an int time is a time: nothing to report, row by row
    ("work_id", Problem.ITEM_UNEXPECTED),
    ("hash", Problem.RESULT_HASH),
    ("seal", Problem.RESULT_SEAL),
    ("whitespace", Problem.RESULT_INVALID),
    ("escaped", Problem.RESULT_INVALID),
    ("score_out_of_range", Problem.RESULT_INVALID),
    ("score_not_canonical", Problem.RESULT_INVALID),
    ("score_a_string", Problem.RESULT_INVALID),
    ("passed_not_bool", Problem.RESULT_INVALID),
    ("another_item", Problem.RESULT_INVALID),
    ("not_an_object", Problem.RESULT_INVALID),
    ("nan", Problem.RESULT_INVALID),
    ("split", Problem.RESULT_INVALID),
]


@pytest.mark.parametrize("default_shape", [True, False])
@pytest.mark.parametrize(("case", "kind"), CASES)
def test_a_batch_with_a_tampered_row_goes_row_by_row(
    case: str, kind: Problem | None, default_shape: bool
) -> None:
    plan = make_plan(cases=3)
    items, check = _audit(plan, default_shape)
    rows = _tampered(plan, _rows(plan), case)
    tally = ItemTally(collect=True)
    assert not clean_batch(rows, items, 3, LIMIT, tally, check)
    assert _facts(tally) == _facts(ItemTally(collect=True))  # nothing accounted
    _, log = _by_rows(rows, items, check)
    assert (kind in log) if kind is not None else not log


def test_a_batch_repeating_the_previous_batch_s_last_item_goes_row_by_row() -> None:
    plan = make_plan(cases=3)
    items, check = _audit(plan)
    rows = _rows(plan)
    tally = ItemTally(collect=False)
    assert clean_batch(rows[:3], items, 3, LIMIT, tally, check)
    assert not clean_batch(rows[2:], items, 3, LIMIT, tally, check)


@pytest.mark.parametrize(
    ("status", "has_report", "complete", "inconsistent"),
    [
        ("pending", False, False, False),
        ("leased", False, False, True),
        ("pending", True, False, True),
        ("succeeded", True, True, False),
        ("succeeded", False, True, True),
        ("pending", True, True, True),
        ("leased", False, True, False),
    ],
)
def test_the_report_state_against_the_items(
    status: str, has_report: bool, complete: bool, inconsistent: bool
) -> None:
    assert report_state_inconsistent(status, has_report, complete) is inconsistent


def _health(**changes: Any) -> HealthFacts:
    values: dict[str, Any] = {
        "campaign_id": "benchmark-campaign-" + "a" * 64,
        "created_at": 100.0,
        "updated_at": 200.0,
        "max_attempts": 3,
        "work_count": 4,
        "counts": {**dom.empty_counts(), "pending": 4},
        "error_codes": (),
        "pending_due_at": 150.0,
        "retry_due_at": None,
        "first_lease_expiry": None,
        "last_lease_expiry": None,
        "state": plain_report_state(),
        "report_row": None,
        "policy_sha256": "b" * 64,
        "policy_current": True,
        "verified_ok": None,
    }
    values.update(changes)
    return HealthFacts(**values)


def test_health_rules_without_a_database() -> None:
    progress = LastProgress()
    found = assess_health(_health(), now=250.0, stale=600.0, skew=5.0, progress=progress)
    assert (found.status, found.reasons, found.report_ready) == ("healthy", (), False)
    assert progress.at == 200.0
    stalled = assess_health(_health(), now=2_000.0, stale=600.0, skew=5.0, progress=LastProgress())
    assert stalled.reasons == (dom.REASON_STALLED,)
    skewed = assess_health(_health(), now=150.0, stale=600.0, skew=5.0, progress=LastProgress())
    assert skewed.reasons == (dom.REASON_CLOCK_SKEW,)
    audited = assess_health(
        _health(verified_ok=False), now=250.0, stale=600.0, skew=5.0, progress=LastProgress()
    )
    assert audited.status == "blocked" and not audited.report_ready


def test_a_broken_invariant_is_refused_and_the_progress_seen_is_kept() -> None:
    progress = LastProgress()
    with pytest.raises(CampaignBlocked) as caught:
        assess_health(
            _health(state=plain_report_state(status="leased")),
            now=250.0,
            stale=600.0,
            skew=5.0,
            progress=progress,
        )
    assert caught.value.code == dom.STATE_INVALID and progress.at == 200.0
    with pytest.raises(CampaignBlocked):
        assess_health(
            _health(created_at=300.0), now=250.0, stale=600.0, skew=5.0, progress=LastProgress()
        )
