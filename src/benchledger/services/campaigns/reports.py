"""A campaign's one report: its finalization lease (claim, renew, complete, fail),
building and storing it once (``summarize``), and reading it back verified.

The lease writes go through :class:`~benchledger.repositories.campaigns.reports.ReportLeases`
on a Connection; the report itself through ``ReportRepository``. Every result
is re-verified before a report is claimed, built or returned.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import ReportStatus, WorkStatus, blocked
from benchledger.domain.campaign_archive import is_archived
from benchledger.domain.campaign_plan import CampaignPlan
from benchledger.domain.campaign_results import (
    ClaimedReport,
    ReportOutcome,
    check_result_size,
    result_identity,
)
from benchledger.domain.campaign_rules import StateInvalid, check_report_state, require, stored_time
from benchledger.domain.canonical import canonical_json, parse_canonical_json, sha256_text
from benchledger.errors import LedgerError
from benchledger.repositories.campaigns.gate import campaign_cancelled
from benchledger.repositories.campaigns.reports import ReportLeases, ReportRepository
from benchledger.repositories.campaigns.store import CampaignRepository
from benchledger.repositories.campaigns.work import WorkRepository
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.integrity import CampaignInspector
from benchledger.services.campaigns.outcomes import Results, failure_of, guarded, report_outcome
from benchledger.services.campaigns.plans import verify_binding

# -- the results a report is built from --------------------------------------------------


def verified_results(context: CampaignContext, session: Session, plan: CampaignPlan) -> Results:
    """Every result present and matching its digest, plus the binding and the verifier."""
    rows = WorkRepository(session).results(plan.campaign_id)
    expected = {(w.work_id, w.target_locale, w.suite_case_key) for w in plan.work()}
    if {(r.work_id, r.target_locale, r.suite_case_key) for r in rows} != expected or len(
        rows
    ) != len(expected):
        raise blocked(dom.STATE_INVALID)
    if any(row.status != WorkStatus.SUCCEEDED for row in rows):
        raise blocked(dom.INCOMPLETE)
    values: list[dict[str, Any]] = []
    digests: list[str] = []
    for row in rows:
        try:
            require(isinstance(row.result_json, str))
            require(row.result_sha256 == sha256_text(row.result_json))
            value = parse_canonical_json(row.result_json)
            require(isinstance(value, dict))
            _check_result(context, value, plan, row.target_locale, row.suite_case_key)
        except Exception:
            raise blocked(dom.STATE_INVALID) from None
        values.append(value)
        digests.append(row.result_sha256)
    return Results(tuple(values), tuple(digests))


def _check_result(
    context: CampaignContext,
    value: Mapping[str, Any],
    plan: CampaignPlan,
    locale: str,
    case_key: str,
) -> None:
    """A stored result: verifier accepts it and it is for its own item."""
    context.result_verifier.verify_result(value, plan.policy)
    if result_identity(value) != (locale, case_key):
        raise StateInvalid


def _verified_report(
    context: CampaignContext, row: Any, plan: CampaignPlan, results: Results, now: float
) -> dict[str, Any]:
    """The stored report, checked against its digest and binding; else ``report_invalid``."""
    try:
        require(row is not None and row.campaign_id == plan.campaign_id)
        require(row.policy_sha256 == plan.policy.sha256)
        require(row.results_sha256 == results.sha256)
        text = row.report_json
        require(isinstance(text, str) and text)
        check_result_size(text)
        require(row.report_sha256 == sha256_text(text))
        require(stored_time(row.created_at) <= now + context.clock_skew_seconds)
        report = parse_canonical_json(text)
        require(isinstance(report, dict))
        context.report_builder.verify(report, plan.policy, plan.suite, results.values)
    except Exception:
        raise blocked(dom.REPORT_INVALID) from None
    return dict(report)


# -- the report lease ----------------------------------------------------------------------


def finalization_required(context: CampaignContext, campaign_id: str) -> bool:
    """``CampaignService.report_finalization_required``."""
    with context.db.read() as session:
        CampaignRepository(session).snapshot()
        plan, row = context.plans.load(session, campaign_id)
        if is_archived(row):
            return False  # its report was final before its items were dropped
        work = WorkRepository(session)
        if work.has_unfinished(plan.campaign_id):
            return False
        verified_results(context, session, plan)
        reports = ReportRepository(session)
        state = check_report_state(
            reports.state(plan.campaign_id), work.attempts_range(plan.campaign_id)
        )
        if state.status == ReportStatus.SUCCEEDED:
            if not reports.has_report(plan.campaign_id):
                raise blocked(dom.REPORT_STATE_INVALID)
            return False
        return bool(state.status != ReportStatus.FAILED)


def claim_report(
    context: CampaignContext,
    campaign_id: str,
    worker_id: str,
    now: float | None,
    lease_seconds: float,
) -> ClaimedReport | None:
    """``CampaignService.claim_report``: results verified, then ``ReportLeases.lease``."""
    worker_id = dom.identifier(worker_id)
    current = context.now(now)
    lease = dom.duration(lease_seconds)
    plan = context.plans.cached(campaign_id)
    plan.policy.require_current(current)
    # The full result check reads every row: do it before taking the write lock.
    with context.db.read() as session:
        campaigns = CampaignRepository(session)
        campaigns.snapshot()
        if is_archived(campaigns.get(plan.campaign_id)):
            return None  # its report was final before its items were dropped
        verified_results(context, session, plan)
    token = secrets.token_urlsafe(32)
    with context.db.write_connection() as connection:
        reports = ReportLeases(connection)
        # Locked first: a concurrent claimer (PostgreSQL) waits here, then sees the
        # lease. The time is taken once the lock is held (SQLite: BEGIN IMMEDIATE), so
        # a wait for it never hands out a lease dated before the wait.
        locked = reports.state_locked(plan.campaign_id)
        if campaign_cancelled(connection, plan.campaign_id):
            return None  # an operator cancelled it: no report is finalized
        if now is None:
            current = context.now(None)
            plan.policy.require_current(current)
        expires_at = current + lease
        if reports.has_unfinished(plan.campaign_id):
            raise blocked(dom.INCOMPLETE)
        attempts_range = reports.attempts_range(plan.campaign_id)
        state = check_report_state(locked, attempts_range)
        if state.status == ReportStatus.LEASED and state.lease_expires_at <= current:
            reports.expire_lease(plan.campaign_id, current)
            context.touch(connection, plan.campaign_id, current)
            state = check_report_state(reports.state_locked(plan.campaign_id), attempts_range)
        if state.status in (ReportStatus.SUCCEEDED, ReportStatus.FAILED, ReportStatus.LEASED):
            return None
        if state.next_attempt_at > current:
            return None
        row = reports.lease(plan.campaign_id, current, worker_id, token, expires_at)
        if row is None:
            raise blocked(dom.REPORT_CLAIM_LOST)
        return ClaimedReport(
            campaign_id=plan.campaign_id,
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            lease_owner=worker_id,
            lease_token=token,
            lease_expires_at=expires_at,
        )


def renew_report(
    context: CampaignContext, claim: ClaimedReport, now: float | None, lease_seconds: float
) -> ClaimedReport:
    """``CampaignService.renew_report``: ``ReportLeases.renew`` of the live lease."""
    if not isinstance(claim, ClaimedReport):
        raise blocked(dom.REPORT_CLAIM_INVALID)
    return context.renew(ReportLeases, claim, now, lease_seconds, dom.REPORT_LEASE_LOST)


def complete_report(
    context: CampaignContext, claim: ClaimedReport, now: float | None
) -> ReportOutcome:
    """``CampaignService.complete_report``: ``ReportLeases.complete``, the report stored."""
    if not isinstance(claim, ClaimedReport):
        raise blocked(dom.REPORT_CLAIM_INVALID)
    current = context.now(now)
    plan = context.plans.cached(claim.campaign_id)
    plan.policy.require_current(current)
    with context.db.write_connection() as connection:
        reports = ReportLeases(connection)
        row = reports.complete(claim, current)
        if row is None:
            raise blocked(dom.REPORT_LEASE_LOST)
        if not reports.has_report(claim.campaign_id):
            raise blocked(dom.REPORT_MISSING)  # rolls the state change back
        context.touch(connection, claim.campaign_id, current)
        return report_outcome(row)


def fail_report(
    context: CampaignContext,
    claim: ClaimedReport,
    code: str,
    retryable: bool,
    delay_seconds: float,
    detail: str | None,
    now: float | None,
) -> ReportOutcome:
    """``CampaignService.fail_report``: the failure validated, then ``ReportLeases.fail``."""
    if not isinstance(claim, ClaimedReport):
        raise blocked(dom.REPORT_CLAIM_INVALID)
    failure = failure_of(
        claim,
        code,
        retryable,
        delay_seconds,
        detail,
        lambda: context.now(now),
        dom.REPORT_FAILURE_INVALID,
    )
    return context.record_failure(
        ReportLeases, claim, failure, dom.REPORT_LEASE_LOST, report_outcome
    )


# -- the report itself ---------------------------------------------------------------------


def summarize(
    context: CampaignContext,
    campaign_id: str,
    now: float | None,
    operation_guard: Callable[[], Any] | None,
) -> dict[str, Any]:
    """``CampaignService.summarize``: the stored report verified, or built and stored once."""
    current = context.now(now)
    guard = guarded(operation_guard)
    with context.db.read() as session:
        CampaignRepository(session).snapshot()
        plan, row = context.plans.load(session, campaign_id)
        if is_archived(row):  # no result left to verify the report against: load_report
            raise blocked(dom.ARCHIVED)
        plan.policy.require_current(current)
        verify_binding(session, plan, row)
        results = verified_results(context, session, plan)
        stored = ReportRepository(session).report(plan.campaign_id)
    if stored is not None:
        guard()
        report = _verified_report(context, stored, plan, results, current)
        _mark_report_stored(context, plan.campaign_id, current)
        return report
    guard()
    # The builder's own failure propagates as it is: the report
    # driver records it (``report_unexpected`` unless it carries a code) and
    # retries. What it built is checked here: a report that is not a JSON
    # object, fails its own verification or is too large is ``report_invalid``.
    report = context.report_builder.build(plan.policy, plan.suite, results.values)
    try:
        if not isinstance(report, dict):
            raise TypeError("a report is a JSON object")
        context.report_builder.verify(report, plan.policy, plan.suite, results.values)
        report_json = canonical_json(report)
        check_result_size(report_json)
    except LedgerError:
        raise  # the builder's own coded failure (e.g. DependencyFailed): the driver decides
    except Exception:
        raise blocked(dom.REPORT_INVALID) from None
    guard()
    with context.db.write() as session:
        work = WorkRepository(session)
        if work.has_unfinished(plan.campaign_id):
            raise blocked(dom.INCOMPLETE)
        if tuple(work.result_digests(plan.campaign_id)) != results.digests:
            raise blocked(dom.STATE_INVALID)
        reports = ReportRepository(session)
        inserted = reports.insert_report(
            plan.campaign_id,
            plan.policy.sha256,
            results.sha256,
            report_json,
            sha256_text(report_json),
            current,
        )
        stored = None if inserted else reports.report(plan.campaign_id)
        reports.mark_succeeded_unless_leased(plan.campaign_id, current)
        CampaignRepository(session).touch(plan.campaign_id, current)
    if stored is not None:  # another process stored it first: return theirs, verified
        return _verified_report(context, stored, plan, results, current)
    return dict(parse_canonical_json(report_json))


def _mark_report_stored(context: CampaignContext, campaign_id: str, now: float) -> None:
    with context.db.read() as session:
        state = ReportRepository(session).state(campaign_id)
    if state is not None and state.status in (ReportStatus.LEASED, ReportStatus.SUCCEEDED):
        return  # nothing to write: keep summarize of a finalized report read-only
    with context.db.write() as session:
        ReportRepository(session).mark_succeeded_unless_leased(campaign_id, now)


def load_report(
    context: CampaignContext, inspector: CampaignInspector, campaign_id: str, now: float | None
) -> dict[str, Any]:
    """``CampaignService.load_report``: the integrity audit's verified report."""
    return inspector.load_report(campaign_id, context.now(now))
