"""The drivers: one leased attempt at a case or at the report, over one skeleton.

Both run the same steps (``_drive``): claim, keep the lease (a
:class:`~benchledger.workers.lease.LeaseKeeper`: the check before work, the
background heartbeat), do the work, write its completion, and record a failure
when either went wrong. What differs (what is claimed and renewed, the work,
which errors are the attempt's failure) is a ``_Job``.

``run_next_case`` claims at most one item, evaluates it while a heartbeat keeps
the lease alive, and records the outcome: the result on success, or a failure
with this mapping of errors to codes and retryability:

- :class:`~benchledger.errors.Throttled` (or a retryable ``DependencyFailed`` with a
  ``retry_after``) -> handed back without spending the attempt
  (``CampaignService.throttle``), due after ``retry_after`` or the throttle backoff,
  recorded as ``benchmark.campaign.throttled.<code>``;
- :class:`~benchledger.errors.DependencyFailed` -> ``benchmark.campaign.dependency.<code>``
  (``dependency_failed`` when that would exceed 128 characters), retryable as declared;
- ``validity_expired`` (policy expired mid-run) -> that code, not retryable;
- another :class:`~benchledger.errors.LedgerError` -> its own code, retryable if it
  says so (a boolean ``retryable`` attribute), else not;
- any other exception -> ``benchmark.campaign.unexpected``, retryable.

Other campaign errors (``lease_lost``, ``operation_guard_failed``) propagate:
the worker no longer holds the item, which comes back when its lease expires.
A result the service rejects (``result_invalid``, ``result_mismatch``,
``input_invalid``) is recorded as a retryable failure at once, instead of
leaving the item leased until its lease expires.

Database faults (disconnects, restarts, refused connections, serialization
failures, lock timeouts) are infrastructure, never an item's failure: the
drivers and :class:`~benchledger.workers.loop.Worker` ride them out within an outage budget
(:class:`~benchledger.faults.OutagePolicy`, five minutes by default) and then
stop with :class:`~benchledger.faults.DatabaseUnavailable`
(``ledger.database.unavailable``).
"""

from __future__ import annotations

import abc
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import attrs

from benchledger import tracing
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
    outcome_parts,
)
from benchledger.errors import CampaignBlocked, DependencyFailed, LedgerError
from benchledger.faults import DatabaseUnavailable, Outage, OutagePolicy, is_transient
from benchledger.ports.campaign import Evaluate
from benchledger.services.campaigns import CampaignService
from benchledger.workers.lease import THREADS, Clock, LeaseKeeper, Runtime, outage_of
from benchledger.workers.options import DEFAULTS, OperationGuard, WorkerOptions

if TYPE_CHECKING:
    from benchledger.workers.batching import ClaimBuffer, Committer

C = TypeVar("C", ClaimedCase, ClaimedReport)
D = TypeVar("D")  # what the work hands its completion
R = TypeVar("R", CaseOutcome, ReportOutcome)

_RECORDED_REJECTIONS: Final = frozenset(
    {dom.RESULT_INVALID, dom.RESULT_MISMATCH, dom.INPUT_INVALID}
)

#: Report errors that are not the report's failure: the worker no longer holds it.
REPORT_LOST: Final = frozenset({dom.REPORT_LEASE_LOST, dom.REPORT_CLAIM_LOST})

#: The report driver refuses its settings with codes of its own.
_REPORT_REFUSALS: Final = {
    dom.RETRY_INVALID: dom.REPORT_RETRY_INVALID,
    dom.DEPENDENCY_INVALID: dom.REPORT_DEPENDENCY_INVALID,
}


@attrs.frozen
class DriverContext:
    """What a worker's attempts share: its service, campaign, id, clock, options and outage."""

    campaigns: CampaignService
    campaign_id: str
    worker_id: str
    clock: Clock
    options: WorkerOptions
    outage: Outage  # one budget for every call of the run
    runtime: Runtime = THREADS
    #: The lanes' shared claims and commits (a worker with several lanes; else None).
    buffer: ClaimBuffer | None = None
    committer: Committer | None = None


@attrs.frozen
class _Failure:
    """An attempt's failure, as it is recorded."""

    code: str
    retryable: bool
    delay_seconds: float
    detail: str | None
    #: A throttle: the item is handed back without spending its attempt (within budget).
    throttled: bool = False


