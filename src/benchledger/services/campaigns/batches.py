"""Many items per statement and per transaction: batched claims, group-committed results.

``CampaignService.claim_batch`` leases up to ``n`` due items in one statement
(``WorkLeases.claim_batch``, each lease its own token); ``complete_batch``
writes many completions in one write transaction, each still a compare-and-set
on its own live lease, so a stale one fails alone (``lease_lost``) and the
others commit. A worker's lanes use them through a buffer and a committer
(:mod:`benchledger.workers.batching`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, Final

import attrs
import sqlalchemy as sa

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_results import CaseOutcome, ClaimedCase, Completion
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.gate import OPEN as OPEN_GATE
from benchledger.repositories.campaigns.gate import claim_gate
from benchledger.repositories.campaigns.leases import WorkLeases
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.leases import (
    LOCK_WAIT_SECONDS,
    LOCK_WAIT_SHARE,
    CheckedResult,
    checked_result,
    claim,
    renew,
    write_completions,
)
from benchledger.services.campaigns.outcomes import case_outcome

#: The most items one batched claim leases.
MAX_CLAIM_BATCH: Final = 256


def claim_batch(
    context: CampaignContext,
    campaign_id: str,
    worker_id: str,
    n: int,
    now: float | None,
    lease_seconds: float,
) -> list[ClaimedCase]:
    """``CampaignService.claim_batch``: up to ``n`` due items leased in one statement.

    A campaign with a gate (cancelled, or capped: itself or its limit group) leases
    through :func:`claim`, one at a time, so its caps hold for every lease.
    """
    _check_batch_size(n)
    if n == 1:
        one = claim(context, campaign_id, worker_id, now, lease_seconds)
        return [] if one is None else [one]
    worker_id = dom.identifier(worker_id)
    current = context.now(now)
    request = _ClaimRequest(campaign_id, worker_id, n, dom.duration(lease_seconds))
    plan = context.plans.cached(campaign_id)
    with context.db.write_connection() as connection:
        if now is None:
            current = context.now(None)  # after any wait for SQLite's write lock
        plan.policy.require_current(current)
        rows, gated = _lease_batch(context, connection, request, plan.campaign_id, current)
        if not rows and not gated:
            return []
    if not rows:  # capped: one lease at a time, under the gate's locks
        one = claim(context, campaign_id, worker_id, now, lease_seconds)
        return [] if one is None else [one]
    return _claimed(context, request, rows, current, now)


def _check_batch_size(n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLAIM_BATCH:
        raise blocked(dom.WORKER_SETTING_INVALID)


@attrs.frozen
class _ClaimRequest:
    """A batched claim's checked arguments, and the token its leases share."""

    campaign_id: str
    worker_id: str
    n: int
    lease: float
    token: str = attrs.field(factory=lambda: secrets.token_urlsafe(32))


def _lease_batch(
    context: CampaignContext,
    connection: sa.Connection,
    request: _ClaimRequest,
    campaign_id: str,
    current: float,
) -> tuple[Sequence[Any], bool]:
    """The batched claim's statement in the caller's transaction: the rows leased, and
    whether none was because the campaign has a gate that is open (capped: the caller
    leases one at a time through :func:`claim`)."""
    work = WorkLeases(connection)
    expires_at = current + request.lease
    rows, swept = work.claim_batch(
        campaign_id, current, request.worker_id, request.token, expires_at, request.n
    )
    if swept:
        context.touch(connection, campaign_id, current)
    if rows:
        return rows, False
    gate = claim_gate(connection, campaign_id)
    return rows, gate is not OPEN_GATE and gate.open


def _claimed(
    context: CampaignContext,
    request: _ClaimRequest,
    rows: Sequence[Any],
    current: float,
    now: float | None,
) -> list[ClaimedCase]:
    """The leased rows as claims; renewed when their transaction waited for a lock."""
    plan = context.plans.cached(request.campaign_id)
    expires_at = current + request.lease
    claims = [
        ClaimedCase(
            work_id=row.work_id,
            campaign_id=plan.campaign_id,
            target_locale=row.target_locale,
            suite_case_key=row.suite_case_key,
            job_payload=plan.job_payload(row.target_locale, row.suite_case_key),
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            lease_owner=request.worker_id,
            lease_token=row.lease_token,
            lease_expires_at=expires_at,
            throttles=row.throttles,
        )
        for row in rows
    ]
    if now is None and context.db.dialect_name != "sqlite":
        later = context.now(None)
        if later - current > max(LOCK_WAIT_SECONDS, request.lease * LOCK_WAIT_SHARE):
            # It waited for a lock: each lease runs from now, never from before the wait.
            claims = [renew(context, claimed, later, request.lease) for claimed in claims]
    return claims


