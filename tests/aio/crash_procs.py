"""Worker processes the crash tests kill (importable by spawned children)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from benchledger import CampaignService, Database
from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.workers.drivers import run_report_finalization


class HangingReportBuilder(DefaultReportBuilder):
    """Builds the report after writing a mark, then never returns (until killed)."""

    def __init__(self, mark: str) -> None:
        super().__init__()
        self.mark = mark

    def build(self, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        with open(self.mark, "a", encoding="utf-8") as out:
            out.write("building\n")
        while True:
            time.sleep(60)

    def verify(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover - never reached
        super().verify(*args, **kwargs)


def hang_in_the_report(url: str, campaign_id: str, mark: str, lease_seconds: float) -> None:
    """A report finalizer that claims the report and hangs in its build, its lease renewed
    by the heartbeat until the process is killed."""
    service = CampaignService(Database(url), report_builder=HangingReportBuilder(mark))
    run_report_finalization(service, campaign_id, "r-doomed", lease_seconds=lease_seconds)