class _Job(abc.ABC, Generic[C, D, R]):
    """What differs between an attempt at a case and one at the report (``_drive`` is the rest)."""

    #: The steps' names (an outage's log lines say which step met a fault).
    claiming: str
    completing: str
    failing: str
    #: Raised once the lease is gone.
    lost_code: str
    #: Whether the check before work skips writing a lease just granted.
    skip_fresh_lease: bool

    def __init__(self, context: DriverContext, interval: float) -> None:
        self.context = context
        self.lease = float(context.options.lease_seconds)
        self.interval = interval

    @abc.abstractmethod
    def claim(self, now: float) -> C | None:
        """Lease the next attempt, if one is due."""

    @abc.abstractmethod
    def renew(self, active: C, now: float) -> C:
        """Renew the lease."""

    @abc.abstractmethod
    def work(self, claim: C, keeper: LeaseKeeper) -> D:
        """The work, while the keeper's heartbeat runs."""

    @abc.abstractmethod
    def complete(self, active: C, done: D, now: float) -> R:
        """Write the work's completion."""

    @abc.abstractmethod
    def failure(self, error: BaseException, active: C, *, completing: bool) -> _Failure:
        """The attempt's failure; re-raises an error that is not (the lease is not ours)."""

    @abc.abstractmethod
    def fail(self, active: C, failure: _Failure, now: float) -> R:
        """Record the failure."""


def _drive(job: _Job[C, D, R]) -> R | None:
    """Claim, keep the lease, work, complete; record a failure. ``None``: nothing was due.

    Traced (:mod:`benchledger.tracing`): an attempt is one span, ``benchledger.case``
    (``benchledger.report``), with the children ``benchledger.claim``, the work
    (``benchledger.evaluate``, current while the evaluator runs, so its own spans
    nest under it; ``benchledger.summarize``) and ``benchledger.record`` (each
    completion or failure write). The attempt's span is started only once the
    claim has returned one, dated back to the claim's start, and the claim span
    is made then, from its start to its end: a claim that finds nothing due
    leaves no span at all (idle polling traces nothing), and a claim that raises
    is a ``benchledger.claim`` span of its own, with the error.
    """
    context = job.context
    riding = context.outage
    claim_started = tracing.now()
    try:
        claim = riding.call(job.claiming, lambda: job.claim(dom.timestamp(context.clock())))
    except BaseException as error:
        tracing.finished(
            tracing.CLAIM,
            claim_started,
            error=error,
            **{tracing.CAMPAIGN_ID: context.campaign_id, tracing.WORKER_ID: context.worker_id},
        )
        raise
    if claim is None:
        return None
    name = tracing.CASE if isinstance(claim, ClaimedCase) else tracing.REPORT
    with tracing.span(name, start_time=claim_started) as traced:
        tracing.finished(tracing.CLAIM, claim_started)
        if traced.is_recording():
            traced.set_attributes(
                {
                    tracing.CAMPAIGN_ID: claim.campaign_id,
                    tracing.ATTEMPT: claim.attempt,
                    tracing.WORKER_ID: context.worker_id,
                }
            )
            if isinstance(claim, ClaimedCase):
                traced.set_attributes(
                    {tracing.LOCALE: claim.target_locale, tracing.CASE_KEY: claim.suite_case_key}
                )
        keeper = LeaseKeeper(
            job.renew,
            claim,
            clock=context.clock,
            valid_until=riding.call(
                "policy read", lambda: context.campaigns.policy(context.campaign_id).valid_until
            ),
            lease_seconds=job.lease,
            interval=job.interval,
            operation_guard=context.options.operation_guard,
            outage=riding,
            lost_code=job.lost_code,
            runtime=context.runtime,
        )
        outcome: R | None = None
        try:
            # Check before any work: the policy is still valid, the host's operation
            # guard agrees, and the lease is ours, even if the work ends before the
            # first heartbeat.
            keeper.renew(before_work=job.skip_fresh_lease)
            with keeper:
                done = job.work(claim, keeper)
            keeper.raise_failure()
        except BaseException as error:
            failure = job.failure(error, keeper.active, completing=False)
        else:
            try:
                with tracing.span(tracing.RECORD):
                    outcome = keeper.write(
                        job.completing, lambda now: job.complete(keeper.active, done, now)
                    )
            except BaseException as error:
                failure = job.failure(error, keeper.active, completing=True)
        if outcome is None:
            with tracing.span(tracing.RECORD):
                outcome = keeper.write(
                    job.failing, lambda now: job.fail(keeper.active, failure, now)
                )
        if traced.is_recording():
            traced.set_attributes(
                {tracing.OUTCOME_STATUS: outcome.status, tracing.OUTCOME_CODE: outcome.error_code}
            )
            if outcome.error_code is not None:
                traced.set_status("error", outcome.error_code)
        return outcome


