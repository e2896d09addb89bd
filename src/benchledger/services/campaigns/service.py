"""CampaignService: benchmark campaigns as use cases over repositories.

Every public method is one transaction (``db.write()`` or ``db.read()``); bad
input raises :class:`~benchledger.errors.CampaignBlocked` with its stable
``benchmark.campaign.*`` code before anything is written, and a failure inside
a transaction rolls all of it back.

Cost: ``claim``, ``renew``, ``complete`` and ``fail`` reach only indexed rows
(the claim's next item, the expired leases, the claim's own row, the campaign
row by key); ``status`` and ``health`` read aggregates and index seeks
(:mod:`benchledger.services.campaigns.integrity`). The full binding of a
campaign (every expected work id, every stored result, the report) is verified
by ``create``, ``summarize``, ``load_report`` and the integrity audit
``verify``. The policy and suite a campaign was created
with are read from the database once per service and cached: they are
content-addressed (the campaign id *is* the policy's sha256, and the policy
names its suite's sha256), so a cached copy verified at load stays right.

This class is a facade: each method hands its arguments to the module that does
that job (:mod:`.creation`, :mod:`.leases`, :mod:`.reports`, :mod:`.reads`,
:mod:`benchledger.services.campaigns.actions`), with the :class:`.CampaignContext`
they share.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_archive import ArchiveOutcome
from benchledger.domain.campaign_labels import CampaignFilter
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    Completion,
    ReportOutcome,
)
from benchledger.domain.campaign_views import (
    CampaignHealth,
    CampaignList,
    CampaignStatus,
    OpenCampaign,
)
from benchledger.domain.integrity import IntegrityReport
from benchledger.domain.limit_groups import LimitGroup, LimitGroupUsage
from benchledger.domain.results import AttemptsPage, ItemResult, ResultsPage
from benchledger.errors import CampaignBlocked
from benchledger.faults import Outage, OutagePolicy
from benchledger.ports.campaign import ReportBuilder, ResultVerifier
from benchledger.services.campaigns import (
    batches,
    creation,
    fleet,
    leases,
    reads,
    reports,
    results,
)
from benchledger.services.campaigns import limits as limits_service
from benchledger.services.campaigns.actions import (
    CampaignActions,
    CampaignControls,
    DeleteOutcome,
    RetryOutcome,
)
from benchledger.services.campaigns.context import (
    DEFAULT_CLOCK_SKEW_SECONDS,
    CampaignContext,
    Clock,
)
from benchledger.services.campaigns.integrity import CampaignInspector
from benchledger.services.campaigns.status import CampaignGauges

if TYPE_CHECKING:  # compare's statistics load numpy: only compare() and provisional reports
    from benchledger.domain.campaign_comparison import CampaignComparison

__all__ = ["DEFAULT_CLOCK_SKEW_SECONDS", "CampaignService", "Clock"]


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
        outage: Outage | OutagePolicy | None = None,
    ) -> None:
        #: What every job receives: these collaborators, the plan cache, the touch throttle.
        #: Its schema check rides out an outage within ``outage`` (default
        #: ``faults.STARTUP_OUTAGE``, a few seconds), then ``ledger.database.unavailable``.
        self.context = CampaignContext(
            db,
            result_verifier=result_verifier,
            report_builder=report_builder,
            clock=clock,
            clock_skew_seconds=clock_skew_seconds,
            outage=outage,
        )
        self.db = db
        self.result_verifier: ResultVerifier = self.context.result_verifier
        self.report_builder: ReportBuilder = self.context.report_builder
        self.clock = clock
        self.clock_skew_seconds = self.context.clock_skew_seconds

    def policy(self, campaign_id: str) -> CampaignPolicy:
        """The campaign's stored policy (``not_found``, ``policy_unregistered``)."""
        return self.context.plans.cached(campaign_id).policy

    def suite(self, campaign_id: str) -> Suite:
        """The campaign's stored suite (``not_found``, ``policy_unregistered``)."""
        return self.context.plans.cached(campaign_id).suite

    # -- create / register (creation.py) ---------------------------------------------------

    def create(
        self,
        policy: CampaignPolicy,
        suite: Suite,
        max_attempts: int = 3,
        now: float | None = None,
        *,
        max_concurrent_leases: int | None = None,
        max_claims_per_minute: int | None = None,
        name: str | None = None,
        max_throttles: int = dom.DEFAULT_MAX_THROTTLES,
        limit_group: str | None = None,
        evaluator: str | None = None,
    ) -> str:
        """Create the campaign of ``policy`` over ``suite`` (idempotent); returns its id.

        Stores the policy and suite (canonical JSON, content-addressed), one
        pending item per (required locale x case) and the report state. Calling
        it again with the same policy verifies the stored campaign and returns
        the same id; a different ``max_attempts`` is ``attempts_mismatch``. A
        campaign adopted from a legacy database gets its policy and suite stored.
        ``max_concurrent_leases`` / ``max_claims_per_minute`` (0 pauses) are set
        in the same transaction when given (``set_limits`` changes them later).
        ``name`` (1-200 characters, ``name_invalid``) is metadata, not identity:
        given again, it renames the campaign (``rename`` does too).
        ``max_throttles`` (1-1,000,000, ``throttles_invalid``): throttled hand-backs
        each item takes before a throttle spends an attempt (set when the items are
        made). ``limit_group`` (default: the policy's provider) names the group whose
        caps (``set_group_limits``) its claims share with other campaigns;
        ``evaluator`` names the evaluator a fleet runs it with (``module:function``;
        a name only, never imported from the database). Both, given again, change.
        """
        return creation.create(
            self.context,
            policy,
            suite,
            max_attempts,
            now,
            max_concurrent_leases,
            max_claims_per_minute,
            name,
            max_throttles,
            limit_group,
            evaluator,
        )

    def rename(self, campaign_id: str, name: str | None) -> None:
        """Give the campaign a name (``None`` clears it); the policy, and so the id, stay."""
        creation.rename(self.context, campaign_id, name)

    def register(self, policy: CampaignPolicy, suite: Suite, now: float | None = None) -> str:
        """Store the policy and suite of an existing campaign that has none (legacy).

        Campaigns of a database adopted from the legacy store have rows but no
        stored policy: register them once and workers can use the campaign id
        alone. The campaign must match ``policy`` and ``suite`` exactly (every
        work id); registering again is a no-op.
        """
        return creation.register(self.context, policy, suite, now)

    # -- work items (leases.py) -------------------------------------------------------------

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
        return leases.claim(self.context, campaign_id, worker_id, now, lease_seconds)

    def claim_batch(
        self,
        campaign_id: str,
        worker_id: str,
        n: int,
        now: float | None = None,
        lease_seconds: float = 300,
    ) -> list[ClaimedCase]:
        """Lease up to ``n`` (1-256) due items in one statement, in claim order, each with a
        lease and token of its own, as ``n`` calls of :meth:`claim` would; fewer when fewer
        are due. A campaign with caps (its own or its limit group's) leases one at a time
        (each under the caps). ``worker_setting_invalid`` for a bad ``n``."""
        return batches.claim_batch(self.context, campaign_id, worker_id, n, now, lease_seconds)

    def complete_batch(
        self, completions: Sequence[Completion], now: float | None = None
    ) -> list[CaseOutcome | CampaignBlocked]:
        """Write many completions (up to 1,024) in one transaction, each exactly as
        :meth:`complete` would (checked first; a compare-and-set on its own live lease;
        its history row; its cost); the outcome of each, in order, or its refusal
        (``lease_lost`` for one whose lease is gone: the others still commit)."""
        return batches.complete_batch(self.context, completions, now)

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        campaign_id: str,
        worker_id: str,
        n: int,
        now: float | None = None,
        lease_seconds: float = 300,
    ) -> tuple[list[CaseOutcome | CampaignBlocked], list[ClaimedCase]]:
        """:meth:`complete_batch` and :meth:`claim_batch` in one transaction (one commit):
        the outcomes, and up to ``n`` (1-256) items of ``campaign_id`` leased to
        ``worker_id``. Bad arguments are refused before anything is written; then what
        the claim cannot lease costs no completion: it leases nothing while the
        campaign is capped, cancelled or past its policy's validity (a :meth:`claim`
        then meets the reason)."""
        return batches.complete_and_claim(
            self.context, completions, campaign_id, worker_id, n, now, lease_seconds
        )

    def renew(
        self, claim: ClaimedCase, now: float | None = None, lease_seconds: float = 300
    ) -> ClaimedCase:
        """Extend a live lease to ``now + lease_seconds``; ``lease_lost`` if it is not live."""
        return leases.renew(self.context, claim, now, lease_seconds)

    def complete(
        self,
        claim: ClaimedCase,
        result: Mapping[str, Any],
        now: float | None = None,
        *,
        duration_seconds: float | None = None,
        cost_units: int = 0,
    ) -> CaseOutcome:
        """Record a verified result for a live lease: the item succeeds.

        The result must pass the verifier (``result_invalid``), be for the
        claimed locale and case (``result_mismatch``) and encode to at most
        2,000,000 bytes of canonical JSON; it is stored with its sha256. The
        attempt's row joins the history (with ``duration_seconds``, how long the
        evaluator ran, when given: ``duration_invalid`` unless finite and >= 0).
        ``cost_units`` (what the call cost, ``cost_invalid`` unless an integer from
        0 to 1e9) count against the campaign's limit group's cost per minute.
        """
        return leases.complete(self.context, claim, result, now, duration_seconds, cost_units)

    def fail(
        self,
        claim: ClaimedCase,
        code: str,
        retryable: bool = True,
        delay_seconds: float = 0,
        detail: str | None = None,
        now: float | None = None,
        *,
        duration_seconds: float | None = None,
    ) -> CaseOutcome:
        """Record a failed attempt: ``retry_wait`` after ``delay_seconds`` while attempts
        remain and ``retryable``, else ``failed``. ``detail`` is stored only as sha256;
        the attempt's row joins the history (with ``duration_seconds``, as ``complete``)."""
        return leases.fail(
            self.context, claim, code, retryable, delay_seconds, detail, now, duration_seconds
        )

    def throttle(
        self,
        claim: ClaimedCase,
        code: str = "rate_limited",
        *,
        retry_after: float,
        now: float | None = None,
        duration_seconds: float | None = None,
    ) -> CaseOutcome:
        """Hand a throttled item back (the provider said 429): due again in ``retry_after``
        seconds, recorded as ``benchmark.campaign.throttled.<code>``, and without spending
        the attempt while the item's throttles are below its ``max_throttles``; past that
        budget, an ordinary retryable failure (``throttles_spent``). The attempt's row joins
        the history (outcome ``throttled``)."""
        return leases.throttle(self.context, claim, code, retry_after, now, duration_seconds)

    # -- limit groups (benchledger.services.campaigns.limits) --------------------------------

    def set_group_limits(
        self,
        group: str,
        *,
        max_concurrent_leases: int | None = None,
        max_claims_per_minute: int | None = None,
        max_cost_per_minute: int | None = None,
        now: float | None = None,
    ) -> LimitGroup:
        """Set the caps that every campaign in limit group ``group`` shares (each ``None``:
        no such cap; 0 pauses the group), enforced by every claim from then on, beside the
        campaigns' own caps (the tighter wins). ``limit_group_invalid`` for a bad key or
        cap. Returns the caps as set."""
        limits = LimitGroup(
            group, max_concurrent_leases, max_claims_per_minute, max_cost_per_minute
        )
        limits_service.set_group_limits(self.context, limits, now)
        return limits

    def clear_group_limits(self, group: str) -> bool:
        """Drop a group's caps (its campaigns stay in it, uncapped); whether it had any."""
        return limits_service.clear_group_limits(self.context, group)

    def group_limits(self) -> tuple[LimitGroup, ...]:
        """Every limit group with caps, by key."""
        return limits_service.group_limits(self.context)

    def group_usage(self, group: str, *, now: float | None = None) -> LimitGroupUsage:
        """A group's caps, campaigns, live leases now and the last minute's claims and
        reported cost units (``not_found``: no caps and no campaign)."""
        return limits_service.group_usage(self.context, group, now)

    # -- operators' actions (benchledger.services.campaigns.actions) ------------------------

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

    def archive(
        self,
        campaign_id: str,
        *,
        now: float | None = None,
        export: Callable[[Iterator[dict[str, Any]]], object] | None = None,
    ) -> ArchiveOutcome:
        """Retention for a finished campaign: drop its items, attempt history and claim log,
        keep its report (verified first), the report's state, the policy and suite, and on
        the campaign row the results' digest and a per-locale summary of them.

        Refused, with the database unchanged: ``not_found``; ``archived`` (it already
        is); ``incomplete`` (an item has not succeeded); ``report_missing`` (the report is
        not final); ``integrity_failed`` (the integrity audit, run now, found more than
        clock skew); ``export_incomplete``. ``export``, when given, is called once with
        an iterator of every item in (locale, case key) order (``campaign results
        --format jsonl``'s columns plus ``result_sha256`` and the stored ``result``),
        after the audit and before anything is deleted; if it raises, nothing is. Then
        one transaction records the archive (and the audit) and deletes the rows.

        Afterwards ``status``, ``health``, ``list``, ``load_report`` and ``verify`` read
        the campaign as before (all items succeeded; ``verify`` checks the kept report
        against its digest and the recorded facts); ``load_report(provisional=True)``
        returns the kept summary; ``results``, ``iter_results``, ``attempts``,
        ``compare`` and ``summarize`` refuse with ``archived``. See
        :mod:`benchledger.services.campaigns.archive`.
        """
        from benchledger.services.campaigns import archive

        return archive.archive(self.context, self._inspector, campaign_id, now, export)

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

    # -- reads (reads.py) -------------------------------------------------------------------

    def list(
        self,
        *,
        cursor: str | None = None,
        limit: int = dom.DEFAULT_LIST_LIMIT,
        where: CampaignFilter | None = None,
    ) -> CampaignList:
        """Campaigns oldest first ((created_at, campaign_id) order), ``limit`` (1-1,000) at a time.

        ``next_cursor`` (the last campaign id of a full page) continues the
        listing; it is ``None`` on the last page. A summary is the campaign's
        own row (binding, work count, times): listing reads no work items and
        no stored policy, so campaigns adopted from a legacy database are
        listed too. One read transaction; ``page_invalid`` for a bad ``limit``
        or a ``cursor`` that names no campaign of this database. ``where`` keeps
        only campaigns of one provider or model, a suite (sha256 prefix) or with
        a part of a name (:class:`~benchledger.domain.campaign_labels.CampaignFilter`).
        """
        return reads.list_campaigns(self.context, cursor, limit, where)

    # -- results (results.py) ---------------------------------------------------------------

    def results(
        self,
        campaign_id: str,
        *,
        status: str | None = None,
        locale: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> ResultsPage:
        """One page of the campaign's items in (locale, case key) order, each with its
        status, attempts, score and verdict (when it succeeded), last error code (in
        full), work id and what its attempt history counts.

        ``status`` (a work status) and ``locale`` filter (``filter_invalid``);
        ``next_cursor`` continues (``page_invalid`` for a bad ``cursor`` or a
        ``limit`` outside 1-1,000). One read transaction; a page costs the same
        at any depth.
        """
        return results.results(
            self.context, campaign_id, status=status, locale=locale, cursor=cursor, limit=limit
        )

    def iter_results(
        self, campaign_id: str, *, status: str | None = None, locale: str | None = None
    ) -> Iterator[ItemResult]:
        """Every item, as ``results`` pages them, streamed (memory stays flat).

        One read transaction and one cursor over the items, read a thousand at a
        time: the campaign is read once, whatever its size. Consume it promptly
        (it holds the transaction open until the last item or ``close()``).
        """
        return results.iter_results(self.context, campaign_id, status=status, locale=locale)

    def attempts(
        self,
        campaign_id: str,
        *,
        work_id: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> AttemptsPage:
        """The attempt history (of one item with ``work_id``), in the order recorded.

        One row per attempt that ended: succeeded, failed, retry scheduled, lease
        expired (recorded when another claim took the lease over) or released.
        Items finished before the history existed (schema 0009) or adopted from a
        legacy store have none.
        """
        return results.attempts(
            self.context, campaign_id, work_id=work_id, cursor=cursor, limit=limit
        )

    def compare(
        self, campaign_a: str, campaign_b: str, *, seed: int = 0, resamples: int = 10_000
    ) -> CampaignComparison:
        """Campaign B against campaign A over the same suite (``compare.suite_differs``
        otherwise), paired by (locale, case key) on the items both completed with a
        score; the other items are counted by why they were dropped.

        Per locale and overall: pass rates and their difference (B - A), McNemar's
        exact test on the discordant pairs, mean scores, the mean paired difference
        with its paired-bootstrap interval (``seed``, ``resamples``: reproducible),
        the Wilcoxon signed-rank p-value; Holm's correction across locales; the
        flips. docs/analysis.md says what each means and when not to trust it.
        """
        from benchledger.services.campaigns import compare

        return compare.compare(self.context, campaign_a, campaign_b, seed=seed, resamples=resamples)

    @functools.cached_property
    def _inspector(self) -> CampaignInspector:
        return CampaignInspector(self.context)

    @functools.cached_property
    def _gauges(self) -> CampaignGauges:
        return CampaignGauges(self.context)

    def status(self, campaign_id: str) -> CampaignStatus:
        """Counters by status and by error code, completion, blocking, report state.

        Cheap at any size: the campaign row, its stored policy (hashed, parsed once
        per process), index-only counts and seeks, the report state by key
        (:mod:`benchledger.services.campaigns.status`). ``verified_at`` and
        ``verified_ok`` say when the last integrity audit (``verify``) ran and
        whether it found nothing but, at most, clock skew. ``cancelled`` says an
        operator cancelled it (``cancel``; ``resume`` undoes it).
        """
        return reads.status(self.context, self._gauges, campaign_id)

    def open_campaigns(
        self, *, providers: Iterable[str] = (), campaign_ids: Iterable[str] = ()
    ) -> tuple[OpenCampaign, ...]:
        """Campaigns a fleet may serve (``FleetWorker``, ``benchledger work --all``): they
        name an evaluator (``create(..., evaluator=)``) and are neither cancelled nor
        finished; only ``providers``' and ``campaign_ids`` when given. Oldest first."""
        return fleet.open_campaigns(self.context, self._gauges, providers, campaign_ids)

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
        return reads.health(
            self.context,
            self._gauges,
            self._inspector,
            campaign_id,
            now,
            stale_after_seconds,
            verify,
            progress,
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
        return reads.verify(self.context, self._inspector, campaign_id, now, progress)

    # -- report finalization (reports.py) ---------------------------------------------------

    def report_finalization_required(self, campaign_id: str) -> bool:
        """Whether all work succeeded and the report still needs finalizing."""
        return reports.finalization_required(self.context, campaign_id)

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
        return reports.claim_report(self.context, campaign_id, worker_id, now, lease_seconds)

    def renew_report(
        self, claim: ClaimedReport, now: float | None = None, lease_seconds: float = 300
    ) -> ClaimedReport:
        return reports.renew_report(self.context, claim, now, lease_seconds)

    def complete_report(self, claim: ClaimedReport, now: float | None = None) -> ReportOutcome:
        """Mark the report finalized; the report must have been stored (``summarize``)."""
        return reports.complete_report(self.context, claim, now)

    def fail_report(
        self,
        claim: ClaimedReport,
        code: str,
        retryable: bool = True,
        delay_seconds: float = 0,
        detail: str | None = None,
        now: float | None = None,
    ) -> ReportOutcome:
        return reports.fail_report(self.context, claim, code, retryable, delay_seconds, detail, now)

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
        return reports.summarize(self.context, campaign_id, now, operation_guard)

    def load_report(
        self, campaign_id: str, now: float | None = None, *, provisional: bool = False
    ) -> dict[str, Any]:
        """The finalized report, verified; never builds, signs or writes anything.

        Runs the integrity audit first: a report is returned only when every
        result, the binding, the report state and the report itself verify
        (``state_invalid``, ``incomplete``, ``report_state_invalid``,
        ``report_missing``, ``report_invalid`` otherwise).

        ``provisional=True`` instead summarizes what has succeeded so far (per
        locale: items, succeeded, passed, pass rate and mean score of those),
        marked ``"provisional": true``: for a campaign still running or blocked.
        It is computed on each call and never stored.
        """
        if provisional is True:
            self.context.now(now)  # checked as every call checks it (time_invalid)
            from benchledger.services.campaigns import compare

            return compare.provisional_report(self.context, campaign_id)
        if provisional is not False:
            raise dom.blocked(dom.DEPENDENCY_INVALID)
        return reports.load_report(self.context, self._inspector, campaign_id, now)
