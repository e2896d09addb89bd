"""``CampaignService.archive``: a finished campaign's items dropped, its report kept.

Retention for campaigns whose report is final. In order, and refused (with the
database unchanged) at the first step that fails:

1. one read snapshot of the campaign row and its report rows by key:
   ``not_found``; ``archived`` (it already is); ``incomplete`` (an item has not
   succeeded); ``report_missing`` (the report is not final);
2. the integrity audit, run now (the one ``verify`` runs, not recorded): any
   problem beyond clock skew is ``integrity_failed`` (``policy_unregistered`` for
   a legacy campaign never registered), so only a report that verifies against
   every result it covers is kept in their place;
3. one more pass over the items (one cursor, ``EXPORT_BATCH`` at a time): each
   result text hashed again and the digests folded into the results' digest,
   which must be the audit's and the report's (``state_invalid`` otherwise: an
   item changed since the audit); the per-locale summary counted
   (:class:`~benchledger.domain.campaign_archive.SummaryTally`, at the report's
   pass score); and, when an ``export`` is given, every item handed to it as it
   is read (``export_incomplete`` when it stops early);
4. one write transaction: the items locked, the report rows checked again by
   key, the facts recorded on the campaign row (a compare-and-set: a concurrent
   archive makes this one ``archived``) with the audit that allowed them, then
   the attempt history, the claim log and the items deleted, one statement each
   (``state_invalid`` if the item count is not the work count).

Memory stays one batch of items whatever the campaign's size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Generator, Iterator
from typing import Any, Final

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import WorkStatus, blocked
from benchledger.domain.campaign_archive import ArchiveOutcome, SummaryTally, archive_seal
from benchledger.domain.canonical import canonical_json
from benchledger.domain.integrity import IntegrityReport, Problem, ResultsDigest
from benchledger.domain.results import ItemResult, result_passed, result_score
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.archive import (
    WORK,
    ArchiveReads,
    ArchiveRepository,
    report_final,
)
from benchledger.repositories.campaigns.reads import read_snapshot
from benchledger.repositories.campaigns.results import ResultReads
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.integrity import CampaignInspector
from benchledger.services.campaigns.results import item_result, pass_score_of

#: Items per batch of the archive's pass over the items.
EXPORT_BATCH: Final = 1_000

Export = Callable[[Iterator[dict[str, Any]]], object]
"""Takes every item of the campaign, in (locale, case key) order, before it is dropped."""


def _refused(code: str, message: str) -> CampaignBlocked:
    return CampaignBlocked(code, message)


def report_pass_score(report: Any, context: CampaignContext) -> float:
    """The pass score the report was built with (its ``pass_score``), else the builder's."""
    score = report.get("pass_score") if isinstance(report, dict) else None
    if isinstance(score, int | float) and not isinstance(score, bool) and 0 <= score <= 1:
        return float(score)
    return pass_score_of(context)


def _audit_refusal(found: IntegrityReport) -> CampaignBlocked:
    kinds = {problem.kind for problem in found.problems}
    if Problem.NOT_FOUND in kinds:
        return _refused(dom.NOT_FOUND, "no such campaign in this database")
    if Problem.POLICY_UNREGISTERED in kinds:
        return _refused(
            dom.POLICY_UNREGISTERED, "register the campaign's policy and suite before archiving"
        )
    return _refused(
        dom.INTEGRITY_FAILED,
        f"the integrity audit found {found.problem_count} problem(s) "
        f"({', '.join(found.reasons)}): nothing was archived; `campaign verify` says which rows",
    )


def export_record(item: ItemResult, result_sha256: str, result: Any) -> dict[str, Any]:
    """One exported item: ``campaign results --format jsonl``'s columns, then the stored
    result's sha256 and the result itself (as stored)."""
    return {**item.as_dict(), "result_sha256": result_sha256, "result": result}


class _Pass:
    """The archive's pass over the items: their digest, the summary, the export's records."""

    def __init__(self, campaign_id: str, pass_score: float, with_records: bool) -> None:
        self.campaign_id = campaign_id
        self.pass_score = pass_score
        self.with_records = with_records
        self.tally = SummaryTally()
        self.digest = ResultsDigest()
        self.handed = 0

    def records(
        self, reads: ArchiveReads, history: ResultReads
    ) -> Generator[dict[str, Any], None, None]:
        for rows in reads.items(self.campaign_id, EXPORT_BATCH):
            summaries = (
                history.attempt_summaries([row[0] for row in rows]) if self.with_records else {}
            )
            for row in rows:
                work_id, locale, _key, status, _tries, _code, text, digest = row
                if status != WorkStatus.SUCCEEDED or not isinstance(text, str):
                    raise _refused(dom.STATE_INVALID, "an item changed since the audit")
                if hashlib.sha256(text.encode("utf-8")).hexdigest() != digest:
                    raise _refused(dom.STATE_INVALID, "a result changed since the audit")
                self.digest.add(digest)
                result = json.loads(text)
                score = result_score(result) if isinstance(result, dict) else None
                passed = result_passed(result, self.pass_score) if score is not None else None
                self.tally.add(
                    locale, True, None if score is None or passed is None else (score, passed)
                )
                if not self.with_records:
                    continue
                item = item_result(row[:7], summaries.get(work_id), self.pass_score)
                self.handed += 1
                yield export_record(item, digest, result)


