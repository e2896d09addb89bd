"""The compare page and ``/api/compare``: two campaigns of one suite side by side (a
seeded bootstrap), the last few comparisons kept while neither campaign changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from benchledger.dashboard.pages import Pages
from benchledger.dashboard.queries import MAX_QUERY_INT, QUERY_INVALID, int_query, text_query
from benchledger.domain.campaign_codes import NOT_FOUND
from benchledger.domain.campaign_comparison import CampaignComparison
from benchledger.errors import LedgerError

#: The compare page's bootstrap: fewer resamples than the command line's 10,000 by default
#: (a page should answer in about a second on a large campaign), seeded (reproducible).
COMPARE_RESAMPLES: Final = 2_000
MAX_COMPARE_RESAMPLES: Final = 10_000
#: Flips shown per page of the compare page.
FLIPS_PER_PAGE: Final = 100
#: Comparisons kept (a comparison reads both campaigns: re-reading one is not free).
COMPARISONS_KEPT: Final = 8


class ComparePages:
    """``/compare`` and ``/api/compare``."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self._comparisons: OrderedDict[tuple[Any, ...], CampaignComparison] = OrderedDict()
        self._comparisons_lock = threading.Lock()

    def _compare_side(self, request: Request, name: str) -> str | None:
        given = text_query(request, name)
        if given is None:
            return None
        try:
            return self.pages.campaigns.status(self.pages.campaigns.resolve(given)).campaign_id
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
            self.pages.campaigns.status(a).updated_at,
            self.pages.campaigns.status(b).updated_at,
        )
        with self._comparisons_lock:
            kept = self._comparisons.get(key)
            if kept is not None:
                self._comparisons.move_to_end(key)
                return kept
        comparison = self.pages.campaigns.compare(a, b, seed=seed, resamples=resamples)
        with self._comparisons_lock:
            self._comparisons[key] = comparison
            while len(self._comparisons) > COMPARISONS_KEPT:
                self._comparisons.popitem(last=False)
        return comparison

    def compare(self, request: Request) -> Response:
        return self.pages.page(request, api=False, build=self._compare)

    def api_compare(self, request: Request) -> Response:
        return self.pages.page(request, api=True, build=self._compare)

    def _compare(self, request: Request, api: bool) -> Response:
        a = self._compare_side(request, "a")
        b = self._compare_side(request, "b")
        seed = int_query(request, "seed", 0, high=2**32 - 1)
        resamples = int_query(
            request, "resamples", COMPARE_RESAMPLES, low=100, high=MAX_COMPARE_RESAMPLES
        )
        flip_offset = int_query(request, "flips_from", 0, high=MAX_QUERY_INT)
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
        suite = self.pages.campaigns.status(a).suite_sha256 if a is not None else None
        choices = self.pages.campaigns.choices(suite)
        comparison: CampaignComparison | None = None
        error: str | None = None
        if a is not None and b is not None:
            try:
                comparison = self._comparison(a, b, seed, resamples)
            except LedgerError as refused:
                error = refused.code
        return self.pages.render(
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
