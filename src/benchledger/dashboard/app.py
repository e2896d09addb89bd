"""The dashboard's ASGI application: read-only pages and their JSON under ``/api``.

Every route answers ``GET`` (and ``HEAD``) only; anything else is ``405``.
When a token is configured, every request must carry it (``Authorization:
Bearer``, the ``benchledger_token`` cookie, or once as ``?token=`` which sets
that cookie), compared in constant time. Templates autoescape everything;
the Content-Security-Policy allows only this server's own scripts and styles.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hmac
import math
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from pathlib import Path
from queue import Queue
from typing import Any, Final

import attrs
import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from benchledger.dashboard import reference
from benchledger.dashboard.monitor import Monitor
from benchledger.db import Database
from benchledger.domain.campaign import STATUSES, ListOrder
from benchledger.domain.campaign_codes import (
    DEPENDENCY_PREFIX,
    NOT_FOUND,
    REASON_FAILED,
    REASON_REPORT_ERROR_PREFIX,
    REASON_REPORT_FAILED,
    code_of_reason,
)
from benchledger.domain.campaign_comparison import CampaignComparison
from benchledger.domain.campaign_labels import CampaignFilter, Candidate
from benchledger.errors import LedgerError, StudyError
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.services.campaigns.views import MAX_PAGE, CampaignViews
from benchledger.services.studies.views import StudyViews

HERE = Path(__file__).resolve().parent
TOKEN_COOKIE = "benchledger_token"
NONE = "\N{EN DASH}"  # what a page shows for no value
#: The dashboard's own refusals (documented in docs/errors.md).
UNAUTHORIZED = "ledger.dashboard.unauthorized"
PAGE_MISSING = "ledger.dashboard.page_missing"
QUERY_INVALID = "ledger.dashboard.query_invalid"
#: The compare page's bootstrap: fewer resamples than the command line's 10,000 by default
#: (a page should answer in about a second on a large campaign), seeded (reproducible).
COMPARE_RESAMPLES: Final = 2_000
MAX_COMPARE_RESAMPLES: Final = 10_000
#: Flips shown per page of the compare page.
FLIPS_PER_PAGE: Final = 100
#: Comparisons kept (a comparison reads both campaigns: re-reading one is not free).
COMPARISONS_KEPT: Final = 8
#: Query parameters: ASCII digits only (``int()`` would take Arabic-Indic or fullwidth
#: digits, blanks around them, and underscores between them).
_DIGITS = re.compile(r"[0-9]{1,19}")
#: The largest integer a query parameter may be (a signed 64-bit database integer).
MAX_QUERY_INT: Final = 2**63 - 1
#: The longest text a query parameter may be.
MAX_QUERY_TEXT: Final = 256

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


@attrs.frozen
class DashboardSettings:
    """How the dashboard runs: refresh interval of the pages, background checks, token."""

    token: str | None = None
    poll_seconds: float = 2.0
    health_refresh_seconds: float = 10.0
    inline_check_items: int = 2_000
    stale_after_seconds: float = 3600.0


# -- formatting (template filters) -------------------------------------------------------


def _when(value: float | None) -> str:
    if value is None:
        return NONE
    moment = dt.datetime.fromtimestamp(float(value), dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return NONE
    sign = "-" if value < 0 else ""
    seconds = round(abs(value))
    if seconds < 60:
        return f"{sign}{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{sign}{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h {minutes:02d}m"
    return f"{sign}{hours // 24}d {hours % 24}h"


def _number(value: float | int | None) -> str:
    if value is None:
        return NONE
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def _percent(value: float | None) -> str:
    return NONE if value is None else f"{100 * float(value):.1f}%"


def _short(value: str | None, keep: int = 12) -> str:
    if value is None:
        return NONE
    return value if len(value) <= keep + 1 else value[:keep] + "…"


def _code(value: str | None) -> str:
    """An error code, in full (one spelling per code on every surface)."""
    return NONE if value is None else value


def _short_id(value: str) -> str:
    """The 12 hex digits the command line prints (a prefix URLs accept)."""
    return short_id(value)


def _seconds(value: float | None) -> str:
    """A duration of a second or more as :func:`_duration`, a shorter one in ms."""
    if value is None or not math.isfinite(value):
        return NONE
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 10:
        return f"{value:.2f} s"
    return _duration(value)


def _score(value: float | None) -> str:
    return NONE if value is None else f"{value:.3f}"


def _pvalue(value: float | None) -> str:
    if value is None:
        return NONE
    return "< 0.0001" if value < 0.0001 else f"{value:.4f}"


def _signed(value: float | None, percent: bool = False) -> str:
    if value is None:
        return NONE
    return f"{100 * value:+.1f} pp" if percent else f"{value:+.3f}"


def reason_label(reason: str) -> str:
    """A health reason as the command line words it: an error reason is the full code it
    names and whose last error it is; any other reason is itself."""
    code = code_of_reason(reason)
    if code is None:
        return reason
    whose = (
        "last error of the report finalization"
        if reason.startswith(REASON_REPORT_ERROR_PREFIX)
        else "last error of some items"
    )
    if code.startswith(DEPENDENCY_PREFIX):
        whose += " (the evaluator's code)"
    return f"{whose}: {code}"


def reason_code(reason: str) -> str:
    """The full error code an error reason names, else the reason itself."""
    return code_of_reason(reason) or reason


def _label(name: str | None, candidate: Candidate) -> str:
    """A campaign's name (if any) and candidate, as the command line shows them."""
    return f"{name} · {candidate.label}" if name else candidate.label


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        when=_when,
        duration=_duration,
        number=_number,
        percent=_percent,
        short=_short,
        code=_code,
        short_id=_short_id,
        seconds=_seconds,
        score=_score,
        pvalue=_pvalue,
        signed=_signed,
        reason_label=reason_label,
        reason_code=reason_code,
    )
    environment.globals.update(
        explain=reference.explain,
        label=_label,
        statuses=STATUSES,
        page_max=MAX_PAGE,
        compare_resamples=COMPARE_RESAMPLES,
    )
    return environment


