"""CampaignService: benchmark campaigns as use cases over repositories.

Every public method is one transaction (``db.write()`` or ``db.read()``); bad
input raises :class:`~benchledger.errors.CampaignBlocked` with its stable
``benchmark.campaign.*`` code before anything is written, and a failure inside
a transaction rolls all of it back.

Cost: ``claim``, ``renew``, ``complete`` and ``fail`` reach only indexed rows
(the claim's next item, the expired leases, the claim's own row, the campaign
row by key); ``status`` and ``health`` read aggregates and index seeks
(:mod:`benchledger.services.campaign_integrity`). The full binding of a
campaign (every expected work id, every stored result, the report) is verified
by ``create``, ``summarize``, ``load_report`` and the integrity audit
``verify``. The policy and suite a campaign was created
with are read from the database once per service and cached: they are
content-addressed (the campaign id *is* the policy's sha256, and the policy
names its suite's sha256), so a cached copy verified at load stays right.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.adapters.verification import StructuralResultVerifier
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import (
    CampaignHealth,
    CampaignList,
    CampaignPlan,
    CampaignPolicy,
    CampaignStatus,
    CampaignSummary,
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
    Suite,
    blocked,
)
from benchledger.domain.campaign_rules import StateInvalid, check_report_state, require, stored_time
from benchledger.domain.canonical import (
    canonical_json,
    parse_canonical_json,
    sha256_text,
)
from benchledger.domain.integrity import IntegrityReport
from benchledger.errors import LedgerError, SchemaError
from benchledger.ports.campaign import ReportBuilder, ResultVerifier
from benchledger.repositories.campaign_actions import (
    OPEN as OPEN_GATE,
)
from benchledger.repositories.campaign_actions import (
    CampaignActionRepository,
    campaign_cancelled,
    claim_allowed,
    claim_gate,
    record_claim,
)
from benchledger.repositories.campaigns import (
    PROGRESS_TOUCH_SECONDS,
    CampaignRepository,
    ReportLeases,
    ReportRepository,
    WorkLeases,
    WorkRepository,
    consistent_snapshot,
    missing_work_indexes,
    touch_campaign,
)
from benchledger.services.campaign_actions import (
    CampaignActions,
    CampaignControls,
    DeleteOutcome,
    RetryOutcome,
    cap_value,
    operator_reasons,
    operator_status,
)
from benchledger.services.campaign_integrity import CampaignInspector
from benchledger.services.campaigns.outcomes import (
    Failure,
    Results,
    case_outcome,
    failure_of,
    guarded,
    report_outcome,
)
from benchledger.services.campaigns.plans import CampaignPlans

Clock = Callable[[], float]
_Claim = TypeVar("_Claim", ClaimedCase, ClaimedReport)
_Outcome = TypeVar("_Outcome", CaseOutcome, ReportOutcome)

# Timestamps up to this far in the future (another machine's clock) are normal.
DEFAULT_CLOCK_SKEW_SECONDS = 5.0
_PLAN_CACHE_SIZE = 256


class CampaignService:
    """Benchmark campaigns: create, lease work, record results, finalize one report.

    ``result_verifier`` decides which results are accepted (default: structural
    checks; use :class:`~benchledger.adapters.verification.HmacAttestationVerifier`
    to accept only results signed by a trusted evaluator). ``report_builder``
    builds and re-verifies the report (default: per-locale counts, mean score,
    pass rate). ``clock`` gives epoch seconds when a call passes ``now=None``.
    """

    def __init__(
        self,
        db: Database,
        *,
        result_verifier: ResultVerifier | None = None,
        report_builder: ReportBuilder | None = None,
        clock: Clock = time.time,
        clock_skew_seconds: float = DEFAULT_CLOCK_SKEW_SECONDS,
    ) -> None:
        if not callable(clock):
            raise blocked(dom.DEPENDENCY_INVALID)
        if result_verifier is not None and not callable(
            getattr(result_verifier, "verify_result", None)
        ):
            raise blocked(dom.DEPENDENCY_INVALID)
        if report_builder is not None and not (
            callable(getattr(report_builder, "build", None))
            and callable(getattr(report_builder, "verify", None))
        ):
            raise blocked(dom.DEPENDENCY_INVALID)
        db.require_current_schema()
        with db.engine.connect() as connection:
            missing = missing_work_indexes(connection)
        if missing:
            # Indexes are checked too, not only columns: a file without the claim index is refused.
            raise SchemaError(
                dom.SCHEMA_INVALID,
                "benchmark_campaign_work lacks index(es) " + ", ".join(sorted(missing)),
            )
        self.db = db
        self.result_verifier: ResultVerifier = result_verifier or StructuralResultVerifier()
        self.report_builder: ReportBuilder = report_builder or DefaultReportBuilder()
        self.clock = clock
        self.clock_skew_seconds = dom.duration(clock_skew_seconds, allow_zero=True)
        self._plans = CampaignPlans(db)
        # Campaign id -> when this service last moved its updated_at (see _touch).
        self._touched: dict[str, float] = {}

    # -- helpers ---------------------------------------------------------------------

    def _now(self, now: Any) -> float:
        return dom.timestamp(self.clock() if now is None else now)

    def _touch(self, connection: sa.Connection, campaign_id: str, now: float) -> None:
        """Move the campaign's ``updated_at`` (throttled: ``touch_campaign``), skipping the
        statement when this service moved it to ``t`` and ``now < t + PROGRESS_TOUCH_SECONDS``:
        the database would not move it either (it is at least ``t`` and never goes back),
        so a hot loop of completions pays one touch a second, not one each."""
        last = self._touched.get(campaign_id)
        if last is not None and now < last + PROGRESS_TOUCH_SECONDS:
            return
        if touch_campaign(connection, campaign_id, now):
            if len(self._touched) >= _PLAN_CACHE_SIZE:
                self._touched.clear()
            self._touched[campaign_id] = now

    @staticmethod
    def _verify_binding(session: Session, plan: CampaignPlan, row: Any) -> None:
        """Every expected item exists, and nothing else (the exact binding)."""
        if (
            row.policy_sha256 != plan.policy.sha256
            or row.suite_sha256 != plan.suite.sha256
            or row.work_count != plan.work_count
        ):
            raise blocked(dom.STATE_INVALID)
        expected = {(w.work_id, w.target_locale, w.suite_case_key) for w in plan.work()}
        if WorkRepository(session).identities(plan.campaign_id) != expected:
            raise blocked(dom.STATE_INVALID)

    def _check_result(
        self, value: Mapping[str, Any], plan: CampaignPlan, locale: str, case_key: str
    ) -> None:
        """A stored result: verifier accepts it and it is for its own item."""
        self.result_verifier.verify_result(value, plan.policy)
        if dom.result_identity(value) != (locale, case_key):
            raise StateInvalid

    def _verified_results(self, session: Session, plan: CampaignPlan) -> Results:
        """Every result present and matching its digest, plus the binding and the verifier."""
        rows = WorkRepository(session).results(plan.campaign_id)
        expected = {(w.work_id, w.target_locale, w.suite_case_key) for w in plan.work()}
        if {(r.work_id, r.target_locale, r.suite_case_key) for r in rows} != expected or len(
            rows
        ) != len(expected):
            raise blocked(dom.STATE_INVALID)
        if any(row.status != "succeeded" for row in rows):
            raise blocked(dom.INCOMPLETE)
        values: list[dict[str, Any]] = []
        digests: list[str] = []
        for row in rows:
            try:
                require(isinstance(row.result_json, str))
                require(row.result_sha256 == sha256_text(row.result_json))
                value = parse_canonical_json(row.result_json)
                require(isinstance(value, dict))
                self._check_result(value, plan, row.target_locale, row.suite_case_key)
            except Exception:
                raise blocked(dom.STATE_INVALID) from None
            values.append(value)
            digests.append(row.result_sha256)
        return Results(tuple(values), tuple(digests))

    def _verified_report(
        self, row: Any, plan: CampaignPlan, results: Results, now: float
    ) -> dict[str, Any]:
        """The stored report, checked against its digest and binding; else ``report_invalid``."""
        try:
            require(row is not None and row.campaign_id == plan.campaign_id)
            require(row.policy_sha256 == plan.policy.sha256)
            require(row.results_sha256 == results.sha256)
            text = row.report_json
            require(isinstance(text, str) and text)
            dom.check_result_size(text)
            require(row.report_sha256 == sha256_text(text))
            require(stored_time(row.created_at) <= now + self.clock_skew_seconds)
            report = parse_canonical_json(text)
            require(isinstance(report, dict))
            self.report_builder.verify(report, plan.policy, plan.suite, results.values)
        except Exception:
            raise blocked(dom.REPORT_INVALID) from None
        return dict(report)

    def policy(self, campaign_id: str) -> CampaignPolicy:
        """The campaign's stored policy (``not_found``, ``policy_unregistered``)."""
        return self._plans.cached(campaign_id).policy

    def suite(self, campaign_id: str) -> Suite:
        """The campaign's stored suite (``not_found``, ``policy_unregistered``)."""
        return self._plans.cached(campaign_id).suite

    # -- create / register --------------------------------------------------------------

    def create(
        self,
        policy: CampaignPolicy,
        suite: Suite,
        max_attempts: int = 3,
        now: float | None = None,
        *,
        max_concurrent_leases: int | None = None,
        max_claims_per_minute: int | None = None,
    ) -> str:
        """Create the campaign of ``policy`` over ``suite`` (idempotent); returns its id.

        Stores the policy and suite (canonical JSON, content-addressed), one
        pending item per (required locale x case) and the report state. Calling
        it again with the same policy verifies the stored campaign and returns
        the same id; a different ``max_attempts`` is ``attempts_mismatch``. A
        campaign adopted from a legacy database gets its policy and suite stored.
        ``max_concurrent_leases`` / ``max_claims_per_minute`` (0 pauses) are set
        in the same transaction when given (``set_limits`` changes them later).
        """
        caps = {
            name: cap_value(value)
            for name, value in (
                ("max_concurrent_leases", max_concurrent_leases),
                ("max_claims_per_minute", max_claims_per_minute),
            )
            if value is not None
        }
        if not isinstance(policy, CampaignPolicy):
            raise blocked(dom.POLICY_INVALID)
        if not isinstance(suite, Suite):
            raise blocked(dom.SUITE_INVALID)
        max_attempts = dom.max_attempts_value(max_attempts)
        current = self._now(now)
        policy.require_current(current)
        plan = CampaignPlan(policy, suite)
        for attempt in range(2):
            try:
                with self.db.write() as session:
                    campaigns = CampaignRepository(session)
                    row = campaigns.get(plan.campaign_id)
                    if row is None:
                        campaigns.insert(
                            plan.campaign_id,
                            policy.sha256,
                            suite.sha256,
                            plan.work_count,
                            current,
                            max_attempts,
                        )
                        WorkRepository(session).insert_pending(
                            plan.campaign_id,
                            ((w.work_id, w.target_locale, w.suite_case_key) for w in plan.work()),
                            max_attempts,
                            current,
                        )
                        ReportRepository(session).insert_state(
                            plan.campaign_id, max_attempts, current
                        )
                    else:
                        self._verify_binding(session, plan, row)
                        if WorkRepository(session).attempts_range(plan.campaign_id) != (
                            max_attempts,
                            max_attempts,
                        ):
                            raise blocked(dom.ATTEMPTS_MISMATCH)
                    self._store_plan(session, plan, current)
                    if caps:
                        CampaignActionRepository(session).set_caps(plan.campaign_id, caps)
                break
            except sa.exc.IntegrityError:
                # Another process created it between our read and insert: verify theirs.
                if attempt:
                    raise blocked(dom.STATE_INVALID) from None
        self._plans.remember(plan)
        return plan.campaign_id

    def register(self, policy: CampaignPolicy, suite: Suite, now: float | None = None) -> str:
        """Store the policy and suite of an existing campaign that has none (legacy).

        Campaigns of a database adopted from the legacy store have rows but no
        stored policy: register them once and workers can use the campaign id
        alone. The campaign must match ``policy`` and ``suite`` exactly (every
        work id); registering again is a no-op.
        """
        if not isinstance(policy, CampaignPolicy):
            raise blocked(dom.POLICY_INVALID)
        if not isinstance(suite, Suite):
            raise blocked(dom.SUITE_INVALID)
        current = self._now(now)
        plan = CampaignPlan(policy, suite)
        with self.db.write() as session:
            row = CampaignRepository(session).get(plan.campaign_id)
            if row is None:
                raise blocked(dom.NOT_FOUND)
            self._verify_binding(session, plan, row)
            self._store_plan(session, plan, current)
        self._plans.remember(plan)
        return plan.campaign_id

    @staticmethod
    def _store_plan(session: Session, plan: CampaignPlan, now: float) -> None:
        campaigns = CampaignRepository(session)
        policy_json = canonical_json(plan.policy.as_payload())
        suite_json = canonical_json(plan.suite.manifest())
        campaigns.put_policy(plan.policy.sha256, policy_json, now)
        campaigns.put_suite(plan.suite.sha256, suite_json, len(plan.suite.cases), now)
        # Content-addressed rows that already existed must hold exactly this content.
        if campaigns.policy_json(plan.policy.sha256) != policy_json:
            raise blocked(dom.STATE_INVALID)
        if campaigns.suite_json(plan.suite.sha256) != suite_json:
            raise blocked(dom.STATE_INVALID)

    # -- work items ----------------------------------------------------------------------

    def claim(
        self,
        campaign_id: str,
        worker_id: str,
        now: float | None = None,
        lease_seconds: float = 300,
    ) -> ClaimedCase | None:
        """Lease the next due item (locale, case key order), or ``None`` if none is due.

        First releases expired leases (``retry_wait``, or ``failed`` when its
        attempts are spent; code ``lease_expired``). The lease has a fresh
        random token and counts one attempt. The job payload is built from the
        stored suite inside the same transaction: if that fails, nothing is leased.
        ``None`` too while the campaign is cancelled, or would exceed a
        flow-control cap (``max_concurrent_leases``, ``max_claims_per_minute``:
        checked and taken under the campaign row's lock, see ``claim_gate``).
        """
        worker_id = dom.identifier(worker_id)
        current = self._now(now)
        lease = dom.duration(lease_seconds)
        token = secrets.token_urlsafe(32)
        plan = self._plans.cached(campaign_id)
        with self.db.write_connection() as connection:
            # The time is taken once the write lock is held (SQLite: BEGIN IMMEDIATE, on
            # entering; PostgreSQL: the work table's lock, taken by the sweep): a claim
            # that waited for the lock never hands out a lease dated before the wait.
            if now is None:
                current = self._now(None)
            plan.policy.require_current(current)
            work = WorkLeases(connection)
            if work.sweep_expired(plan.campaign_id, current):
                self._touch(connection, plan.campaign_id, current)
            if now is None and self.db.dialect_name != "sqlite":
                current = self._now(None)
                plan.policy.require_current(current)
            expires_at = current + lease
            # Leases only from a campaign neither cancelled nor capped (no extra round trip).
            row = work.lease_next(plan.campaign_id, current, worker_id, token, expires_at)
            if row is None:
                # Nothing due, or the campaign has a gate: cancelled (nothing), or capped
                # (its row locked, then live leases and the last minute's claims counted).
                gate = claim_gate(connection, plan.campaign_id)
                if gate is OPEN_GATE:
                    return None
                if now is None and self.db.dialect_name != "sqlite":
                    current = self._now(None)  # after any wait for the campaign row's lock
                    plan.policy.require_current(current)
                    expires_at = current + lease
                gate = claim_allowed(connection, plan.campaign_id, gate, current)
                if not gate.open:
                    return None
                row = work.lease_next(
                    plan.campaign_id, current, worker_id, token, expires_at, gated=True
                )
                if row is None:
                    return None
                record_claim(connection, plan.campaign_id, gate, current)
            return ClaimedCase(
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
            )

    def renew(
        self, claim: ClaimedCase, now: float | None = None, lease_seconds: float = 300
    ) -> ClaimedCase:
        """Extend a live lease to ``now + lease_seconds``; ``lease_lost`` if it is not live."""
        if not isinstance(claim, ClaimedCase):
            raise blocked(dom.CLAIM_INVALID)
        return self._renew(WorkLeases, claim, now, lease_seconds, dom.LEASE_LOST)

    def complete(
        self, claim: ClaimedCase, result: Mapping[str, Any], now: float | None = None
    ) -> CaseOutcome:
        """Record a verified result for a live lease: the item succeeds.

        The result must pass the verifier (``result_invalid``), be for the
        claimed locale and case (``result_mismatch``) and encode to at most
        2,000,000 bytes of canonical JSON; it is stored with its sha256.
        """
        if not isinstance(claim, ClaimedCase):
            raise blocked(dom.CLAIM_INVALID)
        value, text = dom.encode_result(result)
        plan = self._plans.cached(claim.campaign_id)
        try:
            self.result_verifier.verify_result(value, plan.policy)
        except Exception:
            raise blocked(dom.RESULT_INVALID) from None
        if dom.result_identity(value) != (claim.target_locale, claim.suite_case_key):
            raise blocked(dom.RESULT_MISMATCH)
        dom.check_result_size(text)
        current = self._now(now)
        plan.policy.require_current(current)
        digest = sha256_text(text)
        with self.db.write_connection() as connection:
            row = WorkLeases(connection).complete(claim, current, text, digest)
            if row is None:
                raise blocked(dom.LEASE_LOST)
            self._touch(connection, claim.campaign_id, current)
            return case_outcome(row)

    def fail(
        self,
        claim: ClaimedCase,
        code: str,
        retryable: bool = True,
        delay_seconds: float = 0,
        detail: str | None = None,
        now: float | None = None,
    ) -> CaseOutcome:
        """Record a failed attempt: ``retry_wait`` after ``delay_seconds`` while attempts
        remain and ``retryable``, else ``failed``. ``detail`` is stored only as sha256."""
        if not isinstance(claim, ClaimedCase):
            raise blocked(dom.CLAIM_INVALID)
        failure = failure_of(
            claim,
            code,
            retryable,
            delay_seconds,
            detail,
            lambda: self._now(now),
            dom.FAILURE_INVALID,
        )
        return self._fail(WorkLeases, claim, failure, dom.LEASE_LOST, case_outcome)

    # -- what work items and the report lease share ----------------------------------------

    def _renew(
        self,
        rows: type[WorkLeases | ReportLeases],
        claim: _Claim,
        now: float | None,
        lease_seconds: float,
        lost: str,
    ) -> _Claim:
        """Extend ``claim``'s live lease to ``now + lease_seconds``, else raise ``lost``."""
        current = self._now(now)
        expires_at = current + dom.duration(lease_seconds)
        with self.db.write_connection() as connection:
            if not rows(connection).renew(claim, current, expires_at):
                raise blocked(lost)
        return attrs.evolve(claim, lease_expires_at=expires_at)

    def _fail(
        self,
        rows: type[WorkLeases | ReportLeases],
        claim: ClaimedCase | ClaimedReport,
        failure: Failure,
        lost: str,
        outcome: Callable[[Any], _Outcome],
    ) -> _Outcome:
        """Record ``failure`` on ``claim``'s live lease (else raise ``lost``); one transaction."""
        with self.db.write_connection() as connection:
            row = rows(connection).fail(
                claim,
                failure.now,
                status=failure.status,
                next_attempt_at=failure.next_attempt_at,
                code=failure.code,
                detail_hash=failure.detail_hash,
            )
            if row is None:
                raise blocked(lost)
            self._touch(connection, claim.campaign_id, failure.now)
            return outcome(row)

    # -- operators' actions (benchledger.services.campaign_actions) ------------------------

    def _forget(self, campaign_id: str) -> None:
        self._plans.forget(campaign_id)

    def _actions(self) -> CampaignActions:
        return CampaignActions(self)

    def resolve(self, campaign_id: str) -> str:
        """The campaign id that ``campaign_id`` is, or is a unique prefix of (>= 4 hex digits)."""
        return self._actions().resolve(campaign_id)

    def unregistered(self) -> tuple[str, ...]:
        """Campaigns with no stored policy and suite (adopted legacy ones): ``register`` them."""
        return self._actions().unregistered()

    def retry(
        self,
        campaign_id: str,
        *,
        attempts: int | None = None,
        codes: Iterable[str] = (),
        work_ids: Iterable[str] = (),
        now: float | None = None,
    ) -> RetryOutcome:
        """Give failed items (all, by last error code, or by work id) and a failed report
        more attempts; a ``RetryOutcome``. See ``CampaignActions.retry``."""
        return self._actions().retry(
            campaign_id, attempts=attempts, codes=codes, work_ids=work_ids, now=now
        )

    def delete(
        self, campaign_id: str, *, force: bool = False, now: float | None = None
    ) -> DeleteOutcome:
        """Delete a campaign and all its rows (``leases_live`` unless ``force``); a
        ``DeleteOutcome``. See ``CampaignActions.delete``."""
        return self._actions().delete(campaign_id, force=force, now=now)

    def controls(self, campaign_id: str, now: float | None = None) -> CampaignControls:
        """Whether the campaign is cancelled, its flow-control caps and its flow now."""
        return self._actions().controls(campaign_id, now=now)

    def cancel(self, campaign_id: str, now: float | None = None) -> CampaignControls:
        """Hand out none of the campaign's work (claims and report claims return ``None``;
        live leases may finish); ``cancelled`` / ``finished`` where it does not apply."""
        return self._actions().cancel(campaign_id, now=now)

    def resume(self, campaign_id: str, now: float | None = None) -> CampaignControls:
        """Undo ``cancel`` (``not_cancelled`` otherwise)."""
        return self._actions().resume(campaign_id, now=now)

    def set_limits(self, campaign_id: str, **caps: int | None) -> CampaignControls:
        """Set or clear (``None``) ``max_concurrent_leases`` / ``max_claims_per_minute``
        (0 pauses); the claim enforces them atomically. See ``CampaignActions.set_limits``."""
        return self._actions().set_limits(campaign_id, **caps)

    # -- reads ----------------------------------------------------------------------------

    def list(
        self, *, cursor: str | None = None, limit: int = dom.DEFAULT_LIST_LIMIT
    ) -> CampaignList:
        """Campaigns oldest first ((created_at, campaign_id) order), ``limit`` (1-1,000) at a time.

        ``next_cursor`` (the last campaign id of a full page) continues the
        listing; it is ``None`` on the last page. A summary is the campaign's
        own row (binding, work count, times): listing reads no work items and
        no stored policy, so campaigns adopted from a legacy database are
        listed too. One read transaction; ``page_invalid`` for a bad ``limit``
        or a ``cursor`` that names no campaign of this database.
        """
        limit = dom.list_limit(limit)
        if cursor is not None and not dom.is_campaign_id(cursor):
            raise blocked(dom.PAGE_INVALID)
        with self.db.read() as session:
            rows = CampaignRepository(session).page(cursor, limit + 1)
        if rows is None:
            raise blocked(dom.PAGE_INVALID)
        shown = [
            CampaignSummary(
                campaign_id=row.campaign_id,
                policy_sha256=row.policy_sha256,
                suite_sha256=row.suite_sha256,
                work_count=row.work_count,
                created_at=float(row.created_at),
                updated_at=float(row.updated_at),
            )
            for row in rows[:limit]
        ]
        more = len(rows) > limit
        return CampaignList(tuple(shown), limit, shown[-1].campaign_id if more else None)

    @functools.cached_property
    def _inspector(self) -> CampaignInspector:
        return CampaignInspector(self)

    def status(self, campaign_id: str) -> CampaignStatus:
        """Counters by status and by error code, completion, blocking, report state.

        Cheap at any size: the campaign row, its stored policy (hashed, parsed once
        per process), index-only counts and seeks, the report state by key
        (:mod:`benchledger.services.campaign_integrity`). ``verified_at`` and
        ``verified_ok`` say when the last integrity audit (``verify``) ran and
        whether it found nothing but, at most, clock skew. ``cancelled`` says an
        operator cancelled it (``cancel``; ``resume`` undoes it).
        """
        return operator_status(self.db, self._inspector.status(campaign_id))

    def health(
        self,
        campaign_id: str,
        now: float | None = None,
        stale_after_seconds: float = 3600,
        *,
        verify: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> CampaignHealth:
        """A read-only, text-free snapshot: ``healthy``, ``degraded`` or ``blocked``.

        From SQL aggregates, at the same cost for any campaign size: counts by
        status and error code, due work, live and expired leases, failures, the
        report state and the stored report's own sha256 and policy binding. It
        never raises on what it finds: corrupt state is ``blocked`` with
        ``benchmark.campaign.state_invalid``. Timestamps a little in the future
        (another machine's clock) are tolerated; beyond the service's
        ``clock_skew_seconds`` they are the reason ``clock_skew``. It says when
        the last integrity audit ran (``verified_at``, ``verified_ok``); a
        campaign whose last audit found a problem (more than clock skew) is
        ``blocked`` with ``benchmark.campaign.integrity_failed``.

        ``verify=True`` runs the full audit first (:meth:`verify`, recorded like
        it, ``progress`` as there): its problems' codes join the reasons and the
        audit is the snapshot's ``integrity``.
        """
        current = self._now(now)
        stale = dom.timestamp(stale_after_seconds)
        if not 0 < stale <= dom.MAX_STALE_SECONDS:
            raise blocked(dom.STALE_THRESHOLD_INVALID)
        if not isinstance(verify, bool):
            raise blocked(dom.DEPENDENCY_INVALID)
        if not verify:  # operator_reasons: cancelled, paused (services/campaign_actions.py)
            return operator_reasons(self.db, self._inspector.health(campaign_id, current, stale))
        report = self._inspector.verify(campaign_id, current, progress)
        health = operator_reasons(self.db, self._inspector.health(campaign_id, current, stale))
        if report.ok:
            return attrs.evolve(health, integrity=report)
        reasons = set(health.reasons) | set(report.reasons)
        only_skew = not report.blocking
        failed = dict(health.counts).get("failed", 0)
        return attrs.evolve(
            health,
            status=dom.health_status(reasons, failed) if only_skew else "blocked",
            reasons=tuple(sorted(reasons)),
            report_ready=health.report_ready and only_skew,
            integrity=report,
        )

    def verify(
        self,
        campaign_id: str,
        now: float | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> IntegrityReport:
        """The integrity audit: every stored row of the campaign, re-verified.

        Streams the items in batches (bounded memory) and checks each row's
        invariants, work id, attempt budget, result sha256, canonical form,
        result verifier (signature), identity and seal; the stored policy and
        suite; the report state; and the report's sha256, its binding to the
        results and its content (through the report builder). Returns an
        :class:`~benchledger.domain.integrity.IntegrityReport` (``ok``, every
        kind of problem with its code, count and first rows, rows checked) and
        records when it ran and what it found on the campaign (``status`` and
        ``health`` show it). ``progress(checked, expected)`` is called after
        every batch. Never raises on what it finds; an unknown campaign is the
        problem ``not_found``.
        """
        return self._inspector.verify(campaign_id, self._now(now), progress)

    # -- report finalization --------------------------------------------------------------

    def report_finalization_required(self, campaign_id: str) -> bool:
        """Whether all work succeeded and the report still needs finalizing."""
        with self.db.read() as session:
            consistent_snapshot(session)
            plan, _row = self._plans.load(session, campaign_id)
            work = WorkRepository(session)
            if work.has_unfinished(plan.campaign_id):
                return False
            self._verified_results(session, plan)
            reports = ReportRepository(session)
            state = check_report_state(
                reports.state(plan.campaign_id), work.attempts_range(plan.campaign_id)
            )
            if state.status == "succeeded":
                if not reports.has_report(plan.campaign_id):
                    raise blocked(dom.REPORT_STATE_INVALID)
                return False
            return bool(state.status != "failed")

    def claim_report(
        self,
        campaign_id: str,
        worker_id: str,
        now: float | None = None,
        lease_seconds: float = 300,
    ) -> ClaimedReport | None:
        """Lease the report finalization once every item succeeded (else ``incomplete``).

        An expired report lease is released first (``report_lease_expired``).
        Returns ``None`` when the report is done, failed, leased or not yet due.
        """
        worker_id = dom.identifier(worker_id)
        current = self._now(now)
        lease = dom.duration(lease_seconds)
        plan = self._plans.cached(campaign_id)
        plan.policy.require_current(current)
        # The full result check reads every row: do it before taking the write lock.
        with self.db.read() as session:
            consistent_snapshot(session)
            self._verified_results(session, plan)
        token = secrets.token_urlsafe(32)
        with self.db.write_connection() as connection:
            reports = ReportLeases(connection)
            # Locked first: a concurrent claimer (PostgreSQL) waits here, then sees the
            # lease. The time is taken once the lock is held (SQLite: BEGIN IMMEDIATE), so
            # a wait for it never hands out a lease dated before the wait.
            locked = reports.state_locked(plan.campaign_id)
            if campaign_cancelled(connection, plan.campaign_id):
                return None  # an operator cancelled it: no report is finalized
            if now is None:
                current = self._now(None)
                plan.policy.require_current(current)
            expires_at = current + lease
            if reports.has_unfinished(plan.campaign_id):
                raise blocked(dom.INCOMPLETE)
            attempts_range = reports.attempts_range(plan.campaign_id)
            state = check_report_state(locked, attempts_range)
            if state.status == "leased" and state.lease_expires_at <= current:
                reports.expire_lease(plan.campaign_id, current)
                self._touch(connection, plan.campaign_id, current)
                state = check_report_state(reports.state_locked(plan.campaign_id), attempts_range)
            if state.status in ("succeeded", "failed", "leased"):
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
        self, claim: ClaimedReport, now: float | None = None, lease_seconds: float = 300
    ) -> ClaimedReport:
        if not isinstance(claim, ClaimedReport):
            raise blocked(dom.REPORT_CLAIM_INVALID)
        return self._renew(ReportLeases, claim, now, lease_seconds, dom.REPORT_LEASE_LOST)

    def complete_report(self, claim: ClaimedReport, now: float | None = None) -> ReportOutcome:
        """Mark the report finalized; the report must have been stored (``summarize``)."""
        if not isinstance(claim, ClaimedReport):
            raise blocked(dom.REPORT_CLAIM_INVALID)
        current = self._now(now)
        plan = self._plans.cached(claim.campaign_id)
        plan.policy.require_current(current)
        with self.db.write_connection() as connection:
            reports = ReportLeases(connection)
            row = reports.complete(claim, current)
            if row is None:
                raise blocked(dom.REPORT_LEASE_LOST)
            if not reports.has_report(claim.campaign_id):
                raise blocked(dom.REPORT_MISSING)  # rolls the state change back
            self._touch(connection, claim.campaign_id, current)
            return report_outcome(row)

    def fail_report(
        self,
        claim: ClaimedReport,
        code: str,
        retryable: bool = True,
        delay_seconds: float = 0,
        detail: str | None = None,
        now: float | None = None,
    ) -> ReportOutcome:
        if not isinstance(claim, ClaimedReport):
            raise blocked(dom.REPORT_CLAIM_INVALID)
        failure = failure_of(
            claim,
            code,
            retryable,
            delay_seconds,
            detail,
            lambda: self._now(now),
            dom.REPORT_FAILURE_INVALID,
        )
        return self._fail(ReportLeases, claim, failure, dom.REPORT_LEASE_LOST, report_outcome)

    def summarize(
        self,
        campaign_id: str,
        now: float | None = None,
        *,
        operation_guard: Callable[[], Any] | None = None,
    ) -> dict[str, Any]:
        """The campaign's immutable report: built once, stored, then verified on every call.

        Needs every item succeeded (``incomplete``). The first call builds the
        report from the verified results and stores it (canonical JSON, its
        sha256 and the results' sha256); later calls verify the stored report
        against the current results and return it (``report_invalid`` if a
        result or the report changed). A stored report outside a report lease
        marks the report state succeeded.
        """
        current = self._now(now)
        guard = guarded(operation_guard)
        with self.db.read() as session:
            consistent_snapshot(session)
            plan, row = self._plans.load(session, campaign_id)
            plan.policy.require_current(current)
            self._verify_binding(session, plan, row)
            results = self._verified_results(session, plan)
            stored = ReportRepository(session).report(plan.campaign_id)
        if stored is not None:
            guard()
            report = self._verified_report(stored, plan, results, current)
            self._mark_report_stored(plan.campaign_id, current)
            return report
        guard()
        # The builder's own failure propagates as it is: the report
        # driver records it (``report_unexpected`` unless it carries a code) and
        # retries. What it built is checked here: a report that is not a JSON
        # object, fails its own verification or is too large is ``report_invalid``.
        report = self.report_builder.build(plan.policy, plan.suite, results.values)
        try:
            if not isinstance(report, dict):
                raise TypeError("a report is a JSON object")
            self.report_builder.verify(report, plan.policy, plan.suite, results.values)
            report_json = canonical_json(report)
            dom.check_result_size(report_json)
        except LedgerError:
            raise  # the builder's own coded failure (e.g. DependencyFailed): the driver decides
        except Exception:
            raise blocked(dom.REPORT_INVALID) from None
        guard()
        with self.db.write() as session:
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
            return self._verified_report(stored, plan, results, current)
        return dict(parse_canonical_json(report_json))

    def _mark_report_stored(self, campaign_id: str, now: float) -> None:
        with self.db.read() as session:
            state = ReportRepository(session).state(campaign_id)
        if state is not None and state.status in ("leased", "succeeded"):
            return  # nothing to write: keep summarize of a finalized report read-only
        with self.db.write() as session:
            ReportRepository(session).mark_succeeded_unless_leased(campaign_id, now)

    def load_report(self, campaign_id: str, now: float | None = None) -> dict[str, Any]:
        """The finalized report, verified; never builds, signs or writes anything.

        Runs the integrity audit first: a report is returned only when every
        result, the binding, the report state and the report itself verify
        (``state_invalid``, ``incomplete``, ``report_state_invalid``,
        ``report_missing``, ``report_invalid`` otherwise).
        """
        return self._inspector.load_report(campaign_id, self._now(now))
