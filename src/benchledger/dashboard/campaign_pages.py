"""The campaign pages and their JSON: the campaign list, a campaign's live page, and its
status, health and report under ``/api`` (health and the report from the monitor's
background reads).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from benchledger.dashboard import reference
from benchledger.dashboard.formatting import label, reason_code, reason_label
from benchledger.dashboard.pages import Pages, words
from benchledger.dashboard.queries import choice_query, int_query, text_query
from benchledger.domain.campaign import ListOrder
from benchledger.domain.campaign_codes import REASON_FAILED, REASON_REPORT_FAILED
from benchledger.domain.campaign_health import CHANGES_COUNTED
from benchledger.domain.campaign_labels import CampaignFilter
from benchledger.errors import LedgerError
from benchledger.services.campaigns.actions import short_id


class CampaignPages:
    """``/campaigns``, ``/campaigns/{id}`` and their ``/api`` routes."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages

    def _health(self, campaign_id: str, work_count: int) -> dict[str, Any] | None:
        check = self.pages.monitor.health(campaign_id, work_count)
        if check is None:
            return None
        return {
            **check.as_payload(),
            "explained": [_explained(code, campaign_id) for code in check.health.reasons],
            # each reason's code in full (an error reason names the item's full error code)
            "reason_codes": [reason_code(reason) for reason in check.health.reasons],
            # item outcomes since the last audit are counted up to CHANGES_COUNTED: "at least"
            "changes_capped": (check.health.changes_since_verified or 0) >= CHANGES_COUNTED,
        }

    def _report(self, status: Any) -> dict[str, Any]:
        """The report's state for a page: waiting, checking, refused, or verified."""
        if status.report_finalization["status"] != "succeeded":
            return {"state": "waiting", "report": None, "error": None}
        check = self.pages.monitor.report(status.campaign_id, status.work_count)
        if check is None:
            return {"state": "checking", "report": None, "error": None}
        if check.report is None:
            return {"state": "refused", "report": None, "error": check.error}
        return {"state": "final", "report": check.report, "error": None}

    def campaign_payload(self, campaign_id: str) -> dict[str, Any]:
        snapshot = self.pages.campaigns.snapshot(
            campaign_id, completions=self.pages.monitor.completions
        )
        status = snapshot.status
        report = self._report(status)
        return {
            **snapshot.as_payload(),
            "label": label(status.name, status.candidate),
            "flow": self.pages.campaigns.flow(status.campaign_id).as_payload(),
            "health": self._health(status.campaign_id, status.work_count),
            "report": {"state": report["state"], "error": report["error"]},
        }

    def home(self, request: Request) -> Response:
        return RedirectResponse("/campaigns", 307)

    def campaign_list(self, request: Request) -> Response:
        return self.pages.page(request, api=False, build=self._campaign_list)

    def api_campaign_list(self, request: Request) -> Response:
        return self.pages.page(request, api=True, build=self._campaign_list)

    def _campaign_list(self, request: Request, api: bool) -> Response:
        order = choice_query(request, "order", tuple(ListOrder)) or ListOrder.OLDEST
        filters = {
            name: text_query(request, name) for name in ("provider", "model", "suite", "name")
        }
        where = CampaignFilter(**filters) if any(filters.values()) else None
        page = self.pages.campaigns.page(
            cursor=text_query(request, "cursor"),
            limit=int_query(request, "limit", 20),
            newest_first=order == ListOrder.NEWEST,
            completions=self.pages.monitor.completions,
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
        return self.pages.render(
            request,
            "campaigns.html",
            page=page,
            health=health,
            order=order,
            filters=kept,
            active="campaigns",
        )

    def campaign(self, request: Request) -> Response:
        return self.pages.page(request, api=False, build=self._campaign)

    def api_campaign(self, request: Request) -> Response:
        return self.pages.page(request, api=True, build=self._campaign)

    def _campaign(self, request: Request, api: bool) -> Response:
        campaign_id = self.pages.campaign_id(request)
        if api:
            return JSONResponse(self.campaign_payload(campaign_id))
        snapshot = self.pages.campaigns.snapshot(
            campaign_id, completions=self.pages.monitor.completions
        )
        status = snapshot.status
        return self.pages.render(
            request,
            "campaign.html",
            snapshot=snapshot,
            status=status,
            flow=self.pages.campaigns.flow(status.campaign_id),
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
        if status.work_count > self.pages.settings.inline_check_items:
            return None
        try:
            return self.pages.service.load_report(status.campaign_id, provisional=True)
        except LedgerError:
            return None

    def api_status(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.pages.campaigns.status(self.pages.campaign_id(request))
            return JSONResponse(status.as_payload())

        return self.pages.page(request, api=True, build=build)

    def api_health(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.pages.campaigns.status(self.pages.campaign_id(request))
            health = self._health(status.campaign_id, status.work_count)
            if health is None:
                return JSONResponse({"checking": True}, 202)
            return JSONResponse(health)

        return self.pages.page(request, api=True, build=build)

    def api_report(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            status = self.pages.campaigns.status(self.pages.campaign_id(request))
            report = self._report(status)
            if report["state"] == "checking":
                return JSONResponse({"checking": True}, 202)
            if report["report"] is None:
                code = report["error"] or "benchmark.campaign.report_missing"
                return JSONResponse({"error": code, "message": words(code)}, 409)
            response = JSONResponse(report["report"])
            if "download" in request.query_params:
                name = f"{status.campaign_id}-report.json"
                response.headers["content-disposition"] = f'attachment; filename="{name}"'
            return response

        return self.pages.page(request, api=True, build=build)


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
