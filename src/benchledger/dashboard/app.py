"""The dashboard's ASGI application: read-only pages and their JSON under ``/api``.

Every route answers ``GET`` (and ``HEAD``) only; anything else is ``405``.
When a token is configured, every request must carry it (``Authorization:
Bearer``, the ``benchledger_token`` cookie, or once as ``?token=`` which sets
that cookie), compared in constant time. Templates autoescape everything;
the Content-Security-Policy allows only this server's own scripts and styles.

The pages themselves live one module per kind (:mod:`.campaign_pages`,
:mod:`.results_pages`, :mod:`.compare_pages`, :mod:`.study_pages`) over what they
share (:mod:`.pages`); this module wires them into routes behind the token gate.
"""

from __future__ import annotations

import contextlib
import hmac
import time
from collections.abc import AsyncIterator, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from benchledger.dashboard.campaign_pages import CampaignPages
from benchledger.dashboard.compare_pages import COMPARE_RESAMPLES, ComparePages
from benchledger.dashboard.formatting import HERE, environment
from benchledger.dashboard.metrics import MetricsPages
from benchledger.dashboard.pages import DashboardSettings, Pages
from benchledger.dashboard.results_pages import ResultsPages
from benchledger.dashboard.study_pages import StudyPages
from benchledger.db import Database
from benchledger.services.campaigns.views import MAX_PAGE

TOKEN_COOKIE = "benchledger_token"
#: The dashboard's refusal of a request without its token (documented in docs/errors.md).
UNAUTHORIZED = "ledger.dashboard.unauthorized"

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


class Dashboard(Pages):
    """Routes over the read-only views; one instance per served database: what the pages
    share, and the handlers of each kind of page."""

    def __init__(
        self, db: Database, settings: DashboardSettings, clock: Callable[[], float]
    ) -> None:
        super().__init__(
            db,
            settings,
            clock,
            templates=environment(page_max=MAX_PAGE, compare_resamples=COMPARE_RESAMPLES),
            database_label=_database_label(db),
        )
        self.campaign_pages = CampaignPages(self)
        self.results_pages = ResultsPages(self)
        self.compare_pages = ComparePages(self)
        self.study_pages = StudyPages(self)
        self.metrics_pages = MetricsPages(self)

    def favicon(self, request: Request) -> Response:
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


def _database_label(db: Database) -> str:
    """The database as the page names it: no password, ever."""
    import sqlalchemy as sa

    url = sa.make_url(db.url)
    if url.get_backend_name() == "sqlite":
        return f"SQLite {Path(url.database).name if url.database else '(memory)'}"
    return f"PostgreSQL {url.database or ''} on {url.host or 'local socket'}"


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
    campaigns = dashboard.campaign_pages
    results = dashboard.results_pages
    compare = dashboard.compare_pages
    studies = dashboard.study_pages
    read = ["GET", "HEAD"]
    routes = [
        Route("/", campaigns.home, methods=read),
        Route("/campaigns", campaigns.campaign_list, methods=read),
        Route("/favicon.ico", dashboard.favicon, methods=read),
        Route("/compare", compare.compare, methods=read),
        Route("/campaigns/{campaign_id}", campaigns.campaign, methods=read),
        Route("/campaigns/{campaign_id}/results", results.results_page, methods=read),
        Route("/studies", studies.study_list, methods=read),
        Route("/studies/{study_id}", studies.study, methods=read),
        Route("/api/campaigns", campaigns.api_campaign_list, methods=read),
        Route("/api/campaigns/{campaign_id}", campaigns.api_campaign, methods=read),
        Route("/api/campaigns/{campaign_id}/status", campaigns.api_status, methods=read),
        Route("/api/campaigns/{campaign_id}/health", campaigns.api_health, methods=read),
        Route("/api/campaigns/{campaign_id}/report", campaigns.api_report, methods=read),
        Route("/api/campaigns/{campaign_id}/results", results.api_results, methods=read),
        Route(
            "/api/campaigns/{campaign_id}/results/summary",
            results.api_results_summary,
            methods=read,
        ),
        Route("/api/campaigns/{campaign_id}/results.{export}", results.download, methods=read),
        Route("/api/compare", compare.api_compare, methods=read),
        Route("/api/studies", studies.api_study_list, methods=read),
        Route("/api/studies/{study_id}", studies.api_study, methods=read),
        Route("/api/studies/{study_id}/audit", studies.api_audit, methods=read),
        # Prometheus' text format, behind the same token gate (Authorization: Bearer).
        Route("/metrics", dashboard.metrics_pages.metrics, methods=read),
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


__all__: Sequence[str] = ["Dashboard", "DashboardSettings", "TokenGate", "create_app"]
