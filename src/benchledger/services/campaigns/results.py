"""Per-case results and the attempt history: ``results``, ``iter_results``, ``attempts``.

Every read is a keyset page (or a stream of pages) over the campaign's items
in (locale, case key) code-point order, through
:class:`~benchledger.repositories.campaigns.results.ResultReads`; memory stays
bounded by the page, whatever the campaign's size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from benchledger.domain import campaign as dom
from benchledger.domain.attempts import Attempt
from benchledger.domain.campaign import WorkStatus, blocked
from benchledger.domain.results import (
    DEFAULT_PASS_SCORE,
    AttemptsPage,
    ItemResult,
    ResultsPage,
    result_passed,
    result_score,
)
from benchledger.repositories.campaigns.results import ResultReads
from benchledger.services.campaigns.context import CampaignContext

#: Items per page when ``iter_results`` streams a whole campaign.
EXPORT_PAGE: Final = 1_000


def pass_score_of(context: CampaignContext) -> float:
    """The pass threshold of the service's report builder (the default one's is 0.5)."""
    score = getattr(context.report_builder, "pass_score", DEFAULT_PASS_SCORE)
    return float(score) if isinstance(score, int | float) else DEFAULT_PASS_SCORE


def _campaign_id(campaign_id: Any) -> str:
    if not dom.is_campaign_id(campaign_id):
        raise blocked(dom.NOT_FOUND)
    return str(campaign_id)


def _status(status: Any) -> str | None:
    if status is None:
        return None
    if not isinstance(status, str) or status not in WorkStatus.__members__.values():
        raise blocked(dom.FILTER_INVALID)
    return str(WorkStatus(status))


def _locale(locale: Any) -> str | None:
    if locale is None:
        return None
    if not dom.is_identifier(locale):
        raise blocked(dom.FILTER_INVALID)
    return str(locale)


def _is_work_id(value: Any) -> bool:
    return isinstance(value, str) and dom.WORK_ID.fullmatch(value) is not None


def _require_campaign(reads: ResultReads, campaign_id: str) -> None:
    """``not_found``; ``archived`` once its items, results and history were dropped."""
    archived = reads.campaign_archived(campaign_id)
    if archived is None:
        raise blocked(dom.NOT_FOUND)
    if archived:
        raise blocked(dom.ARCHIVED)


def results(
    context: CampaignContext,
    campaign_id: Any,
    *,
    status: Any = None,
    locale: Any = None,
    cursor: Any = None,
    limit: Any = 100,
) -> ResultsPage:
    """``CampaignService.results``: one page of items with their results and history."""
    cid = _campaign_id(campaign_id)
    wanted, where = _status(status), _locale(locale)
    size = dom.list_limit(limit)
    if cursor is not None and not _is_work_id(cursor):
        raise blocked(dom.PAGE_INVALID)
    pass_score = pass_score_of(context)
    with context.db.read() as session:
        reads = ResultReads(session.connection())
        _require_campaign(reads, cid)
        after = None
        if cursor is not None:
            after = reads.cursor_key(cid, cursor)
            if after is None:
                raise blocked(dom.PAGE_INVALID)
        rows = reads.page(cid, status=wanted, locale=where, after=after, limit=size + 1)
        shown = rows[:size]
        history = reads.attempt_summaries([row[0] for row in shown])
    items = tuple(item_result(row, history.get(row[0]), pass_score) for row in shown)
    more = len(rows) > size
    return ResultsPage(items, items[-1].work_id if more and items else None)


def iter_results(
    context: CampaignContext,
    campaign_id: Any,
    *,
    status: Any = None,
    locale: Any = None,
    page_size: int = EXPORT_PAGE,
) -> Iterator[ItemResult]:
    """Every item in order, from one read transaction: one cursor over the items, read
    ``page_size`` at a time, and each batch's history counts in one more statement.

    The arguments are checked before the first item is read (a generator's body runs
    only when iterated: the checks are done here, the reading in ``_stream``).
    """
    cid = _campaign_id(campaign_id)
    wanted, where = _status(status), _locale(locale)
    return _stream(context, cid, wanted, where, page_size)


def _stream(
    context: CampaignContext, cid: str, status: str | None, locale: str | None, batch: int
) -> Iterator[ItemResult]:
    pass_score = pass_score_of(context)
    with context.db.read() as session:
        reads = ResultReads(session.connection())
        _require_campaign(reads, cid)
        for rows in reads.stream_items(cid, status=status, locale=locale, batch=batch):
            history = reads.attempt_summaries([row[0] for row in rows])
            for row in rows:
                yield item_result(row, history.get(row[0]), pass_score)


def attempts(
    context: CampaignContext,
    campaign_id: Any,
    *,
    work_id: Any = None,
    cursor: Any = None,
    limit: Any = 100,
) -> AttemptsPage:
    """``CampaignService.attempts``: the attempt history, in the order it was recorded."""
    cid = _campaign_id(campaign_id)
    if work_id is not None and not _is_work_id(work_id):
        raise blocked(dom.FILTER_INVALID)
    size = dom.list_limit(limit)
    after = _attempt_cursor(cursor)
    with context.db.read() as session:
        reads = ResultReads(session.connection())
        _require_campaign(reads, cid)
        if after is not None and not reads.has_attempt(cid, after):
            raise blocked(dom.PAGE_INVALID)
        rows = reads.attempts(cid, work_id=work_id, after=after, limit=size + 1)
    shown = rows[:size]
    more = len(rows) > size
    return AttemptsPage(
        tuple(_attempt(row) for row in shown), str(shown[-1][0]) if more and shown else None
    )


def _attempt_cursor(cursor: Any) -> int | None:
    if cursor is None:
        return None
    if not (isinstance(cursor, str) and cursor.isascii() and cursor.isdigit() and len(cursor) < 19):
        raise blocked(dom.PAGE_INVALID)
    return int(cursor)


def _attempt(row: tuple[Any, ...]) -> Attempt:
    _id, work_id, number, worker, claimed, finished, outcome, code, duration = row
    return Attempt(
        work_id=work_id,
        attempt=int(number),
        worker_id=worker,
        claimed_at=None if claimed is None else float(claimed),
        finished_at=float(finished),
        outcome=outcome,
        error_code=code,
        duration_seconds=None if duration is None else float(duration),
    )


def item_result(
    row: tuple[Any, ...],
    history: tuple[dict[str, int], float | None, float | None] | None,
    pass_score: float,
) -> ItemResult:
    """One item as ``results()`` shows it: ``row`` is (work id, locale, case key, status,
    attempts, error code, result text), ``history`` its attempts' summary, if any."""
    work_id, locale, case_key, status, tries, error_code, result_json = row
    score = passed = None
    if status == WorkStatus.SUCCEEDED and result_json is not None:
        result = json.loads(result_json)
        if isinstance(result, dict):
            score, passed = result_score(result), result_passed(result, pass_score)
    counts, first, last = history if history is not None else ({}, None, None)
    return ItemResult(
        work_id=work_id,
        locale=locale,
        case_key=case_key,
        status=status,
        attempts=int(tries),
        score=score,
        passed=passed,
        error_code=error_code,
        first_attempt_at=None if first is None else float(first),
        last_attempt_at=None if last is None else float(last),
        outcomes=counts,
    )
