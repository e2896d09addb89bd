"""``benchledger campaign watch ID``: a campaign's progress, live, without working it.

Every ``--interval`` seconds it reads the campaign's status, health and flow
controls (aggregates and index seeks, the same cost at any size; it never
claims anything) and shows counts by status, the rate over a sliding window
and the ETA at that rate, the last error codes, items waiting to retry (and
throttled ones, when the status counts them), when work next falls due, the
flow controls and the report's state. A rich view on a terminal, a plain line
a refresh otherwise.

It exits 0 once the report is finalized, 1 (like ``campaign work``) once the
campaign is blocked for good, 130 on Ctrl-C. ``--once`` shows one snapshot and
exits 0; ``--once --json`` prints it as one JSON document
(``benchledger.campaign-watch.v1``).
"""

from __future__ import annotations

import collections
import sys
import time
from typing import TYPE_CHECKING, Any, Final

import click

from benchledger.cli.campaign import actions, campaign_service
from benchledger.cli.numbers import Number
from benchledger.cli.output import console, emit_json, fail, fmt_time
from benchledger.cli.settings import Settings, pass_settings
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import CAMPAIGN_PREFIX, ReportStatus, WorkStatus

if TYPE_CHECKING:
    from rich.console import RenderableType

    from benchledger.services.campaigns import CampaignService

WATCH_SCHEMA: Final = "benchledger.campaign-watch.v1"
#: Seconds of samples the rate is measured over, by default.
DEFAULT_WINDOW: Final = 60.0


class RateWindow:
    """Items finished per second over the last ``window`` seconds of samples."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, at: float, finished: int) -> None:
        """A sample: ``finished`` items at monotonic time ``at``."""
        self._samples.append((at, finished))
        while len(self._samples) > 2 and at - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def rate(self) -> tuple[float, float] | None:
        """(items per second, seconds measured over), or ``None`` before two samples."""
        if len(self._samples) < 2:
            return None
        (start, first), (end, last) = self._samples[0], self._samples[-1]
        if end <= start:
            return None
        return max(0, last - first) / (end - start), end - start


def _finished(counts: Any) -> int:
    return int(counts[WorkStatus.SUCCEEDED] + counts[WorkStatus.FAILED])


def _progress(status: Any, rate: tuple[float, float] | None) -> dict[str, Any]:
    finished = _finished(status.counts)
    remaining = status.work_count - finished
    per_second = None if rate is None else rate[0]
    eta: float | None = None
    if remaining == 0:
        eta = 0.0
    elif per_second:
        eta = remaining / per_second
    return {
        "finished": finished,
        "remaining": remaining,
        "rate_per_second": per_second,
        "window_seconds": None if rate is None else rate[1],
        "eta_seconds": eta,
    }


def _ending(status: Any) -> str | None:
    """``finalized`` once the report is, ``blocked`` once nothing more can happen."""
    if status.report_finalization["status"] == ReportStatus.SUCCEEDED:
        return "finalized"
    if status.blocked and status.next_due_at is None:
        return "blocked"
    return None


def snapshot(
    campaigns: CampaignService, campaign_id: str, rate: RateWindow, now: float
) -> dict[str, Any]:
    """One look at the campaign: status, health and flow, and the rate so far."""
    from benchledger.services.campaigns.views import FlowControl

    status = campaigns.status(campaign_id)
    health = campaigns.health(campaign_id)
    flow = FlowControl(actions(campaigns).controls(campaign_id))
    rate.add(time.monotonic(), _finished(status.counts))
    return {
        "schema": WATCH_SCHEMA,
        "at": now,
        "campaign_id": status.campaign_id,
        "status": status.as_payload(),
        "health": {"status": str(health.status), "reasons": list(health.reasons)},
        "flow": flow.as_payload(),
        "progress": _progress(status, rate.rate()),
        "ending": _ending(status),
    }


# -- showing a snapshot ------------------------------------------------------------------


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _due(at: float | None, now: float) -> str:
    if at is None:
        return "never"
    if at <= now:
        return "now"
    return f"in {at - now:.1f} s" if at - now < 60 else f"in {_duration(at - now)}"


def _rate(progress: dict[str, Any]) -> str:
    rate = progress["rate_per_second"]
    return "-/s" if rate is None else f"{rate:.2f}/s"


def _retrying(status: dict[str, Any], now: float) -> str:
    text = f"retry {status['counts']['retry_wait']}"
    throttled = status.get("throttled")  # counted by the status once throttling exists
    if throttled:
        text += f" (throttled {throttled}, due {_due(status.get('throttled_due_at'), now)})"
    return text


def _flow(view: dict[str, Any]) -> str:
    flow, status = view["flow"], view["status"]
    state = str(flow["state"])
    if flow["capped_by"]:
        state += " by " + ", ".join(flow["capped_by"])
    if status.get("waiting_on_group"):  # its limit group's caps hold its claims back
        state += f", waiting on limit group {status.get('limit_group')}"
    return state


def _report(status: dict[str, Any]) -> str:
    report = status["report_finalization"]
    text = f"{report['status']} ({report['attempt']}/{report['max_attempts']})"
    text += f" {report['error_code']}" if report.get("error_code") else ""
    return text + (", archived" if status.get("archived_at") is not None else "")


def plain_line(view: dict[str, Any]) -> str:
    """The snapshot as one line (stdout that is not a terminal)."""
    status, progress, now = view["status"], view["progress"], view["at"]
    counts = status["counts"]
    parts = [
        f"{view['campaign_id'].removeprefix(CAMPAIGN_PREFIX)[:12]} {fmt_time(now)}",
        f"{progress['finished']}/{status['work_count']} ok {counts['succeeded']} "
        f"fail {counts['failed']} {_retrying(status, now)} lease {counts['leased']} "
        f"pending {counts['pending']}",
        f"{_rate(progress)} ETA {_duration(progress['eta_seconds'])}",
        f"next due {_due(status['next_due_at'], now)}",
        f"flow {_flow(view)}",
        f"health {view['health']['status']}",
        f"report {_report(status)}",
    ]
    errors = status["error_counts"]
    if errors:
        parts.append(
            "errors " + ", ".join(f"{code} {count}" for code, count in sorted(errors.items()))
        )
    return " | ".join(parts)


def rich_view(view: dict[str, Any]) -> RenderableType:
    """The snapshot as tables (stdout that is a terminal)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    status, progress, now = view["status"], view["progress"], view["at"]
    counts = status["counts"]
    title = f"[bold]{view['campaign_id']}[/bold]"
    if status.get("name"):
        title += f" · {status['name']}"
    facts = Table(show_header=False, show_edge=False, box=None)
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row(
        "done",
        ProgressBar(total=max(1, status["work_count"]), completed=progress["finished"], width=40),
    )
    facts.add_row(
        "items",
        f"{progress['finished']:,}/{status['work_count']:,} finished: ok {counts['succeeded']:,}"
        f", failed {counts['failed']:,}, leased {counts['leased']:,}, "
        f"pending {counts['pending']:,}, {_retrying(status, now)}",
    )
    facts.add_row("rate", f"{_rate(progress)} (last {_duration(progress['window_seconds'])})")
    facts.add_row("ETA", _duration(progress["eta_seconds"]))
    facts.add_row("next due", _due(status["next_due_at"], now))
    facts.add_row("flow", _flow(view))
    reasons = view["health"]["reasons"]
    facts.add_row(
        "health", view["health"]["status"] + (f" ({', '.join(reasons)})" if reasons else "")
    )
    facts.add_row("report", _report(status))
    facts.add_row("as of", fmt_time(now))
    parts: list[RenderableType] = [title, facts]
    if status["error_counts"]:
        errors = Table(title="last error codes", show_edge=False, title_justify="left")
        errors.add_column("code")
        errors.add_column("items", justify="right")
        for code, count in sorted(status["error_counts"].items()):
            errors.add_row(code, f"{count:,}")
        parts.append(errors)
    return Group(*parts)