#: The most completions one group commit writes.
MAX_COMPLETION_BATCH: Final = 1024


def complete_batch(
    context: CampaignContext, completions: Sequence[Completion], now: float | None
) -> list[CaseOutcome | CampaignBlocked]:
    """``CampaignService.complete_batch``: each completion checked (its refusal is its own
    entry), then every checked one written in one transaction; an entry whose lease is no
    longer live is ``lease_lost`` and writes nothing, the others commit."""
    current = context.now(now)
    outcomes, checked = _checked_completions(context, completions, current)
    if not checked:
        return outcomes
    with context.db.write_connection() as connection:
        _write(context, connection, outcomes, checked, current)
    return outcomes


def complete_and_claim(
    context: CampaignContext,
    completions: Sequence[Completion],
    campaign_id: str,
    worker_id: str,
    n: int,
    now: float | None,
    lease_seconds: float,
) -> tuple[list[CaseOutcome | CampaignBlocked], list[ClaimedCase]]:
    """``CampaignService.complete_and_claim``: :func:`complete_batch`, and in the same
    transaction :func:`claim_batch`'s lease of up to ``n`` due items: one commit for both.

    Its arguments are checked first (a refusal writes nothing). Then the claim never
    costs a completion: it leases nothing (the caller's own claims will meet the
    reason) when the campaign's policy is no longer current, or the campaign has a
    gate (cancelled, or capped: each lease is then taken one at a time, under the
    caps).
    """
    _check_batch_size(n)
    current = context.now(now)
    request = _ClaimRequest(campaign_id, dom.identifier(worker_id), n, dom.duration(lease_seconds))
    plan = context.plans.cached(campaign_id)
    outcomes, checked = _checked_completions(context, completions, current)
    rows: Sequence[Any] = ()
    with context.db.write_connection() as connection:
        claimed_at = context.now(None) if now is None else current  # after any lock wait
        if checked:
            _write(context, connection, outcomes, checked, current)
        if plan.policy.is_current(claimed_at):
            rows, _ = _lease_batch(context, connection, request, plan.campaign_id, claimed_at)
    claims = _claimed(context, request, rows, claimed_at, now) if rows else []
    return outcomes, claims


def _checked_completions(
    context: CampaignContext, completions: Sequence[Completion], current: float
) -> tuple[list[CaseOutcome | CampaignBlocked], dict[int, CheckedResult]]:
    """Each completion checked: the refusals in place (and ``lease_lost`` for the others,
    until their write says otherwise), and the checked ones by position."""
    if isinstance(completions, str | bytes) or not isinstance(completions, Sequence):
        raise blocked(dom.CLAIM_INVALID)
    if len(completions) > MAX_COMPLETION_BATCH:
        raise blocked(dom.WORKER_SETTING_INVALID)
    if not all(isinstance(completion, Completion) for completion in completions):
        raise blocked(dom.CLAIM_INVALID)  # a caller's mistake, not one item's refusal
    outcomes: list[CaseOutcome | CampaignBlocked] = []
    checked: dict[int, CheckedResult] = {}
    unwritten = blocked(dom.LEASE_LOST)  # one placeholder: each unwritten entry gets its own
    for index, completion in enumerate(completions):
        try:
            entry = checked_result(
                context,
                completion.claim,
                completion.result,
                completion.duration_seconds,
                completion.cost_units,
            )
            entry.plan.policy.require_current(current)
        except CampaignBlocked as refused:
            outcomes.append(refused)
            continue
        checked[index] = entry
        outcomes.append(unwritten)  # until its write says otherwise
    return outcomes, checked


def _write(
    context: CampaignContext,
    connection: sa.Connection,
    outcomes: list[CaseOutcome | CampaignBlocked],
    checked: dict[int, CheckedResult],
    current: float,
) -> None:
    """Write the checked completions in the caller's transaction; each written one's
    outcome in its place in ``outcomes``."""
    touched: set[str] = set()
    rows = write_completions(connection, list(checked.values()), current)
    for (index, entry), row in zip(checked.items(), rows, strict=True):
        if row is not None:
            outcomes[index] = case_outcome(row)
            touched.add(entry.claim.campaign_id)
        else:
            outcomes[index] = blocked(dom.LEASE_LOST)
    for campaign_id in touched:
        context.touch(connection, campaign_id, current)
