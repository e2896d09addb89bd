"""The integrity audit of a campaign, ``verify``, and ``load_report`` built on it.

(``status`` and ``health``, the cheap polled reads, are
:mod:`benchledger.services.campaigns.status`.)

``verify()`` is the integrity audit: it streams every item (batches of
:data:`~benchledger.repositories.campaigns.reads.AUDIT_BATCH`), re-checks each
row's invariants, work id, attempt budget, result sha256, canonical form,
verifier (signature), identity and seal, the stored policy and suite, the
report state and the report (its sha256, its binding to the results' digest
and, through the report builder, its content), and records when it ran and
what it found on the campaign row. ``load_report()`` runs the same audit and
returns the report only when nothing it depends on is off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from benchledger.adapters.verification import StructuralResultVerifier
from benchledger.domain import campaign as dom
from benchledger.domain import integrity as audit
from benchledger.domain.attempts import history_consistent
from benchledger.domain.campaign import ReportStatus, blocked
from benchledger.domain.campaign_archive import archive_problem, half_archived, is_archived
from benchledger.domain.campaign_audit import (
    ItemPlan,
    ItemRow,
    ItemTally,
    ResultCheck,
    VerifiedResults,
    check_item,
    clean_batch,
    verified_results,
)
from benchledger.domain.campaign_health import report_row_ok, report_state_inconsistent
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_results import check_result_size
from benchledger.domain.canonical import sha256_text
from benchledger.domain.integrity import IntegrityReport, Problem, ProblemLog
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.archive import ArchiveReads
from benchledger.repositories.campaigns.reads import (
    CampaignReads,
    read_snapshot,
    record_verification,
)
from benchledger.services.campaigns.context import CampaignContext

Progress = Callable[[int, int], None]
"""Called after every batch of an audit with (items checked, items expected)."""

_REPORTS_CACHE_SIZE = 256
# Parsed policies and suites, and what a plan's items must be, by the sha256 of the
# verified texts they come from: content that cannot change, shared by the process.
_PLANS_CACHE_SIZE = 32
_PARSED: dict[str, CampaignPolicy | Suite] = {}
_ITEM_PLANS: dict[tuple[str, str, str, bool], ItemPlan] = {}
_PLANS_LOCK = threading.Lock()


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    with _PLANS_LOCK:
        if len(cache) >= _PLANS_CACHE_SIZE:
            cache.pop(next(iter(cache)), None)
        cache[key] = value


# Results kept in memory for the report check; beyond this many bytes of result
# text, the report builder reads them again from the database, in batches.
RESULTS_IN_MEMORY_BYTES = 16 * 1024 * 1024
_BINDING = frozenset(
    {
        Problem.NOT_FOUND,
        Problem.POLICY_UNREGISTERED,
        Problem.POLICY_MISMATCH,
        Problem.POLICY_CORRUPT,
        Problem.SUITE_CORRUPT,
        Problem.WORK_COUNT,
    }
)
_ITEMS = frozenset(
    {
        Problem.CAMPAIGN_TIMES,
        Problem.ITEM_STATE,
        Problem.ATTEMPT_BUDGET,
        Problem.RESULT_HASH,
        Problem.RESULT_INVALID,
        Problem.RESULT_SEAL,
    }
)


class _StoredResults(Sequence[Mapping[str, Any]]):
    """Every verified result of a campaign, read again from the database on each pass.

    What a report builder gets when the results are too large to keep in
    memory: it may iterate as often as it likes; each pass streams.
    """

    def __init__(self, texts: Callable[[], Iterator[Sequence[Any]]], count: int) -> None:
        self._texts = texts
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for batch in self._texts():
            for row in batch:
                yield audit.parse_stored_json(row[0])

    @overload
    def __getitem__(self, index: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Mapping[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        for position, value in enumerate(self):
            if position == index:
                return value
        raise IndexError(index)


class _Audit:
    """One integrity audit of a campaign, in one read snapshot (see ``CampaignInspector.audit``)."""

    def __init__(
        self, inspector: CampaignInspector, campaign_id: Any, now: float, progress: Progress | None
    ) -> None:
        self.inspector = inspector
        self.context = inspector.context
        self.campaign_id = campaign_id
        self.now = now
        self.limit = now + self.context.clock_skew_seconds
        self.progress = progress
        self.log = ProblemLog()
        self.rows_checked = 0
        self.exists = False
        self.policy: CampaignPolicy | None = None
        self.suite: Suite | None = None
        self.work_count = 0
        self.succeeded = 0
        self.state: Any = None
        self.state_in_future = False
        self.report_row: Any = None
        self.report: dict[str, Any] | None = None
        self.items_seen = 0
        self.results_digest: str | None = None

    # -- the campaign row and its plan ---------------------------------------------------

    def _campaign(self, reads: CampaignReads, row: Any) -> None:
        log = self.log
        self.rows_checked += 1
        if row.policy_sha256 != self.campaign_id[len(dom.CAMPAIGN_PREFIX) :]:
            log.add(Problem.POLICY_MISMATCH, "campaign")
        created, updated = row.created_at, row.updated_at
        if not (audit.is_time(created) and audit.is_time(updated) and created <= updated):
            log.add(Problem.CAMPAIGN_TIMES, "campaign")
        elif updated > self.limit:
            log.add(Problem.FUTURE_TIME, "campaign")
        budget = row.max_attempts
        if not (isinstance(budget, int) and 1 <= budget <= dom.MAX_ATTEMPTS):
            log.add(Problem.ATTEMPT_BUDGET, "campaign")
        policy_json = reads.policy_json(row.policy_sha256)
        suite_row = reads.suite(row.suite_sha256)
        if policy_json is None or suite_row is None:
            log.add(Problem.POLICY_UNREGISTERED, "policy" if policy_json is None else "suite")
            # Nothing to plan from, but the row's own work count still says how many
            # items there are (an adopted legacy campaign): completeness is judged by it.
            count = row.work_count
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                self.work_count = count
            return
        self.rows_checked += 2
        # Each text is hashed on every audit; what a text parses to is content-addressed,
        # so it is parsed once per process.
        try:
            if sha256_text(policy_json) != row.policy_sha256:
                raise ValueError
            policy = self.inspector.parsed(
                row.policy_sha256,
                lambda: CampaignPolicy.from_payload(audit.parse_stored_json(policy_json)),
            )
            assert isinstance(policy, CampaignPolicy)
        except (ValueError, CampaignBlocked):
            log.add(Problem.POLICY_CORRUPT, "policy")
            return
        try:
            if sha256_text(suite_row.suite_json) != row.suite_sha256:
                raise ValueError
            suite = self.inspector.parsed(
                row.suite_sha256,
                lambda: Suite.from_canonical_text(suite_row.suite_json),
            )
            assert isinstance(suite, Suite)
            if suite_row.case_count != len(suite.cases) or suite.sha256 != policy.suite_sha256:
                raise ValueError
        except (ValueError, CampaignBlocked):
            log.add(Problem.SUITE_CORRUPT, "suite")
            return
        if policy.campaign_id != self.campaign_id:
            log.add(Problem.POLICY_MISMATCH, "policy")
            return
        self.policy, self.suite = policy, suite
        self.work_count = len(policy.required_locales) * len(suite.cases)
        if row.work_count != self.work_count:
            log.add(Problem.WORK_COUNT, "campaign")

    # -- the items -------------------------------------------------------------------------

    def _items(self, reads: CampaignReads, budget: Any, collect: bool) -> VerifiedResults | None:
        """Stream and check every item; the verified results when ``collect`` and they fit."""
        log = self.log
        policy, suite = self.policy, self.suite
        verifier = self.context.result_verifier
        plan: ItemPlan | None = None
        check_result: ResultCheck | None = None
        if policy is not None and suite is not None:
            plan = self.inspector.item_plan(
                self.campaign_id, policy, suite, type(verifier) is StructuralResultVerifier
            )
            verify_result, checked_policy = verifier.verify_result, policy

            def check_result(value: Mapping[str, Any]) -> None:
                verify_result(value, checked_policy)

        tally = ItemTally(collect)
        limit = self.limit
        for batch in reads.items(self.campaign_id):
            if plan is None or not clean_batch(batch, plan, budget, limit, tally, check_result):
                for row in batch:
                    check_item(ItemRow._make(row), plan, budget, limit, log, tally, check_result)
            if tally.collect and tally.kept_bytes > RESULTS_IN_MEMORY_BYTES:
                tally.drop()  # the report check reads them again, in batches
            if self.progress is not None:
                self.progress(tally.seen, self.work_count)
        self.rows_checked += tally.seen
        self.succeeded = tally.succeeded
        if plan is not None and tally.expected < self.work_count:
            log.add(Problem.ITEM_MISSING, "campaign", self.work_count - tally.expected)
        self.items_seen = tally.seen
        self.results_digest = tally.digest.hexdigest()
        return verified_results(tally)

    def _history(self, reads: CampaignReads) -> None:
        """Each item's attempt history agrees with the item (domain.attempts rules), and
        every history row of the campaign belongs to one of its items."""
        item: tuple[str, Any, Any, Any] | None = None
        rows: list[tuple[int, str]] = []

        def check() -> None:
            if item is None:
                return
            work_id, status, attempts, history_from = item
            try:
                ok = history_consistent(str(status), int(attempts), rows, int(history_from))
            except (TypeError, ValueError):
                ok = False
            if not ok and not self.log.flagged(work_id):  # an edited item: reported once
                self.log.add(Problem.HISTORY, work_id)

        for batch in reads.history(self.campaign_id):
            for work_id, status, attempts, history_from, number, outcome in batch:
                if item is None or item[0] != work_id:
                    check()
                    item, rows = (work_id, status, attempts, history_from), []
                if number is not None:
                    rows.append((int(number), str(outcome)))
        check()
        stray = reads.stray_history(self.campaign_id)
        if stray:
            self.log.add(Problem.HISTORY, "attempts", stray)

    # -- the report ------------------------------------------------------------------------

    def _report_state(self, reads: CampaignReads, budget: Any) -> None:
        state = self.state = reads.report_state(self.campaign_id)
        if state is not None:
            self.rows_checked += 1
        if not audit.report_state_ok(state, budget):
            self.log.add(Problem.REPORT_STATE, "report_state")
            return
        if state.updated_at > self.limit:
            self.state_in_future = True
            self.log.add(Problem.FUTURE_TIME, "report_state")

    def _report(self, reads: CampaignReads, values: VerifiedResults | None) -> None:
        row = self.report_row
        complete = self.succeeded == self.work_count == self.items_seen
        state = self.state
        status = None if state is None else state.status
        if (
            status is not None
            and Problem.REPORT_STATE not in self.log
            and report_state_inconsistent(status, row is not None, complete)
        ):
            self.log.add(Problem.REPORT_STATE, "report_state")
        if row is None:
            return
        self.rows_checked += 1
        if Problem.POLICY_UNREGISTERED in self.log:
            # No stored policy or suite to verify it against (a legacy campaign not
            # registered yet): not verifiable, which says nothing against the report.
            self.log.add(Problem.REPORT_UNVERIFIABLE, "report")
            return
        policy, suite = self.policy, self.suite
        try:
            if policy is None or suite is None or not complete:
                raise ValueError("nothing to verify the report against")
            if row.campaign_id != self.campaign_id or row.policy_sha256 != policy.sha256:
                raise ValueError("the report is bound to another policy")
            if self.results_digest is None or row.results_sha256 != self.results_digest:
                raise ValueError("the report is bound to other results")
            text = row.report_json
            if not (isinstance(text, str) and text):
                raise ValueError("no report text")
            check_result_size(text)
            if row.report_sha256 != sha256_text(text):
                raise ValueError("the report text is not its sha256")
            if not audit.is_time(row.created_at) or row.created_at > self.limit:
                raise ValueError("the report is dated later than now")
            report = audit.parse_stored_json(text)
            if not isinstance(report, dict):
                raise ValueError("a report is a JSON object")
            key = (row.report_sha256, self.results_digest, policy.sha256, suite.sha256)
            if not self.inspector.report_verified(key):
                results: Sequence[Mapping[str, Any]] = (
                    values
                    if values is not None
                    else _StoredResults(
                        lambda: reads.result_texts(self.campaign_id), self.work_count
                    )
                )
                self.context.report_builder.verify(report, policy, suite, results)
                self.inspector.remember_report(key)
        except Exception:
            self.log.add(Problem.REPORT_INVALID, "report")
            return
        self.report = report

    # -- an archived campaign ----------------------------------------------------------------

    def _archived(self, reads: CampaignReads, row: Any) -> None:
        """An archived campaign: no item or history left, a final report, and the archive's
        facts bound to that report (``domain.campaign_archive``).

        The results are gone, so the report cannot be rebuilt from them: it is checked
        against its own sha256, its policy, and the results' digest the archive recorded
        (and sealed with the report's sha256) once the audit before it had verified them.
        """
        log, campaign_id = self.log, self.campaign_id
        left = ArchiveReads(reads.connection).items_stored(campaign_id)
        if left:
            log.add(Problem.ITEM_UNEXPECTED, "campaign", left)
        stray = reads.stray_history(campaign_id)
        if stray:
            log.add(Problem.HISTORY, "attempts", stray)
        self._report_state(reads, row.max_attempts)
        state = self.state
        report_row = self.report_row = reads.report(campaign_id)
        if Problem.REPORT_STATE not in log and (
            state.status != ReportStatus.SUCCEEDED or report_row is None
        ):
            log.add(Problem.REPORT_STATE, "report_state")
        policy, suite = self.policy, self.suite
        if policy is None or suite is None:
            if report_row is not None:
                self.rows_checked += 1
                log.add(Problem.REPORT_INVALID, "report")
            return
        problem = archive_problem(
            row,
            campaign_id=campaign_id,
            work_count=self.work_count,
            locales=policy.required_locales,
            case_count=len(suite.cases),
            report_row=report_row,
            limit=self.limit,
        )
        if problem is not None:
            log.add(Problem.ARCHIVE, "campaign")
        elif not left:
            # What the archive dropped: every item, succeeded, bound to the kept report.
            self.succeeded = self.items_seen = self.work_count
            self.results_digest = row.archived_results_sha256
        if report_row is None:
            return
        self.rows_checked += 1
        report: Any = None
        if report_row_ok(report_row, campaign_id, policy.sha256, self.limit):
            try:
                report = audit.parse_stored_json(report_row.report_json)
            except ValueError:
                report = None
        bound = report_row.results_sha256
        if not (
            isinstance(report, dict)
            and report.get("results_sha256", bound) == bound
            and report.get("campaign_id", campaign_id) == campaign_id
            and report.get("policy_sha256", policy.sha256) == policy.sha256
        ):
            log.add(Problem.REPORT_INVALID, "report")
            return
        self.report = report

    # -- the whole audit -------------------------------------------------------------------

    def run(self, *, with_report: bool = True) -> IntegrityReport:
        campaign_id = self.campaign_id
        if not dom.is_campaign_id(campaign_id):
            self.log.add(Problem.NOT_FOUND, "campaign")
            return self.result("invalid")
        with read_snapshot(self.context.db.engine) as connection:
            reads = CampaignReads(connection)
            row = reads.campaign(campaign_id)
            if row is None:
                self.log.add(Problem.NOT_FOUND, "campaign")
                return self.result(campaign_id)
            self.exists = True
            self._campaign(reads, row)
            if is_archived(row):
                self._archived(reads, row)
                return self.result(campaign_id)
            if half_archived(row):
                self.log.add(Problem.ARCHIVE, "campaign")
            self.report_row = reads.report(campaign_id) if with_report else None
            # The results are kept for the report builder unless this very report
            # was rebuilt and matched before (then only the results' digest is compared).
            report_row = self.report_row
            collect = report_row is not None and not self.inspector.report_seen(
                report_row.report_sha256
            )
            values = self._items(reads, row.max_attempts, collect=collect)
            self._history(reads)
            self._report_state(reads, row.max_attempts)
            self._report(reads, values)
        return self.result(campaign_id)

    def result(self, campaign_id: str) -> IntegrityReport:
        return IntegrityReport(
            campaign_id=campaign_id,
            problems=self.log.problems(),
            rows_checked=self.rows_checked,
            verified_at=self.now,
        )


class CampaignInspector:
    """The integrity audit of a ``CampaignService``'s campaigns (``verify``,
    ``load_report``), with its caches of content-addressed plans and matched reports."""

    def __init__(self, context: CampaignContext) -> None:
        self.context = context
        self._reports: dict[tuple[str, str, str, str], None] = {}
        self._lock = threading.Lock()

    def item_plan(
        self, campaign_id: str, policy: CampaignPolicy, suite: Suite, default_shape: bool
    ) -> ItemPlan:
        """What the campaign's items must be (content-addressed: kept per process)."""
        key = (campaign_id, policy.sha256, suite.sha256, default_shape)
        plan = _ITEM_PLANS.get(key)
        if plan is None:
            plan = ItemPlan.build(
                campaign_id,
                policy.sha256,
                suite.sha256,
                policy.required_locales,
                [case.key for case in suite.cases],
                default_shape=default_shape,
            )
            _remember(_ITEM_PLANS, key, plan)
        return plan

    # -- reports the builder already rebuilt and matched (content-addressed) -----------------

    def report_verified(self, key: tuple[str, str, str, str]) -> bool:
        """Whether the report of sha256 ``key[0]`` was rebuilt from the results of digest
        ``key[1]`` under policy ``key[2]`` and suite ``key[3]`` and matched, in this process.

        Every part is a sha256 of content and the builder is deterministic, so the
        rebuild would match again: the audit still checks each result against its
        digest, and the digests against ``key[1]``; it only skips the rebuild.
        """
        return key in self._reports

    def report_seen(self, report_sha256: Any) -> bool:
        return any(key[0] == report_sha256 for key in self._reports)

    def remember_report(self, key: tuple[str, str, str, str]) -> None:
        with self._lock:
            if len(self._reports) >= _REPORTS_CACHE_SIZE:
                self._reports.pop(next(iter(self._reports)))
            self._reports[key] = None

    # -- the stored policy, cheaply ------------------------------------------------------------

    def parsed(self, sha256: str, parse: Callable[[], CampaignPolicy | Suite]) -> Any:
        """What the stored text of digest ``sha256`` parses to (parsed once per process).

        The caller has checked that the text is its digest; a text that does not
        parse raises from ``parse`` and is not remembered.
        """
        value = _PARSED.get(sha256)
        if value is None:
            value = parse()
            _remember(_PARSED, sha256, value)
        return value

    # -- the audit -------------------------------------------------------------------------------

    def audit(self, campaign_id: Any, now: float, progress: Progress | None = None) -> _Audit:
        run = _Audit(self, campaign_id, now, progress)
        run.run()
        return run

    def verify(self, campaign_id: Any, now: float, progress: Progress | None) -> IntegrityReport:
        if progress is not None and not callable(progress):
            raise blocked(dom.DEPENDENCY_INVALID)
        run = self.audit(campaign_id, now, progress)
        report = run.result(campaign_id if run.exists else "invalid")
        if run.exists:
            with self.context.db.write_engine.begin() as connection:
                record_verification(
                    connection, campaign_id, now, not report.blocking, report.problem_count
                )
        return report

    def load_report(self, campaign_id: Any, now: float) -> dict[str, Any]:
        run = self.audit(campaign_id, now)
        log = run.log
        for kind, code in (
            (Problem.NOT_FOUND, dom.NOT_FOUND),
            (Problem.POLICY_UNREGISTERED, dom.POLICY_UNREGISTERED),
            (Problem.POLICY_MISMATCH, dom.POLICY_MISMATCH),
        ):
            if kind in log:
                raise blocked(code)
        if any(kind in log for kind in _BINDING):
            raise blocked(dom.STATE_INVALID)
        assert run.policy is not None
        run.policy.require_current(now)
        if Problem.ITEM_MISSING in log or Problem.ITEM_UNEXPECTED in log:
            raise blocked(dom.STATE_INVALID)
        if Problem.ARCHIVE in log:  # the archive's facts: nothing to vouch for the report
            raise blocked(dom.ARCHIVE_INVALID)
        if run.succeeded != run.work_count:
            raise blocked(dom.INCOMPLETE)
        if any(kind in log for kind in _ITEMS):
            raise blocked(dom.STATE_INVALID)
        if Problem.REPORT_STATE in log or run.state_in_future:
            raise blocked(dom.REPORT_STATE_INVALID)
        state = run.state
        if state.status != ReportStatus.SUCCEEDED or run.report_row is None:
            if state.status == ReportStatus.SUCCEEDED or run.report_row is not None:
                raise blocked(dom.REPORT_STATE_INVALID)
            raise blocked(dom.REPORT_MISSING)
        if Problem.REPORT_INVALID in log or run.report is None:
            raise blocked(dom.REPORT_INVALID)
        return dict(run.report)