class _CaseJob(_Job[ClaimedCase, Mapping[str, Any], CaseOutcome]):
    claiming = "claim"
    completing = "result write"
    failing = "failure write"
    lost_code = dom.LEASE_LOST
    skip_fresh_lease = True

    def __init__(self, context: DriverContext, evaluate: Evaluate) -> None:
        super().__init__(context, context.options.heartbeat_interval)
        self.evaluate = evaluate
        #: How long the evaluator ran (the attempt history records it); None until it ran.
        self.duration: float | None = None
        #: Whether the claim came from the lanes' buffer (which is told when the
        #: evaluator is done with it: see :meth:`release_lane`).
        self.from_buffer = False

    def claim(self, now: float) -> ClaimedCase | None:
        context = self.context
        if context.buffer is not None:  # a lane of many: a batched claim's, or one now
            claimed = context.buffer.take(now)
            self.from_buffer = claimed is not None
            return claimed
        return context.campaigns.claim(
            context.campaign_id, context.worker_id, now=now, lease_seconds=self.lease
        )

    def renew(self, active: ClaimedCase, now: float) -> ClaimedCase:
        return self.context.campaigns.renew(active, now=now, lease_seconds=self.lease)

    def work(self, claim: ClaimedCase, keeper: LeaseKeeper) -> Mapping[str, Any]:
        started = time.perf_counter()
        try:
            with tracing.span(tracing.EVALUATE):  # current: the evaluator's spans nest under it
                return self.evaluate(claim, keeper.renew)
        finally:
            self.duration = time.perf_counter() - started
            self.release_lane()

    def release_lane(self) -> None:
        """Tell the lanes' buffer this lane no longer evaluates (once): while its result
        is written, the next batched claim leases a case for it too."""
        if self.from_buffer and self.context.buffer is not None:
            self.from_buffer = False
            self.context.buffer.done()

    def complete(self, active: ClaimedCase, done: Mapping[str, Any], now: float) -> CaseOutcome:
        result, cost_units = outcome_parts(done)  # a result, or an Outcome with its cost
        if self.context.committer is not None:  # written with the other lanes' results
            return self.context.committer.complete(
                active, result, now, duration_seconds=self.duration, cost_units=cost_units
            )
        return self.context.campaigns.complete(
            active, result, now=now, duration_seconds=self.duration, cost_units=cost_units
        )

    def failure(self, error: BaseException, active: ClaimedCase, *, completing: bool) -> _Failure:
        detail: str | None = None
        if not completing and isinstance(error, DependencyFailed) and error.throttled:
            return _Failure(error.code, True, self._throttle_delay(error, active), None, True)
        if not completing:
            code, retryable = _failure_for(error)
            detail = type(error).__name__ if code == dom.UNEXPECTED else None
        elif isinstance(error, CampaignBlocked) and error.code == dom.VALIDITY_EXPIRED:
            code, retryable = error.code, False
        elif isinstance(error, CampaignBlocked) and error.code in _RECORDED_REJECTIONS:
            code, retryable = error.code, True  # a rejected result: retried at once
        else:
            raise error
        options = self.context.options
        delay = dom.retry_delay(
            active.attempt,
            float(options.retry_base_seconds),
            float(options.retry_max_seconds),
            jitter=float(options.retry_jitter),
        )
        return _Failure(code, retryable, delay, detail)

    def _throttle_delay(self, error: DependencyFailed, active: ClaimedCase) -> float:
        """The provider's ``retry_after`` and up to a tenth more at random, else the
        throttle backoff (growing with the item's throttles) and up to half more."""
        options = self.context.options
        if error.retry_after is not None:
            return min(error.retry_after * (1 + 0.1 * random.random()), dom.MAX_LEASE_SECONDS)
        return dom.retry_delay(
            min(active.throttles, 30) + 1,
            float(options.throttle_base_seconds),
            float(options.throttle_max_seconds),
            jitter=0.5,
        )

    def fail(self, active: ClaimedCase, failure: _Failure, now: float) -> CaseOutcome:
        if failure.throttled:
            return self.context.campaigns.throttle(
                active,
                failure.code,
                retry_after=failure.delay_seconds,
                now=now,
                duration_seconds=self.duration,
            )
        return self.context.campaigns.fail(
            active,
            failure.code,
            retryable=failure.retryable,
            delay_seconds=failure.delay_seconds,
            detail=failure.detail,
            now=now,
            duration_seconds=self.duration,
        )


