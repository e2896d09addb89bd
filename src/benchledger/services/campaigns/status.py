"""Campaign ``status`` and ``health``: the cheap reads an operator (or a dashboard) polls.

They cost the same at 100 items and at 100,000: they read the campaign row
(its attempt budget, work count and last audit), the stored policy (hashed,
parsed once per process), counts by status and by error code (index-only), a
few index seeks, the report rows by key and, once the campaign was audited, the
item outcomes recorded since (an index range cut at ``CHANGES_COUNTED``), in one read snapshot
(:func:`~benchledger.repositories.campaigns.reads.read_snapshot`). They check
every invariant those rows can show (counts add up to the work count, the
report state, the stored report's own sha256 and policy binding), but no
item's result: that is the integrity audit's
(:mod:`benchledger.services.campaigns.integrity`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from benchledger.domain import campaign as dom
from benchledger.domain import integrity as audit
from benchledger.domain.campaign import HealthStatus, ReportStatus, WorkStatus, blocked
from benchledger.domain.campaign_health import (
    HealthFacts,
    LastProgress,
    assess_health,
    audit_current,
    stored_float,
)
from benchledger.domain.campaign_labels import candidate_of
from benchledger.domain.campaign_plan import CampaignPolicy
from benchledger.domain.campaign_views import CampaignHealth, CampaignStatus
from benchledger.domain.canonical import CanonicalJsonError, sha256_text
from benchledger.domain.limit_groups import LimitGroup, LimitGroupUsage
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.limit_groups import LimitGroupRepository
from benchledger.repositories.campaigns.reads import CampaignReads, read_snapshot
from benchledger.services.campaigns.context import CampaignContext

_POLICY_CACHE_SIZE = 256


class CampaignGauges:
    """``status`` and ``health`` of a ``CampaignService``'s campaigns, with its cache of
    parsed stored policies."""

    def __init__(self, context: CampaignContext) -> None:
        self.context = context
        self._policies: dict[str, CampaignPolicy] = {}
        self._lock = threading.Lock()

    def policy(self, campaign_id: str, row: Any) -> CampaignPolicy:
        """The campaign's stored policy, hashed on every call (parsed once per process).

        ``policy_unregistered`` without a stored policy or suite; ``state_invalid``
        when the text is not its sha256, the suite is not the policy's or the
        counts disagree; ``policy_mismatch`` when the row names another policy.
        """
        if row.policy_json is None or row.stored_suite_sha256 is None:
            raise blocked(dom.POLICY_UNREGISTERED)
        if sha256_text(row.policy_json) != row.policy_sha256:
            raise blocked(dom.STATE_INVALID)
        policy = self._policies.get(row.policy_sha256)
        if policy is None:
            try:
                policy = CampaignPolicy.from_payload(audit.parse_stored_json(row.policy_json))
            except (CanonicalJsonError, CampaignBlocked):
                raise blocked(dom.STATE_INVALID) from None
            with self._lock:
                if len(self._policies) >= _POLICY_CACHE_SIZE:
                    self._policies.pop(next(iter(self._policies)))
                self._policies[row.policy_sha256] = policy
        if policy.campaign_id != campaign_id:
            raise blocked(dom.POLICY_MISMATCH)
        if policy.suite_sha256 != row.suite_sha256 or row.work_count != row.suite_case_count * len(
            policy.required_locales
        ):
            raise blocked(dom.STATE_INVALID)
        return policy

    # -- status ----------------------------------------------------------------------------------

    def status(self, campaign_id: Any) -> CampaignStatus:
        if not dom.is_campaign_id(campaign_id):
            raise blocked(dom.NOT_FOUND)
        with read_snapshot(self.context.db.engine) as connection:
            reads = CampaignReads(connection)
            row = reads.campaign(campaign_id)
            if row is None:
                raise blocked(dom.NOT_FOUND)
            policy = self.policy(campaign_id, row)
            counts = _counts(reads.unfinished_counts(campaign_id), row.work_count)
            errors = reads.error_counts(campaign_id)
            times = reads.next_due(campaign_id)
            state = reads.report_state(campaign_id)
            audit_state = _LastAudit.read(reads, campaign_id, row, state)
            waiting = _waiting_on_group(connection, row.limit_group, self.context.now(None))
        if not audit.report_state_ok(state, row.max_attempts):
            raise blocked(dom.REPORT_STATE_INVALID)
        complete = counts[WorkStatus.SUCCEEDED] == row.work_count
        items_due_at = min(
            (
                float(value)
                for value in (times.pending_due_at, times.retry_due_at, times.first_lease_expiry)
                if value is not None
            ),
            default=None,
        )
        return CampaignStatus(
            campaign_id=campaign_id,
            policy_sha256=policy.sha256,
            suite_sha256=policy.suite_sha256,
            valid_until=policy.valid_until,
            work_count=row.work_count,
            counts=counts,
            error_counts=errors,
            complete=complete,
            blocked=counts[WorkStatus.FAILED] > 0 or state.status == ReportStatus.FAILED,
            report_finalization={
                "status": state.status,
                "attempt": state.attempts,
                "max_attempts": state.max_attempts,
                "next_attempt_at": state.next_attempt_at,
                "error_code": state.last_error_code,
            },
            created_at=stored_float(row.created_at),
            updated_at=stored_float(row.updated_at),
            next_due_at=items_due_at if not complete else _report_due_at(state),
            verified_at=audit_state.verified_at,
            verified_ok=audit_state.verified_ok,
            verified_current=audit_state.current,
            changes_since_verified=audit_state.changes,
            name=row.name,
            candidate=candidate_of(row),
            throttled=sum(n for code, n in errors.items() if dom.is_throttle_code(code)),
            throttled_due_at=(
                None if times.throttled_due_at is None else stored_float(times.throttled_due_at)
            ),
            limit_group=row.limit_group,
            waiting_on_group=waiting,
            evaluator=row.evaluator,
            archived_at=None if row.archived_at is None else stored_float(row.archived_at),
        )

    # -- health ----------------------------------------------------------------------------------

    def health(self, campaign_id: Any, now: float, stale: float) -> CampaignHealth:
        check = _HealthCheck(self, campaign_id, now, stale)
        return check.run()


def _waiting_on_group(connection: sa.Connection, group: str | None, now: float) -> bool:
    """Whether the campaign's limit group holds its claims back now (a cap reached)."""
    if group is None:
        return False
    groups = LimitGroupRepository(connection)
    row = groups.get(group)
    if row is None:
        return False
    live, claims, cost = groups.usage(group, now)
    usage = LimitGroupUsage(
        LimitGroup(
            group, row.max_concurrent_leases, row.max_claims_per_minute, row.max_cost_per_minute
        ),
        live,
        claims,
        cost,
        (),
    )
    return usage.at_cap


