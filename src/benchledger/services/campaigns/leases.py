"""The work-item lease lifecycle: claim, renew, complete, fail.

Each is one write transaction on a Connection (``Database.write_connection``)
through :class:`~benchledger.repositories.campaigns.leases.WorkLeases`, whose
statements are built once at import (``Prebuilt``): a claim is one statement,
``WorkLeases.claim`` (the expiry sweep and the lease of the next due item), a
renewal, a completion and a failure one compare-and-set ``UPDATE`` each.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import sqlalchemy as sa

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    Outcome,
    check_result_size,
    encode_result,
    result_identity,
)
from benchledger.domain.canonical import sha256_text
from benchledger.repositories.campaigns.gate import OPEN as OPEN_GATE
from benchledger.repositories.campaigns.gate import (
    RATE_WINDOW_SECONDS,
    claim_gate,
    record_claim,
)
from benchledger.repositories.campaigns.leases import WorkLeases
from benchledger.repositories.campaigns.limit_groups import LimitGroupRepository
from benchledger.repositories.campaigns.throttles import throttle as throttle_item
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.outcomes import case_outcome, failure_of

#: A PostgreSQL claim statement that took longer than this, or than this share of
#: the lease, waited for a lock: its lease is dated again from when it returned
#: (see ``claim``). Below both, the lease loses less than its hundredth.
LOCK_WAIT_SECONDS: Final = 0.01
LOCK_WAIT_SHARE: Final = 0.01


def claim(
    context: CampaignContext,
    campaign_id: str,
    worker_id: str,
    now: float | None,
    lease_seconds: float,
) -> ClaimedCase | None:
    """``CampaignService.claim``: sweep expired leases and lease the next due item."""
    worker_id = dom.identifier(worker_id)
    current = context.now(now)
    lease = dom.duration(lease_seconds)
    token = secrets.token_urlsafe(32)
    plan = context.plans.cached(campaign_id)
    with context.db.write_connection() as connection:
        # SQLite: the write lock is held once this is entered (BEGIN IMMEDIATE), so the
        # time taken now is after any wait for it.
        if now is None:
            current = context.now(None)
        plan.policy.require_current(current)
        work = WorkLeases(connection)
        expires_at = current + lease
        # One statement: expired leases released (or taken over) and the next due item
        # leased, from a campaign neither cancelled nor capped.
        row, swept = work.claim(plan.campaign_id, current, worker_id, token, expires_at)
        if swept:
            context.touch(connection, plan.campaign_id, current)
        later = current
        if row is not None and now is None and context.db.dialect_name != "sqlite":
            # PostgreSQL: the statement may have waited for a lock (an operator's, say).
            later = context.now(None)
        if row is None:
            # Nothing due, or the campaign has a gate: cancelled (nothing), or capped,
            # itself or its limit group (their rows locked, then live leases and the
            # last minute's usage counted).
            gate = claim_gate(connection, plan.campaign_id)
            if gate is OPEN_GATE or not gate.open:
                return None
            if now is None and context.db.dialect_name != "sqlite":
                current = context.now(None)  # after any wait for the rows' locks
                plan.policy.require_current(current)
                expires_at = current + lease
            row = work.lease_next_gated(
                plan.campaign_id,
                current,
                worker_id,
                token,
                expires_at,
                gate=gate,
                since=current - RATE_WINDOW_SECONDS,
            )
            if row is None:
                return None
            record_claim(connection, plan.campaign_id, gate, current)
        claimed = ClaimedCase(
            work_id=row.work_id,
            campaign_id=plan.campaign_id,
            target_locale=row.target_locale,
            suite_case_key=row.suite_case_key,
            job_payload=plan.job_payload(row.target_locale, row.suite_case_key),
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            lease_owner=worker_id,
            lease_token=token,
            lease_expires_at=expires_at,
            throttles=row.throttles,
        )
        if later - current > max(LOCK_WAIT_SECONDS, lease * LOCK_WAIT_SHARE):
            # It waited: the lease runs from when it returned, never from before the wait.
            plan.policy.require_current(later)
            if not work.renew(claimed, current, later + lease):
                raise blocked(dom.STATE_INVALID)  # our own row, locked by this transaction
            claimed = attrs.evolve(claimed, lease_expires_at=later + lease)
        return claimed


def renew(
    context: CampaignContext, claim: ClaimedCase, now: float | None, lease_seconds: float
) -> ClaimedCase:
    """``CampaignService.renew``: ``WorkLeases.renew`` of the claim's live lease."""
    if not isinstance(claim, ClaimedCase):
        raise blocked(dom.CLAIM_INVALID)
    return context.renew(WorkLeases, claim, now, lease_seconds, dom.LEASE_LOST)