def _failure_for(error: BaseException) -> tuple[str, bool]:
    """Map an evaluation error to (code, retryable); re-raise what is not the item's failure.

    Whatever ``evaluate`` raises is the evaluation's failure, its own database
    errors included; the ledger's faults never reach here, since the lease
    keeper rides them out and raises ``lease_lost`` once the lease is gone.
    """
    if isinstance(error, DependencyFailed):
        return dom.dependency_code(error.code), error.retryable
    if isinstance(error, CampaignBlocked):
        if error.code == dom.VALIDITY_EXPIRED:
            return error.code, False
        raise error
    if isinstance(error, LedgerError):
        declared = getattr(error, "retryable", None)
        return error.code, declared if isinstance(declared, bool) else False
    if getattr(error, "benchmark_campaign_dependency_failure", None) is True:
        code = getattr(error, "code", None)
        retryable = getattr(error, "retryable", None)
        if dom.is_error_code(code) and isinstance(retryable, bool):
            return dom.dependency_code(str(code)), retryable
    if not isinstance(error, Exception):
        raise error  # KeyboardInterrupt, SystemExit: not an evaluation failure
    return dom.UNEXPECTED, True


class _ReportJob(_Job[ClaimedReport, object, ReportOutcome]):
    claiming = "report claim"
    completing = "report completion"
    failing = "report failure write"
    lost_code = dom.REPORT_LEASE_LOST
    skip_fresh_lease = False

    def __init__(self, context: DriverContext) -> None:
        super().__init__(context, float(context.options.lease_seconds) / 3)

    def claim(self, now: float) -> ClaimedReport | None:
        context = self.context
        return context.campaigns.claim_report(
            context.campaign_id, context.worker_id, now=now, lease_seconds=self.lease
        )

    def renew(self, active: ClaimedReport, now: float) -> ClaimedReport:
        return self.context.campaigns.renew_report(active, now=now, lease_seconds=self.lease)

    def work(self, claim: ClaimedReport, keeper: LeaseKeeper) -> object:
        context = self.context
        with tracing.span(tracing.SUMMARIZE):
            return keeper.write(
                "report build",
                lambda now: context.campaigns.summarize(
                    context.campaign_id, now=now, operation_guard=keeper.renew
                ),
            )

    def complete(self, active: ClaimedReport, done: object, now: float) -> ReportOutcome:
        return self.context.campaigns.complete_report(active, now=now)

    def failure(self, error: BaseException, active: ClaimedReport, *, completing: bool) -> _Failure:
        """Any coded error is the report's failure, but a lost lease and a guard's refusal."""
        code = getattr(error, "code", None)
        if not isinstance(error, Exception):
            raise error  # KeyboardInterrupt, SystemExit: not the report's failure
        if isinstance(error, DatabaseUnavailable) or is_transient(error):
            raise error
        if code in REPORT_LOST or code == dom.OPERATION_GUARD_FAILED:
            raise error
        if not dom.is_error_code(code):
            code = dom.REPORT_UNEXPECTED
        declared = getattr(error, "retryable", None)
        retryable = code not in dom.TERMINAL_REPORT_CODES and declared is not False
        options = self.context.options
        delay = (
            dom.retry_delay(
                active.attempt,
                float(options.retry_base_seconds),
                float(options.retry_max_seconds),
            )
            if retryable
            else 0.0
        )
        return _Failure(str(code), retryable, delay, type(error).__name__)

    def fail(self, active: ClaimedReport, failure: _Failure, now: float) -> ReportOutcome:
        return self.context.campaigns.fail_report(
            active,
            failure.code,
            retryable=failure.retryable,
            delay_seconds=failure.delay_seconds,
            detail=failure.detail,
            now=now,
        )