def _counts(unfinished: Mapping[Any, int], work_count: int) -> dict[str, int]:
    """Items per status; succeeded are the work count less the unfinished ones.

    ``state_invalid`` when the unfinished items alone exceed the work count. (An
    item missing altogether is not visible here: the audit counts every item.)
    """
    counts = dom.empty_counts()
    counts.update(unfinished)
    if set(counts) != set(dom.STATUSES) or counts[WorkStatus.SUCCEEDED]:
        raise blocked(dom.STATE_INVALID)
    counts[WorkStatus.SUCCEEDED] = work_count - sum(counts.values())
    if counts[WorkStatus.SUCCEEDED] < 0:
        raise blocked(dom.STATE_INVALID)
    return counts


class _LastAudit:
    """The last integrity audit as the campaign row records it, and whether it is current.

    Costs one index-only range of the attempt history (item outcomes recorded
    after the audit, cut at ``CHANGES_COUNTED``) besides the rows status and
    health read anyway: O(1) in the campaign's size.
    """

    def __init__(self) -> None:
        self.verified_at: float | None = None
        self.verified_ok: bool | None = None
        self.current: bool | None = None
        self.changes: int | None = None

    @classmethod
    def read(cls, reads: CampaignReads, campaign_id: str, row: Any, state: Any) -> _LastAudit:
        found = cls()
        if row.verified_at is None:
            return found
        found.verified_at = stored_float(row.verified_at)
        found.verified_ok = bool(row.verified_ok)
        found.changes = reads.changes_since(campaign_id, found.verified_at)
        found.current = audit_current(
            found.verified_at,
            found.changes,
            row.updated_at,
            None if state is None else state.updated_at,
        )
        return found


def _report_due_at(state: Any) -> float | None:
    """When the report finalization of a complete campaign may next be claimed (or None)."""
    if state.status in dom.CLAIMABLE:
        return float(state.next_attempt_at)
    if state.status == ReportStatus.LEASED:
        return float(state.lease_expires_at)
    return None  # succeeded or failed: final