# -- the command ---------------------------------------------------------------------------


@click.command("watch", short_help="Live progress of a campaign, without working it.")
@click.argument("campaign_id")
@click.option(
    "--interval",
    type=Number(min=0.1, max=3600),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between two looks.",
)
@click.option(
    "--window",
    type=Number(min=1, max=86400),
    default=DEFAULT_WINDOW,
    show_default=True,
    metavar="SECONDS",
    help="The rate (and the ETA) counts the items finished in the last SECONDS.",
)
@click.option("--once", is_flag=True, help="Show one snapshot and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: one JSON document.")
@pass_settings
def campaign_watch(
    settings: Settings,
    campaign_id: str,
    interval: float,
    window: float,
    once: bool,
    as_json: bool,
) -> None:
    """Show a campaign's progress every --interval seconds until it is finished.

    Counts by status, the rate over the last --window seconds and the ETA at
    that rate, the last error codes, items waiting to retry (or throttled) and
    when work next falls due, flow control, health and the report's state. It
    reads aggregates only (status, health, flow) and claims nothing: watch as
    often as you like while workers run.

    Exit 0 once the report is finalized, 1 once the campaign is blocked for
    good, 130 on Ctrl-C. --once shows one snapshot (no rate yet) and exits 0;
    --once --json prints it as one JSON document.
    """
    if as_json and not once:
        fail("ledger.cli.usage", "--json needs --once (one JSON document)", exit_code=2)
    rate = RateWindow(window)
    live = sys.stdout.isatty() and not as_json
    with campaign_service(settings) as campaigns:
        cid = actions(campaigns).resolve(campaign_id)
        view = snapshot(campaigns, cid, rate, time.time())
        if once:
            if as_json:
                emit_json(view)
            elif live:
                console().print(rich_view(view))
            else:
                click.echo(plain_line(view))
            return
        if live:
            view = _watch_live(campaigns, cid, rate, view, interval)
        else:
            view = _watch_lines(campaigns, cid, rate, view, interval)
    _finish(view)


def _watch_lines(
    campaigns: CampaignService,
    campaign_id: str,
    rate: RateWindow,
    view: dict[str, Any],
    interval: float,
) -> dict[str, Any]:
    while True:
        click.echo(plain_line(view))
        if view["ending"] is not None:
            return view
        time.sleep(interval)
        view = snapshot(campaigns, campaign_id, rate, time.time())


def _watch_live(
    campaigns: CampaignService,
    campaign_id: str,
    rate: RateWindow,
    view: dict[str, Any],
    interval: float,
) -> dict[str, Any]:
    from rich.live import Live

    with Live(rich_view(view), console=console(), auto_refresh=False) as shown:
        while view["ending"] is None:
            time.sleep(interval)
            view = snapshot(campaigns, campaign_id, rate, time.time())
            shown.update(rich_view(view), refresh=True)
    return view


def _finish(view: dict[str, Any]) -> None:
    """Exit 1 like ``campaign work`` when the campaign ended blocked."""
    if view["ending"] != "blocked":
        return
    status = view["status"]
    failed = status["counts"]["failed"]
    if failed:
        fail(
            dom.REASON_FAILED,
            f"{failed} item(s) failed for good: see `benchledger campaign status "
            f"{status['campaign_id']}`",
        )
    fail(
        dom.REASON_REPORT_FAILED,
        f"report finalization failed ({status['report_finalization']['error_code']})",
    )
