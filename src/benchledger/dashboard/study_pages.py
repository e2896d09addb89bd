"""The study pages and their JSON: the study list, a study (budget, trials, runs,
candidates) with its audit trail, and the audit trail alone under ``/api``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from benchledger.dashboard.pages import Pages
from benchledger.dashboard.queries import int_query, text_query


class StudyPages:
    """``/studies``, ``/studies/{id}`` and their ``/api`` routes."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages

    def study_list(self, request: Request) -> Response:
        return self.pages.page(request, api=False, build=self._study_list)

    def api_study_list(self, request: Request) -> Response:
        return self.pages.page(request, api=True, build=self._study_list)

    def _study_list(self, request: Request, api: bool) -> Response:
        page = self.pages.studies.page(
            cursor=text_query(request, "cursor"),
            limit=int_query(request, "limit", 20),
        )
        if api:
            return JSONResponse(page.as_payload())
        return self.pages.render(request, "studies.html", page=page, active="studies")

    def study(self, request: Request) -> Response:
        return self.pages.page(request, api=False, build=self._study)

    def api_study(self, request: Request) -> Response:
        return self.pages.page(request, api=True, build=self._study)

    def _study(self, request: Request, api: bool) -> Response:
        study_id = request.path_params["study_id"]
        snapshot = self.pages.studies.study(study_id)
        if api:
            return JSONResponse(snapshot.as_payload())
        before = int_query(request, "before", None)
        audit = self.pages.studies.audit(
            study_id, before=before, limit=int_query(request, "limit", 50)
        )
        return self.pages.render(
            request, "study.html", snapshot=snapshot, audit=audit, active="studies"
        )

    def api_audit(self, request: Request) -> Response:
        def build(request: Request, api: bool) -> Response:
            audit = self.pages.studies.audit(
                request.path_params["study_id"],
                before=int_query(request, "before", None),
                limit=int_query(request, "limit", 50),
            )
            return JSONResponse(audit.as_payload())

        return self.pages.page(request, api=True, build=build)
