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
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from pathlib import Path
from typing import Any

import attrs
import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from benchledger.dashboard import reference
from benchledger.dashboard.monitor import Monitor
from benchledger.db import Database
from benchledger.domain.campaign import ListOrder
from benchledger.errors import LedgerError, StudyError
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.views import CampaignViews
from benchledger.services.studies.views import StudyViews

HERE = Path(__file__).resolve().parent
TOKEN_COOKIE = "benchledger_token"
NONE = "\N{EN DASH}"  # what a page shows for no value
#: The dashboard's own refusals (documented in docs/errors.md).
UNAUTHORIZED = "ledger.dashboard.unauthorized"
PAGE_MISSING = "ledger.dashboard.page_missing"
QUERY_INVALID = "ledger.dashboard.query_invalid"

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
    """An error code without the campaign namespace (the full code is the title)."""
    if value is None:
        return NONE
    return value.removeprefix("benchmark.campaign.").removeprefix("dependency.")


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
    )
    environment.globals["explain"] = reference.explain
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
            "explained": [reference.explain(code).as_payload() for code in check.health.reasons],
        }

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
        order = request.query_params.get("order", ListOrder.OLDEST)
        if order not in set(ListOrder):
            raise LedgerError(QUERY_INVALID, "order is 'oldest' or 'newest'")
        page = self.campaigns.page(
            cursor=request.query_params.get("cursor") or None,
            limit=_int_query(request, "limit", 20),
            newest_first=order == ListOrder.NEWEST,
            completions=self.monitor.completions,
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
        return self.render(
            request, "campaigns.html", page=page, health=health, order=order, active="campaigns"
        )

    def campaign(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._campaign)

    def api_campaign(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._campaign)

    def _campaign(self, request: Request, api: bool) -> Response:
        campaign_id = request.path_params["campaign_id"]
        if api:
            return JSONResponse(self.campaign_payload(campaign_id))
        snapshot = self.campaigns.snapshot(campaign_id, completions=self.monitor.completions)
        status = snapshot.status
        return self.render(
            request,
            "campaign.html",
            snapshot=snapshot,
            status=status,
            health=self._health(status.campaign_id, status.work_count),
            report=self._report(status),
            active="campaigns",
        )

    def api_status(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(request.path_params["campaign_id"])
            return JSONResponse(status.as_payload())

        return self._page(request, api=True, build=build)

    def api_health(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(request.path_params["campaign_id"])
            health = self._health(status.campaign_id, status.work_count)
            if health is None:
                return JSONResponse({"checking": True}, 202)
            return JSONResponse(health)

        return self._page(request, api=True, build=build)

    def api_report(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.campaigns.status(request.path_params["campaign_id"])
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

    def study_list(self, request: Request) -> Response:
        return self._page(request, api=False, build=self._study_list)

    def api_study_list(self, request: Request) -> Response:
        return self._page(request, api=True, build=self._study_list)

    def _study_list(self, request: Request, api: bool) -> Response:
        page = self.studies.page(
            cursor=request.query_params.get("cursor") or None,
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


def _int_query(request: Request, name: str, default: int | None) -> Any:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise LedgerError(QUERY_INVALID, f"{name} must be an integer") from None


def _http_status(error: LedgerError) -> int:
    if isinstance(error, StudyError):
        return int(error.status)
    code = error.code
    if code.endswith(("not_found", "page_missing")):
        return 404
    if code.endswith(("page_invalid", "query_invalid")):
        return 400
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
        Route("/campaigns/{campaign_id}", dashboard.campaign, methods=read),
        Route("/studies", dashboard.study_list, methods=read),
        Route("/studies/{study_id}", dashboard.study, methods=read),
        Route("/api/campaigns", dashboard.api_campaign_list, methods=read),
        Route("/api/campaigns/{campaign_id}", dashboard.api_campaign, methods=read),
        Route("/api/campaigns/{campaign_id}/status", dashboard.api_status, methods=read),
        Route("/api/campaigns/{campaign_id}/health", dashboard.api_health, methods=read),
        Route("/api/campaigns/{campaign_id}/report", dashboard.api_report, methods=read),
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
