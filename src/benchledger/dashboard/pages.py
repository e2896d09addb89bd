"""What every page handler shares: the services a page reads, the background monitor, the
templates and rendering, the path's campaign, and coded refusals (JSON under ``/api``,
else a page saying what the code means).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from benchledger.analysis import ANALYSIS_MISSING
from benchledger.dashboard import reference
from benchledger.dashboard.monitor import Monitor
from benchledger.db import Database
from benchledger.errors import LedgerError, StudyError
from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.views import CampaignViews
from benchledger.services.studies.views import StudyViews

#: The dashboard's refusal of an unknown page (documented in docs/errors.md).
PAGE_MISSING = "ledger.dashboard.page_missing"


@attrs.frozen
class DashboardSettings:
    """How the dashboard runs: refresh interval of the pages, background checks, token."""

    token: str | None = None
    poll_seconds: float = 2.0
    health_refresh_seconds: float = 10.0
    inline_check_items: int = 2_000
    stale_after_seconds: float = 3600.0


class Pages:
    """The services, templates and helpers every page uses; one per served database."""

    def __init__(
        self,
        db: Database,
        settings: DashboardSettings,
        clock: Callable[[], float],
        *,
        templates: jinja2.Environment,
        database_label: str,
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
        self.templates = templates
        self.database_label = database_label

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
        status = http_status(error)
        payload = {"error": error.code, "message": message(error)}
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

    def campaign_id(self, request: Request) -> str:
        """The path's campaign: a whole id, or a unique prefix of one (the CLI's short id)."""
        return self.campaigns.resolve(request.path_params["campaign_id"])

    def not_found(self, request: Request, exc: Exception) -> Response:
        api = request.url.path.startswith("/api/")
        return self.refuse(request, LedgerError(PAGE_MISSING, "no such page"), api)

    def page(
        self, request: Request, *, api: bool, build: Callable[[Request, bool], Response]
    ) -> Response:
        try:
            return build(request, api)
        except LedgerError as error:
            return self.refuse(request, error, api)


def http_status(error: LedgerError) -> int:
    """A refusal's HTTP status: a study error's own, else from its code (404 for a missing
    thing, 400 for a malformed request, 501 for a missing extra, 409 for the rest)."""
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
    if code == ANALYSIS_MISSING:
        return 501  # the server lacks the analysis extra
    return 409


def words(code: str) -> str:
    """What a code means, from the error reference."""
    return reference.explain(code).meaning


def message(error: LedgerError) -> str:
    """A refusal's message: its own text, else what its code means."""
    # Campaign errors carry no text: say what the code means, from the error reference.
    return error.message if error.message != error.code else words(error.code)