def archive(
    context: CampaignContext,
    inspector: CampaignInspector,
    campaign_id: Any,
    now: float | None,
    export: Export | None,
) -> ArchiveOutcome:
    """``CampaignService.archive`` (see the module doc)."""
    if not dom.is_campaign_id(campaign_id):
        raise _refused(dom.NOT_FOUND, "not a campaign id (benchmark-campaign-<64 hex digits>)")
    if export is not None and not callable(export):
        raise blocked(dom.DEPENDENCY_INVALID)
    cid = str(campaign_id)
    current = context.now(now)

    with read_snapshot(context.db.engine) as connection:
        reads = ArchiveReads(connection)
        row = reads.campaign(cid)
        if row is None:
            raise _refused(dom.NOT_FOUND, "no such campaign in this database")
        if row.archived_at is not None:
            raise _refused(dom.ARCHIVED, "the campaign is archived already")
        if reads.has_unfinished(cid):
            raise _refused(dom.INCOMPLETE, "not every item has succeeded: nothing to archive yet")
        bound = reads.report(cid)
    if not report_final(bound):
        raise _refused(dom.REPORT_MISSING, "the campaign's report is not final")
    work_count = int(row.work_count)

    run = inspector.audit(cid, current)
    found = run.result(cid)
    if found.blocking or run.report is None or run.report_row is None:
        raise _audit_refusal(found)
    report_sha256 = str(run.report_row.report_sha256)
    results_sha256 = run.report_row.results_sha256
    if report_sha256 != bound.report_sha256 or results_sha256 != run.results_digest:
        raise _refused(dom.STATE_INVALID, "the report changed during the audit")

    items = _Pass(cid, report_pass_score(run.report, context), export is not None)
    with context.db.read() as session:
        connection = session.connection()
        records = items.records(ArchiveReads(connection), ResultReads(connection))
        try:
            if export is None:
                for _ in records:
                    pass
            else:
                export(records)
                taken = items.handed
                if next(records, None) is not None:
                    raise _refused(
                        dom.EXPORT_INCOMPLETE,
                        f"the export stopped after {taken} of {work_count} items: "
                        "nothing was archived",
                    )
        finally:
            records.close()
    if items.tally.count != work_count or items.digest.hexdigest() != results_sha256:
        raise _refused(dom.STATE_INVALID, "the items changed since the audit")

    summary = items.tally.payload(items.pass_score)
    summary_json = canonical_json(summary)
    facts = {
        "archived_at": current,
        "archived_items": work_count,
        "archived_results_sha256": results_sha256,
        "archived_summary_json": summary_json,
        "archived_seal": archive_seal(
            cid, current, work_count, results_sha256, summary_json, report_sha256
        ),
        # The audit just run is the campaign's last one: recorded with what it allowed.
        "verified_at": current,
        "verified_ok": True,
        "verified_problems": found.problem_count,
    }
    with context.db.write() as session:
        repo = ArchiveRepository(session)
        stored = repo.lock_items(cid)
        kept = repo.report(cid)
        if (
            not report_final(kept)
            or kept.report_sha256 != report_sha256
            or kept.results_sha256 != results_sha256
        ):
            raise _refused(dom.STATE_INVALID, "the report changed during the archive")
        if not repo.record(cid, current, facts):
            again = ArchiveReads(session.connection()).campaign(cid)
            if again is None:
                raise _refused(dom.NOT_FOUND, "the campaign was deleted meanwhile")
            raise _refused(dom.ARCHIVED, "the campaign was archived meanwhile")
        if stored != work_count:
            raise _refused(dom.STATE_INVALID, "the items changed during the archive")
        dropped = repo.drop(cid)
        if dropped[WORK.name] != work_count:
            raise _refused(dom.STATE_INVALID, "the items changed during the archive")
    return ArchiveOutcome(
        campaign_id=cid,
        archived_at=current,
        items=work_count,
        results_sha256=results_sha256,
        report_sha256=report_sha256,
        summary=summary,
        dropped=dropped,
        exported=items.handed if export is not None else None,
    )


def archived_summary(row: Any) -> dict[str, Any] | None:
    """The per-locale summary an archived campaign row keeps (``None``: not archived)."""
    text = getattr(row, "archived_summary_json", None)
    if getattr(row, "archived_at", None) is None or not isinstance(text, str):
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None