class _HealthCheck:
    """One health snapshot: the service reads the aggregates, the domain's rules judge them."""

    def __init__(self, gauges: CampaignGauges, campaign_id: Any, now: float, stale: float):
        self.gauges = gauges
        self.context = gauges.context
        self.campaign_id = campaign_id
        self.now = now
        self.stale = stale
        self.counts = dom.empty_counts()
        self.work_count = 0
        self.progress = LastProgress()
        self.last_audit = _LastAudit()
        # Reasons said beside a refusal (an unregistered campaign's stored report).
        self.also: list[str] = []
        self.throttled = 0
        self.throttled_due_at: float | None = None
        self.archived_at: float | None = None

    def result(self, status: str, reasons: Sequence[str], report_ready: bool) -> CampaignHealth:
        campaign_id = self.campaign_id if dom.is_campaign_id(self.campaign_id) else "invalid"
        return CampaignHealth(
            campaign_id=campaign_id,
            status=status,
            reasons=tuple(sorted(set(reasons))),
            counts=tuple(sorted(self.counts.items())),
            work_count=self.work_count,
            report_ready=report_ready,
            last_progress_at=self.progress.at,
            verified_at=self.last_audit.verified_at,
            verified_ok=self.last_audit.verified_ok,
            verified_current=self.last_audit.current,
            changes_since_verified=self.last_audit.changes,
            throttled=self.throttled,
            throttled_due_at=self.throttled_due_at,
            archived_at=self.archived_at,
        )

    def run(self) -> CampaignHealth:
        try:
            return self._run()
        except CampaignBlocked as error:
            if error.code in (dom.NOT_FOUND, dom.POLICY_UNREGISTERED):
                return self.result(HealthStatus.BLOCKED, [error.code, *self.also], False)
            return self.result(HealthStatus.BLOCKED, [dom.STATE_INVALID], False)
        except sa.exc.SQLAlchemyError:
            raise  # the database itself: not a finding about the campaign
        except Exception:
            return self.result(HealthStatus.BLOCKED, [dom.STATE_INVALID], False)

    def _run(self) -> CampaignHealth:
        campaign_id, now = self.campaign_id, self.now
        if not dom.is_campaign_id(campaign_id):
            raise blocked(dom.NOT_FOUND)
        with read_snapshot(self.context.db.engine) as connection:
            reads = CampaignReads(connection)
            row = reads.campaign(campaign_id)
            if row is None:
                raise blocked(dom.NOT_FOUND)
            state = reads.report_state(campaign_id)
            # Said even when the rows below do not add up.
            self.last_audit = _LastAudit.read(reads, campaign_id, row, state)
            if row.policy_json is None or row.stored_suite_sha256 is None:
                self._unregistered(reads, row)
            policy = self.gauges.policy(campaign_id, row)
            self.counts = _counts(reads.unfinished_counts(campaign_id), row.work_count)
            errors = reads.error_counts(campaign_id)
            times = reads.times(campaign_id)
            report_row = reads.report(campaign_id)
        self.work_count = row.work_count
        if row.archived_at is not None:
            self.archived_at = stored_float(row.archived_at)
        self.throttled = sum(n for code, n in errors.items() if dom.is_throttle_code(code))
        if times.throttled_due_at is not None:
            self.throttled_due_at = stored_float(times.throttled_due_at)
        facts = HealthFacts(
            campaign_id=campaign_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
            max_attempts=row.max_attempts,
            work_count=row.work_count,
            counts=self.counts,
            error_codes=tuple(errors),
            pending_due_at=times.pending_due_at,
            retry_due_at=times.retry_due_at,
            first_lease_expiry=times.first_lease_expiry,
            last_lease_expiry=times.last_lease_expiry,
            state=state,
            report_row=report_row,
            policy_sha256=policy.sha256,
            policy_current=policy.is_current(now),
            verified_ok=self.last_audit.verified_ok,
        )
        skew = self.context.clock_skew_seconds
        found = assess_health(facts, now, self.stale, skew, self.progress)
        return self.result(found.status, found.reasons, found.report_ready)

    def _unregistered(self, reads: CampaignReads, row: Any) -> None:
        """A campaign without its stored policy or suite (adopted from the legacy store):
        its counts come from its rows all the same, and a stored report is
        ``report_unverifiable`` (nothing to verify it against yet), not invalid.
        Raises ``policy_unregistered``."""
        if not (isinstance(row.work_count, int) and row.work_count > 0):
            raise blocked(dom.STATE_INVALID)
        self.counts = _counts(reads.unfinished_counts(self.campaign_id), row.work_count)
        self.work_count = row.work_count
        if reads.has_report(self.campaign_id):
            self.also.append(dom.REPORT_UNVERIFIABLE)
        raise blocked(dom.POLICY_UNREGISTERED)