def attempt_case(context: DriverContext, evaluate: Evaluate) -> CaseOutcome | None:
    """One case's attempt with settings already checked (a worker's lanes)."""
    job = _CaseJob(context, evaluate)
    try:
        return _drive(job)
    finally:
        job.release_lane()  # when it never reached the evaluator


def attempt_report(context: DriverContext) -> ReportOutcome | None:
    """One report attempt with settings already checked (a worker's lanes)."""
    return _drive(_ReportJob(context))


def run_next_case(
    campaigns: CampaignService,
    campaign_id: str,
    worker_id: str,
    evaluate: Evaluate,
    clock: Clock = time.time,
    *,
    lease_seconds: float = DEFAULTS.lease_seconds,
    retry_base_seconds: float = DEFAULTS.retry_base_seconds,
    retry_max_seconds: float = DEFAULTS.retry_max_seconds,
    retry_jitter: float = DEFAULTS.retry_jitter,
    heartbeat_seconds: float | None = None,
    operation_guard: OperationGuard | None = None,
    outage: Outage | OutagePolicy | None = None,
) -> CaseOutcome | None:
    """Claim, evaluate and record at most one case; ``None`` when no case is due.

    ``evaluate(claim, heartbeat)`` returns the result mapping. The lease is
    renewed once before it starts (policy still valid, ``operation_guard``
    agrees, lease still ours); while it runs, the lease is renewed every
    ``heartbeat_seconds`` (default: a third of the lease) in the background,
    and whenever it calls ``heartbeat()``. A failed
    attempt is retried after ``min(retry_max, retry_base * 2**(attempt-1))``
    seconds, plus up to ``retry_jitter`` x that at random.

    Database faults are not the item's: the claim is retried through them
    within ``outage`` (an :class:`~benchledger.faults.OutagePolicy`, default
    five minutes), a renewal that meets one keeps the live lease, and the
    result (or failure) is written again until the lease expires. Past the
    budget, :class:`~benchledger.faults.DatabaseUnavailable` propagates.
    """
    if not isinstance(campaigns, CampaignService) or not callable(evaluate) or not callable(clock):
        raise blocked(dom.DEPENDENCY_INVALID)
    options = WorkerOptions(
        lease_seconds=lease_seconds,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        retry_jitter=retry_jitter,
        heartbeat_seconds=heartbeat_seconds,
        operation_guard=operation_guard,
    )
    context = DriverContext(campaigns, campaign_id, worker_id, clock, options, outage_of(outage))
    return attempt_case(context, evaluate)


def run_report_finalization(
    campaigns: CampaignService,
    campaign_id: str,
    worker_id: str,
    clock: Clock = time.time,
    *,
    lease_seconds: float = DEFAULTS.lease_seconds,
    retry_base_seconds: float = DEFAULTS.retry_base_seconds,
    retry_max_seconds: float = DEFAULTS.retry_max_seconds,
    operation_guard: OperationGuard | None = None,
    outage: Outage | OutagePolicy | None = None,
) -> ReportOutcome | None:
    """Finalize the report in at most one leased attempt; ``None`` if none is due.

    Builds (or re-verifies) the report with ``summarize`` while the report
    lease is renewed in the background (every third of the lease), then
    completes the lease. A failure is recorded with the error's code: terminal
    for ``policy_mismatch``, ``report_invalid``, ``report_state_invalid``,
    ``state_invalid`` and ``validity_expired`` (and for an error that declares
    ``retryable=False``, such as a non-retryable
    :class:`~benchledger.errors.DependencyFailed` from the report builder),
    otherwise retried with backoff.

    A lost report lease (``report_lease_lost``) propagates: another worker
    has the report. A database fault costs the report no attempt: the build
    and the writes are retried through it while the lease lives and the
    ``outage`` budget lasts, after which
    :class:`~benchledger.faults.DatabaseUnavailable` propagates.
    """
    if not isinstance(campaigns, CampaignService) or not callable(clock):
        raise blocked(dom.REPORT_DEPENDENCY_INVALID)
    try:
        options = WorkerOptions(
            lease_seconds=lease_seconds,
            retry_base_seconds=retry_base_seconds,
            retry_max_seconds=retry_max_seconds,
            operation_guard=operation_guard,
        )
    except CampaignBlocked as error:
        raise blocked(_REPORT_REFUSALS.get(error.code, error.code)) from None
    context = DriverContext(campaigns, campaign_id, worker_id, clock, options, outage_of(outage))
    return attempt_report(context)