# -- security ------------------------------------------------------------------------------


class TokenGate:
    """Refuses every request without the token (constant-time compare); adds security headers."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    def _matches(self, candidate: str | None) -> bool:
        if self.token is None:
            return True
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        query_token = request.query_params.get("token")
        response: Response | None = None
        if self._matches(query_token) and query_token is not None and self.token is not None:
            # Trade the token in the address for a cookie, and drop it from the address.
            response = RedirectResponse(str(request.url.remove_query_params("token")), 303)
            response.set_cookie(
                TOKEN_COOKIE, query_token, httponly=True, samesite="strict", path="/"
            )
        elif not (self._matches(bearer) or self._matches(request.cookies.get(TOKEN_COOKIE))):
            response = JSONResponse(
                {"error": UNAUTHORIZED, "message": "this dashboard needs its token"}, 401
            )
        if response is not None:
            response.headers.update(SECURITY_HEADERS)
            await response(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                await send({**message, "headers": headers})
                return
            await send(message)

        await self.app(scope, receive, send_with_headers)


# -- the application ---------------------------------------------------------------------


class Dashboard:
    """Routes over the read-only views; one instance per served database."""

    def __init__(
        self, db: Database, settings: DashboardSettings, clock: Callable[[], float]
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.service = CampaignService(db, clock=clock)
        self.campaigns = CampaignViews(db, clock=clock, campaigns=self.service)
        self.studies = StudyViews(db)
        self.monitor = Monitor(
            self.service,
            self.campaigns,
            refresh_seconds=settings.health_refresh_seconds,
            inline_items=settings.inline_check_items,
            stale_after_seconds=settings.stale_after_seconds,
            clock=clock,
        )
        self.templates = _environment()
        self.database_label = _database_label(db)
        self._comparisons: OrderedDict[tuple[Any, ...], CampaignComparison] = OrderedDict()
        self._comparisons_lock = threading.Lock()

    # -- helpers -------------------------------------------------------------------------

    def render(
        self, request: Request, name: str, http_status: int = 200, **context: Any
    ) -> Response:
        context.setdefault("active", "")
        html = self.templates.get_template(name).render(
            request=request,
            database=self.database_label,
            poll_ms=int(self.settings.poll_seconds * 1000),
            now=self.clock(),
            **context,
        )
        return HTMLResponse(html, http_status)

    def refuse(self, request: Request, error: LedgerError, api: bool) -> Response:
        """A coded refusal: JSON under /api, else a page saying what the code means."""
        status = _http_status(error)
        payload = {"error": error.code, "message": _message(error)}
        if api:
            return JSONResponse(payload, status)
        return self.render(
            request,
            "error.html",
            status,
            code=error.code,
            message=payload["message"],
            explanation=reference.explain(error.code),
        )

    def _health(self, campaign_id: str, work_count: int) -> dict[str, Any] | None:
        check = self.monitor.health(campaign_id, work_count)
        if check is None:
            return None
        return {
            **check.as_payload(),
            "explained": [_explained(code, campaign_id) for code in check.health.reasons],
            # each reason's code in full (an error reason names the item's full error code)
            "reason_codes": [reason_code(reason) for reason in check.health.reasons],
        }

    def _campaign_id(self, request: Request) -> str:
        """The path's campaign: a whole id, or a unique prefix of one (the CLI's short id)."""
        return self.campaigns.resolve(request.path_params["campaign_id"])

    def _report(self, status: Any) -> dict[str, Any]:
        """The report's state for a page: waiting, checking, refused, or verified."""
        if status.report_finalization["status"] != "succeeded":
            return {"state": "waiting", "report": None, "error": None}
        check = self.monitor.report(status.campaign_id, status.work_count)
        if check is None:
            return {"state": "checking", "report": None, "error": None}
        if check.report is None:
            return {"state": "refused", "report": None, "error": check.error}
        return {"state": "final", "report": check.report, "error": None}

    def campaign_payload(self, campaign_id: str) -> dict[str, Any]:
        snapshot = self.campaigns.snapshot(campaign_id, completions=self.monitor.completions)
        status = snapshot.status
        report = self._report(status)
        return {
            **snapshot.as_payload(),
            "label": _label(status.name, status.candidate),
            "flow": self.campaigns.flow(status.campaign_id).as_payload(),
            "health": self._health(status.campaign_id, status.work_count),
            "report": {"state": report["state"], "error": report["error"]},
        }

    # -- pages ---------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        return RedirectResponse("/campaigns", 307)

    def campaign_list(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._campaign_list)

    def api_campaign_list(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._campaign_list)

    def _campaign_list(self, request: Request, api: bool) -> Response:
        order = _choice_query(request, "order", tuple(ListOrder)) or ListOrder.OLDEST
        filters = {
            name: _text_query(request, name) for name in ("provider", "model", "suite", "name")
        }
        where = CampaignFilter(**filters) if any(filters.values()) else None
        page = self.campaigns.page(
            cursor=_text_query(request, "cursor"),
            limit=_int_query(request, "limit", 20),
            newest_first=order == ListOrder.NEWEST,
            completions=self.monitor.completions,
            where=where,
        )
        health = {
            overview.campaign_id: self._health(overview.campaign_id, overview.work_count)
            for overview in page.campaigns
            if overview.status is not None
        }
        if api:
            payload = page.as_payload()
            for item in payload["campaigns"]:
                item["health"] = health.get(item["campaign_id"])
            return JSONResponse(payload)
        kept = {name: value for name, value in filters.items() if value}
        return self.render(
            request,
            "campaigns.html",
            page=page,
            health=health,
            order=order,
            filters=kept,
            active="campaigns",
        )

    def campaign(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._campaign)

    def api_campaign(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._campaign)

    def _campaign(self, request: Request, api: bool) -> Response:
        campaign_id = self._campaign_id(request)
        if api:
            return JSONResponse(self.campaign_payload(campaign_id))
        snapshot = self.campaigns.snapshot(campaign_id, completions=self.monitor.completions)
        status = snapshot.status
        return self.render(
            request,
            "campaign.html",
            snapshot=snapshot,
            status=status,
            flow=self.campaigns.flow(status.campaign_id),
            health=self._health(status.campaign_id, status.work_count),
            report=self._report(status),
            provisional=self._provisional(status),
            active="campaigns",
        )

    def _provisional(self, status: Any) -> dict[str, Any] | None:
        """A blocked (or unfinished) campaign's provisional report: what succeeded so far.

        ``load_report(provisional=True)`` streams the items (O(items)): read only for
        a campaign the monitor reads inline, or from the results summary's cache.
        """
        if status.report_finalization["status"] == "succeeded":
            return None
        if status.work_count > self.settings.inline_check_items:
            return None
        try:
            return self.service.load_report(status.campaign_id, provisional=True)
        except LedgerError:
            return None

    def api_status(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(self._campaign_id(request))
            return JSONResponse(status.as_payload())

        return self._page(request, api=True, build=build)

    def api_health(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(self._campaign_id(request))
            health = self._health(status.campaign_id, status.work_count)
            if health is None:
                return JSONResponse({"checking": True}, 202)
            return JSONResponse(health)

        return self._page(request, api=True, build=build)

    def api_report(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(self._campaign_id(request))
            report = self._report(status)
            if report["state"] == "checking":
                return JSONResponse({"checking": True}, 202)
            if report["report"] is None:
                code = report["error"] or "benchmark.campaign.report_missing"
                return JSONResponse({"error": code, "message": _words(code)}, 409)
            response = JSONResponse(report["report"])
            if "download" in request.query_params:
                name = f"{status.campaign_id}-report.json"
                response.headers["content-disposition"] = f'attachment; filename="{name}"'
            return response

        return self._page(request, api=True, build=build)

    # -- results ---------------------------------------------------------------------

    def _results_query(self, request: Request) -> dict[str, Any]:
        return {
            "status": _choice_query(request, "status", STATUSES),
            "locale": _text_query(request, "locale"),
        }

    def results_page(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            campaign_id = self._campaign_id(request)
            status = self.campaigns.status(campaign_id)
            query = self._results_query(request)
            cursor = _text_query(request, "cursor")
            limit = _int_query(request, "limit", 50)
            items = self.campaigns.results(campaign_id, cursor=cursor, limit=limit, **query)
            summary = self.monitor.results(campaign_id, status.work_count, _fingerprint(status))
            return self.render(
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

        return self._page(request, api=False, build=build)

    def api_results(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            campaign_id = self._campaign_id(request)
            query = self._results_query(request)
            limit = _int_query(request, "limit", 50)
            page = self.campaigns.results(
                campaign_id, cursor=_text_query(request, "cursor"), limit=limit, **query
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

        return self._page(request, api=True, build=build)

    def api_results_summary(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(self._campaign_id(request))
            summary = self.monitor.results(
                status.campaign_id, status.work_count, _fingerprint(status)
            )
            if summary is None:
                return JSONResponse({"checking": True}, 202)
            return JSONResponse(summary.as_payload())

        return self._page(request, api=True, build=build)

    def download(self, request: Request) -> Response:
        """Every item (filtered) as CSV or Parquet, streamed: ``benchledger.analysis``."""

        def build(request: Request, api: bool) -> Response:
            export = request.path_params["export"]
            if export not in ("csv", "parquet"):
                raise LedgerError(PAGE_MISSING, "no such page")
            campaign_id = self._campaign_id(request)
            query = self._results_query(request)
            # Refusals (bad filter, unknown campaign) before the first byte is sent.
            self.campaigns.results(campaign_id, limit=1, **query)
            from benchledger import analysis

            if export == "parquet":
                analysis.arrow_schema()  # ledger.analysis.extra_missing without pyarrow
            items = self.service.iter_results(campaign_id, **query)
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

        return self._page(request, api=True, build=build)

    # -- compare ---------------------------------------------------------------------

    def _compare_side(self, request: Request, name: str) -> str | None:
        given = _text_query(request, name)
        if given is None:
            return None
        try:
            return self.campaigns.status(self.campaigns.resolve(given)).campaign_id
        except LedgerError as error:
            if error.code == NOT_FOUND:
                raise LedgerError(QUERY_INVALID, f"{name}: no campaign has this id") from None
            raise

    def _comparison(self, a: str, b: str, seed: int, resamples: int) -> CampaignComparison:
        """``compare`` of the two, kept while neither campaign changed (a few are kept)."""
        key = (
            a,
            b,
            seed,
            resamples,
            self.campaigns.status(a).updated_at,
            self.campaigns.status(b).updated_at,
        )
        with self._comparisons_lock:
            kept = self._comparisons.get(key)
            if kept is not None:
                self._comparisons.move_to_end(key)
                return kept
        comparison = self.campaigns.compare(a, b, seed=seed, resamples=resamples)
        with self._comparisons_lock:
            self._comparisons[key] = comparison
            while len(self._comparisons) > COMPARISONS_KEPT:
                self._comparisons.popitem(last=False)
        return comparison

    def compare(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._compare)

    def api_compare(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._compare)

    def _compare(self, request: Request, api: bool) -> Response:
        a = self._compare_side(request, "a")
        b = self._compare_side(request, "b")
        seed = _int_query(request, "seed", 0, high=2**32 - 1)
        resamples = _int_query(
            request, "resamples", COMPARE_RESAMPLES, low=100, high=MAX_COMPARE_RESAMPLES
        )
        flip_offset = _int_query(request, "flips_from", 0, high=MAX_QUERY_INT)
        if api:
            if a is None or b is None:
                raise LedgerError(QUERY_INVALID, "a and b name the two campaigns to compare")
            return JSONResponse(
                {
                    **self._comparison(a, b, seed, resamples).as_payload(),
                    "seed": seed,
                    "resamples": resamples,
                }
            )
        suite = self.campaigns.status(a).suite_sha256 if a is not None else None
        choices = self.campaigns.choices(suite)
        comparison: CampaignComparison | None = None
        error: str | None = None
        if a is not None and b is not None:
            try:
                comparison = self._comparison(a, b, seed, resamples)
            except LedgerError as refused:
                error = refused.code
        return self.render(
            request,
            "compare.html",
            a=a,
            b=b,
            suite=suite,
            choices=choices,
            comparison=comparison,
            error=error,
            seed=seed,
            resamples=resamples,
            flip_offset=flip_offset,
            flips_per_page=FLIPS_PER_PAGE,
            active="compare",
        )

    def favicon(self, request: Request) -> Response:
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    def study_list(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._study_list)

    def api_study_list(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._study_list)

    def _study_list(self, request: Request, api: bool) -> Response:
        page = self.studies.page(
            cursor=_text_query(request, "cursor"),
            limit=_int_query(request, "limit", 20),
        )
        if api:
            return JSONResponse(page.as_payload())
        return self.render(request, "studies.html", page=page, active="studies")

    def study(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._study)

    def api_study(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._study)

    def _study(self, request: Request, api: bool) -> Response:
        study_id = request.path_params["study_id"]
        snapshot = self.studies.study(study_id)
        if api:
            return JSONResponse(snapshot.as_payload())
        before = _int_query(request, "before", None)
        audit = self.studies.audit(study_id, before=before, limit=_int_query(request, "limit", 50))
        return self.render(request, "study.html", snapshot=snapshot, audit=audit, active="studies")

    def api_audit(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            audit = self.studies.audit(
                request.path_params["study_id"],
                before=_int_query(request, "before", None),
                limit=_int_query(request, "limit", 50),
            )
            return JSONResponse(audit.as_payload())

        return self._page(request, api=True, build=build)

    def not_found(self, request: Request, exc: Exception) -> Response:
        api = request.url.path.startswith("/api/")
        return self.refuse(request, LedgerError(PAGE_MISSING, "no such page"), api)

    def _page(
        self, request: Request, *, api: bool, build: Callable[[Request, bool], Response]
    ) -> Response:
        try:
            return build(request, api)
        except LedgerError as error:
            return self.refuse(request, error, api)


def _database_label(db: Database) -> str:
    """The database as the page names it: no password, ever."""
    import sqlalchemy as sa

    url = sa.make_url(db.url)
    if url.get_backend_name() == "sqlite":
        return f"SQLite {Path(url.database).name if url.database else '(memory)'}"
    return f"PostgreSQL {url.database or ''} on {url.host or 'local socket'}"


def _int_query(
    request: Request, name: str, default: int | None, *, low: int = 0, high: int = MAX_QUERY_INT
) -> Any:
    """The parameter as an integer in ``[low, high]``: ASCII digits only (no sign, blank,
    underscore or other script's digit); absent or empty: ``default``; else 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if _DIGITS.fullmatch(raw) is None or not low <= int(raw) <= high:
        raise LedgerError(QUERY_INVALID, f"{name} must be an integer from {low} to {high}")
    return int(raw)


def _text_query(request: Request, name: str) -> str | None:
    """The parameter as text (``None`` when absent or empty): at most 256 characters, no
    control character (a database refuses NUL); else 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_QUERY_TEXT or any(
        unicodedata.category(character) in ("Cc", "Cs") for character in raw
    ):
        raise LedgerError(
            QUERY_INVALID, f"{name} must be at most {MAX_QUERY_TEXT} plain characters"
        )
    return raw


def _choice_query(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise LedgerError(QUERY_INVALID, f"{name} is one of: {', '.join(choices)}")
    return raw


def _fingerprint(status: Any) -> tuple[Any, ...]:
    """What changes when a campaign's results can have: its counts and its last update."""
    return (*sorted(status.counts.items()), status.updated_at)


def _explained(reason: str, campaign_id: str) -> dict[str, Any]:
    """A health reason in words (the error reference), its label, and what to do; the
    failed items' advice is the command line's."""
    explained = reference.explain(reason).as_payload()
    explained["label"] = reason_label(reason)
    short = short_id(campaign_id)
    if reason == REASON_FAILED:
        explained["action"] = (
            f"benchledger campaign results {short} --status failed lists them (with their "
            f"work ids); once the cause is fixed, benchledger campaign retry {short} puts "
            "them back in the queue"
        )
    elif reason == REASON_REPORT_FAILED:
        explained["action"] = f"benchledger campaign retry {short} re-arms it"
    return explained


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


def _http_status(error: LedgerError) -> int:
    if isinstance(error, StudyError):
        return int(error.status)
    code = error.code
    if code.endswith(("not_found", "page_missing")):
        return 404
    if code.endswith(
        (
            "page_invalid",
            "query_invalid",
            "filter_invalid",
            "input_invalid",
            "id_ambiguous",
            "setting_invalid",
        )
    ):
        return 400
    if code.startswith("ledger.analysis."):
        return 501
    return 409


def _words(code: str) -> str:
    return reference.explain(code).meaning


def _message(error: LedgerError) -> str:
    # Campaign errors carry no text: say what the code means, from the error reference.
    return error.message if error.message != error.code else _words(error.code)


def create_app(
    db: Database | str,
    settings: DashboardSettings | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The dashboard on ``db`` (a :class:`Database` or a URL): a read-only ASGI app.

    ``clock`` (epoch seconds) is what "now" is for rates, ETAs, lease expiry and
    health; tests pass their own.
    """
    database = db if isinstance(db, Database) else Database(db)
    settings = settings or DashboardSettings()
    dashboard = Dashboard(database, settings, clock)
    read = ["GET", "HEAD"]
    routes = [
        Route("/", dashboard.home, methods=read),
        Route("/campaigns", dashboard.campaign_list, methods=read),
        Route("/favicon.ico", dashboard.favicon, methods=read),
        Route("/compare", dashboard.compare, methods=read),
        Route("/campaigns/{campaign_id}", dashboard.campaign, methods=read),
        Route("/campaigns/{campaign_id}/results", dashboard.results_page, methods=read),
        Route("/studies", dashboard.study_list, methods=read),
        Route("/studies/{study_id}", dashboard.study, methods=read),
        Route("/api/campaigns", dashboard.api_campaign_list, methods=read),
        Route("/api/campaigns/{campaign_id}", dashboard.api_campaign, methods=read),
        Route("/api/campaigns/{campaign_id}/status", dashboard.api_status, methods=read),
        Route("/api/campaigns/{campaign_id}/health", dashboard.api_health, methods=read),
        Route("/api/campaigns/{campaign_id}/report", dashboard.api_report, methods=read),
        Route("/api/campaigns/{campaign_id}/results", dashboard.api_results, methods=read),
        Route(
            "/api/campaigns/{campaign_id}/results/summary",
            dashboard.api_results_summary,
            methods=read,
        ),
        Route("/api/campaigns/{campaign_id}/results.{export}", dashboard.download, methods=read),
        Route("/api/compare", dashboard.api_compare, methods=read),
        Route("/api/studies", dashboard.api_study_list, methods=read),
        Route("/api/studies/{study_id}", dashboard.api_study, methods=read),
        Route("/api/studies/{study_id}/audit", dashboard.api_audit, methods=read),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    async def missing(request: Request, exc: Exception) -> Response:
        return dashboard.not_found(request, exc)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        dashboard.monitor.close()  # queued background reads are dropped at shutdown

    app = Starlette(routes=routes, exception_handlers={404: missing}, lifespan=lifespan)
    app.state.dashboard = dashboard
    app.add_middleware(_Gate, token=settings.token)
    return app


class _Gate(TokenGate):
    """:class:`TokenGate` as Starlette middleware (keyword arguments only)."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        super().__init__(app, token)
