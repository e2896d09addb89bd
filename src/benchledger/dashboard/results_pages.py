"""The results page and its JSON: a campaign's items table (a keyset page), the summary's
numbers and charts (from the monitor), and every item as CSV or Parquet, streamed.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from queue import Queue
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from benchledger.dashboard.pages import PAGE_MISSING, Pages
from benchledger.dashboard.queries import choice_query, int_query, text_query
from benchledger.domain.campaign import STATUSES
from benchledger.domain.campaign_codes import ARCHIVED
from benchledger.errors import CampaignBlocked, LedgerError
from benchledger.services.campaigns.actions import short_id


class ResultsPages:
    """``/campaigns/{id}/results`` and its ``/api`` routes, downloads included."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages

    def _results_query(self, request: Request) -> dict[str, Any]:
        return {
            "status": choice_query(request, "status", STATUSES),
            "locale": text_query(request, "locale"),
        }

    def results_page(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            campaign_id = self.pages.campaign_id(request)
            status = self.pages.campaigns.status(campaign_id)
            query = self._results_query(request)
            cursor = text_query(request, "cursor")
            limit = int_query(request, "limit", 50)
            items = self.pages.campaigns.results(campaign_id, cursor=cursor, limit=limit, **query)
            summary = self.pages.monitor.results(
                campaign_id, status.work_count, _fingerprint(status)
            )
            return self.pages.render(
                request,
                "results.html",
                status=status,
                summary=summary,
                items=items,
                query={key: value for key, value in query.items() if value},
                limit=limit,
                cursor=cursor,
                active="campaigns",
            )

        return self.pages.page(request, api=False, build=build)

    def api_results(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            campaign_id = self.pages.campaign_id(request)
            query = self._results_query(request)
            limit = int_query(request, "limit", 50)
            page = self.pages.campaigns.results(
                campaign_id, cursor=text_query(request, "cursor"), limit=limit, **query
            )
            return JSONResponse(
                {
                    "campaign_id": campaign_id,
                    **query,
                    "limit": limit,
                    "items": [item.as_dict() for item in page.items],
                    "next_cursor": page.next_cursor,
                }
            )

        return self.pages.page(request, api=True, build=build)

    def api_results_summary(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.pages.campaigns.status(self.pages.campaign_id(request))
            if status.archived_at is not None:  # its items were dropped: nothing to count
                raise CampaignBlocked(ARCHIVED)
            summary = self.pages.monitor.results(
                status.campaign_id, status.work_count, _fingerprint(status)
            )
            if summary is None:
                return JSONResponse({"checking": True}, 202)
            return JSONResponse(summary.as_payload())

        return self.pages.page(request, api=True, build=build)

    def download(self, request: Request) -> Response:
        """Every item (filtered) as CSV or Parquet, streamed: ``benchledger.analysis``."""

        def build(request: Request, api: bool) -> Response:
            export = request.path_params["export"]
            if export not in ("csv", "parquet"):
                raise LedgerError(PAGE_MISSING, "no such page")
            campaign_id = self.pages.campaign_id(request)
            query = self._results_query(request)
            # Refusals (bad filter, unknown campaign) before the first byte is sent.
            self.pages.campaigns.results(campaign_id, limit=1, **query)
            from benchledger import analysis

            if export == "parquet":
                analysis.arrow_schema()  # ledger.analysis.extra_missing without pyarrow
            items = self.pages.service.iter_results(campaign_id, **query)
            # The file name carries the filters in ASCII letters, digits, '.', '-', '_' only.
            suffix = re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(v for v in query.values() if v))
            name = f"{short_id(campaign_id)}-results{'-' + suffix if suffix else ''}.{export}"
            media = (
                "text/csv; charset=utf-8" if export == "csv" else "application/vnd.apache.parquet"
            )
            return StreamingResponse(
                _streamed(
                    lambda out: analysis.write_items(items, out, export), text=export == "csv"
                ),
                media_type=media,
                headers={"content-disposition": f'attachment; filename="{name}"'},
            )

        return self.pages.page(request, api=True, build=build)


def _fingerprint(status: Any) -> tuple[Any, ...]:
    """What changes when a campaign's results can have: its counts and its last update."""
    return (*sorted(status.counts.items()), status.updated_at)


class _Sink:
    """A write-only file whose writes go, in chunks of about 64 KB, to a bounded queue."""

    CHUNK = 1 << 16

    def __init__(self, queue: Queue[Any], stopped: threading.Event) -> None:
        self.queue = queue
        self.stopped = stopped
        self.buffer = bytearray()
        self.written = 0

    def write(self, data: bytes | str) -> int:
        if self.stopped.is_set():
            raise BrokenPipeError("the client went away")
        chunk = data.encode() if isinstance(data, str) else bytes(data)
        self.buffer += chunk
        self.written += len(chunk)
        if len(self.buffer) >= self.CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buffer:
            self.queue.put(bytes(self.buffer))
            self.buffer.clear()

    def tell(self) -> int:
        return self.written

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return False

    def close(self) -> None:
        """Parquet's writer closes its file; the stream ends after ``write`` returns."""


_END = object()


def _streamed(write: Callable[[Any], object], *, text: bool) -> Iterator[bytes]:
    """What ``write(file)`` writes, as chunks: it runs in a thread into a bounded queue
    (memory stays at a few chunks whatever the size); a client that goes away stops it."""
    queue: Queue[Any] = Queue(maxsize=8)
    stopped = threading.Event()
    sink = _Sink(queue, stopped)

    def run() -> None:
        try:
            write(sink)
            sink.flush()
            queue.put(_END)
        except BaseException as error:
            queue.put(error)

    worker = threading.Thread(target=run, name="dashboard-download", daemon=True)
    worker.start()
    try:
        while (chunk := queue.get()) is not _END:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
    finally:
        stopped.set()
        while worker.is_alive():  # unblock a writer waiting on a full queue
            with contextlib.suppress(Exception):
                queue.get_nowait()
            worker.join(timeout=0.05)
