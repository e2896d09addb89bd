"""campaign work's progress line fits a terminal and never cuts a number."""

from __future__ import annotations

import io
import re

import attrs
import pytest

from benchledger.services.campaigns import CampaignService
from benchledger.services.campaigns.actions import short_id
from benchledger.workpool import _Display, _rate_eta

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@pytest.mark.parametrize("columns", [80, 120])
def test_the_bar_fits_the_terminal_at_100000_items(
    service: CampaignService, cid: str, columns: int
) -> None:
    status = attrs.evolve(
        service.status(cid),
        work_count=100_000,
        counts={"pending": 30_000, "leased": 16, "retry_wait": 12, "succeeded": 69_950,
                "failed": 22},
    )  # fmt: skip
    stream = io.StringIO()
    display = _Display(short_id(cid), stream, live=True)
    display.console.width = columns
    display.console._force_terminal = True  # a terminal of that width
    with display:
        display.update(status, start_finished=0, elapsed=4_567.0, force=True)
    line = ANSI.sub("", stream.getvalue()).strip().splitlines()[-1]
    assert len(line) <= columns
    assert "…" not in line
    for text in (short_id(cid), "69972/100000", "ok 69950", "fail 22", "retry 12", "lease 16",
                 "15.3/s", "ETA 32:39"):  # fmt: skip
        assert text in line, (text, line)


def test_the_line_says_what_waits_on_throttling_and_the_eta_waits_for_it(
    service: CampaignService, cid: str
) -> None:
    status = attrs.evolve(
        service.status(cid),
        work_count=100,
        counts={"pending": 0, "leased": 0, "retry_wait": 5, "succeeded": 95, "failed": 0},
        throttled=3,
        next_due_at=1_000.0 + 125,
        waiting_on_group=True,
    )
    stream = io.StringIO()
    display = _Display(short_id(cid), stream, live=False)
    display.ceiling, display.workers = 8, 2
    display.lanes["w:0"] = 1  # one process cut its lanes to 1 of 4; the other said nothing
    with display:
        display.update(status, start_finished=0, elapsed=95.0, force=True)
    line = stream.getvalue().strip().splitlines()[-1]
    for text in ("retry 2", "throttled 3", "lanes 5/8", "waiting on its limit group"):
        assert text in line, (text, line)
    # Five left at 1 item/s would be 0:05, but nothing runs before the first is due.
    rate, eta = _rate_eta(status, 0, 95.0, now=1_000.0)
    assert (rate, eta) == ("1.0/s", "2:05 (waiting on throttling)")