def _duration(value: Any) -> float | None:
    """The evaluator's measured duration: None, or seconds in [0, 1 year] (a heartbeat
    may keep a case running past any lease), else ``duration_invalid``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise blocked(dom.DURATION_INVALID)
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        raise blocked(dom.DURATION_INVALID) from None
    if not (math.isfinite(seconds) and 0 <= seconds <= dom.MAX_STALE_SECONDS):
        raise blocked(dom.DURATION_INVALID)
    return seconds


@attrs.frozen
class CheckedResult:
    """A completion's result, checked and encoded, ready to write under its lease."""

    claim: ClaimedCase
    text: str
    digest: str
    duration: float | None
    cost: int
    plan: CampaignPlan


def checked_result(
    context: CampaignContext,
    claim: ClaimedCase,
    result: Mapping[str, Any],
    duration_seconds: float | None,
    cost_units: int,
) -> CheckedResult:
    """The checks of a completion before its transaction: the claim, the duration, the
    cost, the verifier (``result_invalid``), the identity (``result_mismatch``), the size."""
    if not isinstance(claim, ClaimedCase):
        raise blocked(dom.CLAIM_INVALID)
    duration = _duration(duration_seconds)
    cost = Outcome(result, cost_units).cost_units
    value, text = encode_result(result)
    plan = context.plans.cached(claim.campaign_id)
    try:
        context.result_verifier.verify_result(value, plan.policy)
    except Exception:
        raise blocked(dom.RESULT_INVALID) from None
    if result_identity(value) != (claim.target_locale, claim.suite_case_key):
        raise blocked(dom.RESULT_MISMATCH)
    check_result_size(text)
    return CheckedResult(claim, text, sha256_text(text), duration, cost, plan)


def write_completion(
    connection: sa.Connection, checked: CheckedResult, current: float
) -> sa.Row[Any] | None:
    """``WorkLeases.complete`` of one checked result (``None``: its lease is not live), and
    its reported cost counted against the campaign's limit group."""
    return write_completions(connection, [checked], current)[0]


def write_completions(
    connection: sa.Connection, checked: Sequence[CheckedResult], current: float
) -> list[sa.Row[Any] | None]:
    """``WorkLeases.complete_many`` of checked results, in order (``None`` for one whose
    lease is not live), and the cost of each written one counted against its campaign's
    limit group."""
    rows = WorkLeases(connection).complete_many(
        [(entry.claim, entry.text, entry.digest, entry.duration) for entry in checked], current
    )
    costly = [e for e, row in zip(checked, rows, strict=True) if row is not None and e.cost]
    if costly:
        groups = LimitGroupRepository(connection)
        for entry in costly:
            group = groups.group_of(entry.claim.campaign_id)
            if group is not None:
                groups.add_cost(group, current, entry.cost)
    return rows


def complete(
    context: CampaignContext,
    claim: ClaimedCase,
    result: Mapping[str, Any],
    now: float | None,
    duration_seconds: float | None = None,
    cost_units: int = 0,
) -> CaseOutcome:
    """``CampaignService.complete``: the result checked, then ``WorkLeases.complete`` (and
    a reported cost counted against the campaign's limit group)."""
    checked = checked_result(context, claim, result, duration_seconds, cost_units)
    current = context.now(now)
    checked.plan.policy.require_current(current)
    with context.db.write_connection() as connection:
        row = write_completion(connection, checked, current)
        if row is None:
            raise blocked(dom.LEASE_LOST)
        context.touch(connection, claim.campaign_id, current)
        return case_outcome(row)


def fail(
    context: CampaignContext,
    claim: ClaimedCase,
    code: str,
    retryable: bool,
    delay_seconds: float,
    detail: str | None,
    now: float | None,
    duration_seconds: float | None = None,
) -> CaseOutcome:
    """``CampaignService.fail``: the failure validated, then ``WorkLeases.fail``."""
    if not isinstance(claim, ClaimedCase):
        raise blocked(dom.CLAIM_INVALID)
    duration = _duration(duration_seconds)
    failure = failure_of(
        claim,
        code,
        retryable,
        delay_seconds,
        detail,
        lambda: context.now(now),
        dom.FAILURE_INVALID,
    )
    return context.record_failure(
        WorkLeases, claim, failure, dom.LEASE_LOST, case_outcome, duration_seconds=duration
    )


def throttle(
    context: CampaignContext,
    claim: ClaimedCase,
    code: str,
    retry_after: float,
    now: float | None,
    duration_seconds: float | None = None,
) -> CaseOutcome:
    """``CampaignService.throttle``: hand the item back, due in ``retry_after`` seconds,
    without spending its attempt (within its throttle budget); one transaction with the
    attempt's history row."""
    if not isinstance(claim, ClaimedCase):
        raise blocked(dom.CLAIM_INVALID)
    duration = _duration(duration_seconds)
    code = dom.identifier(code)
    if not dom.is_error_code(code):
        raise blocked(dom.FAILURE_INVALID)
    delay = dom.duration(retry_after, allow_zero=True)
    current = context.now(now)
    next_at = min(current + delay, dom.MAX_TIMESTAMP)
    with context.db.write_connection() as connection:
        row = throttle_item(connection, claim, current, next_at, dom.throttled_code(code), duration)
        if row is None:
            raise blocked(dom.LEASE_LOST)
        context.touch(connection, claim.campaign_id, current)
        return case_outcome(row)
