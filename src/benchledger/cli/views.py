"""Rich tables of the ledger's value objects: campaign status, health and report; studies.

Shared by the commands and by ``benchledger demo``. Imported only where
something is printed (rich is not loaded by ``import benchledger.cli``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from benchledger.cli.output import fmt_time
from benchledger.domain.campaign import (
    CAMPAIGN_PREFIX,
    CODE_PREFIX,
    DEPENDENCY_PREFIX,
    REASON_REPORT_ERROR_PREFIX,
    STATUSES,
    HealthStatus,
    WorkStatus,
    code_of_reason,
)
from benchledger.domain.campaign_health import CHANGES_COUNTED
from benchledger.domain.campaign_labels import Candidate
from benchledger.domain.campaign_views import CampaignHealth, CampaignStatus
from benchledger.domain.study import DIMENSIONS
from benchledger.domain.study_views import CandidateResult, StudyList, StudyPage

# -- campaigns ----------------------------------------------------------------------------

_HEALTH_STYLES: dict[str, str] = {
    HealthStatus.HEALTHY: "green",
    HealthStatus.DEGRADED: "yellow",
    HealthStatus.BLOCKED: "red",
}

#: What each health reason means, in a few words (the codes themselves are in --json).
_REASONS = {
    "failed": "some items failed for good: `campaign retry` puts them back in the queue",
    "report_failed": "report finalization failed for good: `campaign retry` re-arms it",
    "stalled": "items are due but nothing moved for --stale-after: start workers",
    "clock_skew": "rows are stamped in the future: synchronize the clocks",
    "lease_expired": "a worker's lease expired unrenewed (it crashed or stalled)",
    "report_lease_expired": "the report finalizer's lease expired unrenewed",
    "report_missing": "every item succeeded; the report is not finalized yet",
    "validity_expired": "the policy's valid_until has passed",
    "policy_unregistered": "no stored policy and suite: `campaign register` them",
    "cancelled": "cancelled by an operator: `campaign resume` hands out work again",
    "paused": "a flow-control cap of 0 pauses the campaign: `campaign limits` lifts it",
    "integrity_failed": "the last integrity audit found a problem: `campaign verify` lists it",
    "report_unverifiable": "a stored report with no policy and suite to verify it against: "
    "`campaign register` them, then `campaign verify`",
}


def audit_text(
    verified_at: float | None,
    verified_ok: bool | None,
    current: bool | None = None,
    changes: int | None = None,
) -> str:
    """When the last integrity audit (`campaign verify`) ran, what it found, and whether
    the campaign changed since (``changes`` item outcomes recorded after it)."""
    if verified_at is None:
        return "never (`campaign verify`)"
    text = f"{fmt_time(verified_at)}: " + ("ok" if verified_ok else "problems found")
    if current:
        return text + "; nothing changed since"
    if current is None:
        return text
    if changes:
        more = "+" if changes >= CHANGES_COUNTED else ""
        return text + f"; not verified since {changes:,}{more} items changed"
    return text + "; changed since the last audit (report or campaign row)"


def reason_text(reason: str) -> str:
    """A health reason as a person reads it: the reason, or the full error code it names,
    and what it means (a code is spelled in full on every surface)."""
    code = code_of_reason(reason)
    if code is not None:
        whose = (
            "last error of the report finalization"
            if reason.startswith(REASON_REPORT_ERROR_PREFIX)
            else "last error of some items"
        )
        if code.startswith(DEPENDENCY_PREFIX):
            whose += " (the evaluator's code)"
        return f"{code}: {whose}"
    meaning = _REASONS.get(reason.removeprefix(CODE_PREFIX))
    return f"{reason}: {meaning}" if meaning else reason


def _status_tables(status: CampaignStatus) -> list[Table]:
    counts = Table(show_edge=False)
    counts.add_column("status")
    counts.add_column("items", justify="right")
    for name in STATUSES:
        counts.add_row(name, str(status.counts[name]))
    counts.add_row("total", str(status.work_count), style="bold")
    facts = Table(show_header=False, show_edge=False, box=None)
    facts.add_column()
    facts.add_column()
    report = status.report_finalization
    if status.archived_at is not None:
        facts.add_row(
            "archived",
            f"{fmt_time(status.archived_at)}: items dropped, report kept (`campaign report`)",
        )
    facts.add_row("complete", "yes" if status.complete else "no")
    facts.add_row("blocked", "yes" if status.blocked else "no")
    facts.add_row(
        "report",
        f"{report['status']} (attempt {report['attempt']}/{report['max_attempts']}"
        + (f", last error {report['error_code']}" if report["error_code"] else "")
        + ")",
    )
    facts.add_row("policy sha256", status.policy_sha256)
    facts.add_row("suite sha256", status.suite_sha256)
    facts.add_row("valid until", fmt_time(status.valid_until))
    facts.add_row("created", fmt_time(status.created_at))
    facts.add_row("updated", fmt_time(status.updated_at))
    facts.add_row(
        "next due",
        "never (nothing left to do)"
        if status.next_due_at is None
        else fmt_time(status.next_due_at),
    )
    facts.add_row(
        "last audit",
        audit_text(
            status.verified_at,
            status.verified_ok,
            status.verified_current,
            status.changes_since_verified,
        ),
    )
    tables = [counts, facts]
    if status.error_counts:
        errors = Table(
            title="last error codes (dependency.*: the evaluator's own)",
            show_edge=False,
            title_justify="left",
        )
        errors.add_column("code")
        errors.add_column("items", justify="right", no_wrap=True)
        for code, count in sorted(status.error_counts.items()):
            errors.add_row(code, str(count))
        tables.append(errors)
    return tables


def labels(name: str | None, candidate: Candidate) -> str:
    """A campaign's name (if any) and candidate, as listings and headings show them."""
    return f"{name} · {candidate.label}" if name else candidate.label


def print_status(status: CampaignStatus, out: Console) -> None:
    out.print(f"[bold]campaign[/bold] {status.campaign_id}", markup=True)
    out.print(labels(status.name, status.candidate), markup=False)
    for table in _status_tables(status):
        out.print(table)
        out.print()


def print_controls(controls: Any, out: Console, *, always: bool = False) -> None:
    """A campaign's operator controls (``CampaignControls``): shown when any is set."""
    capped = (controls.max_concurrent_leases, controls.max_claims_per_minute) != (None, None)
    if not (always or controls.cancelled or capped):
        return
    table = Table(show_header=False, show_edge=False, box=None)
    table.add_column()
    table.add_column()
    table.add_row(
        "cancelled",
        f"yes, at {fmt_time(controls.cancelled_at)} (`campaign resume` undoes it)"
        if controls.cancelled
        else "no",
    )

    def cap(value: int | None) -> str:
        return "none" if value is None else ("0 (paused)" if value == 0 else str(value))

    table.add_row(
        "max concurrent leases",
        f"{cap(controls.max_concurrent_leases)} ({controls.live_leases} live now)",
    )
    per_minute = controls.max_claims_per_minute
    table.add_row(
        "max claims per minute",
        "none"
        if per_minute is None
        else f"{cap(per_minute)} ({controls.claims_last_minute} in the last minute)",
    )
    out.print(table)


def print_health(health: CampaignHealth, out: Console) -> None:
    out.print(f"[bold]health of[/bold] {health.campaign_id}")
    table = Table(show_header=False, show_edge=False, box=None)
    table.add_column()
    table.add_column()
    style = _HEALTH_STYLES[health.status]
    table.add_row("status", f"[{style}]{health.status}[/{style}]")
    table.add_row("reasons", "\n".join(map(reason_text, health.reasons)) if health.reasons else "-")
    table.add_row("items", " ".join(f"{name} {count}" for name, count in health.counts))
    table.add_row("report ready", "yes" if health.report_ready else "no")
    if health.archived_at is not None:
        table.add_row("archived", fmt_time(health.archived_at))
    table.add_row("last progress", fmt_time(health.last_progress_at))
    table.add_row(
        "last audit",
        audit_text(
            health.verified_at,
            health.verified_ok,
            health.verified_current,
            health.changes_since_verified,
        ),
    )
    out.print(table)


def print_report(report: Mapping[str, Any], out: Console) -> None:
    """The default report builder's shape: per-locale items, passed, pass rate, mean score."""
    locales = report.get("locales")
    if not isinstance(locales, Mapping):
        out.print_json(data=dict(report))
        return
    candidate = report.get("candidate") or {}
    # An archived campaign's kept summary counts what succeeded, as a provisional one.
    kept = report.get("provisional") is False and "archived_at" in report
    if report.get("provisional") is True:
        out.print(
            f"[bold yellow]provisional[/bold yellow] summary of {report.get('campaign_id', '?')}:"
            " what has succeeded so far, not the report"
        )
    elif kept:
        out.print(
            f"[bold]kept summary[/bold] of {report.get('campaign_id', '?')}, archived "
            f"{fmt_time(report['archived_at'])}: its dropped results, not the report"
        )
    else:
        out.print(f"[bold]report of[/bold] {report.get('campaign_id', '?')}")
    if isinstance(candidate, Mapping) and candidate:
        out.print(
            f"candidate {candidate.get('provider_id')}/{candidate.get('model_id')} "
            f"{candidate.get('model_version')}, {report.get('case_count', '?')} cases"
        )
    table = Table(show_edge=False)
    table.add_column("locale")
    table.add_column("items", justify="right")
    provisional = report.get("provisional") is True or kept
    if provisional:
        table.add_column("succeeded", justify="right")
    table.add_column("passed", justify="right")
    table.add_column("pass rate", justify="right")
    table.add_column("mean score", justify="right")

    def row(name: str, summary: Any, style: str | None = None) -> None:
        if not isinstance(summary, Mapping):
            return
        rate, mean = summary.get("pass_rate"), summary.get("mean_score")
        done = [str(summary.get("succeeded", ""))] if provisional else []
        table.add_row(
            name,
            str(summary.get("items", "")),
            *done,
            str(summary.get("passed", "")),
            "-" if rate is None else f"{100 * float(rate):.1f}%",
            "-" if mean is None else f"{float(mean):.3f}",
            style=style,
        )

    for locale, summary in locales.items():
        row(str(locale), summary)
    table.add_section()
    row("overall", report.get("overall"), "bold")
    out.print(table)


def short_id(campaign_id: str) -> str:
    """The first 12 hex digits of a campaign id: a prefix every command accepts."""
    return campaign_id.removeprefix(CAMPAIGN_PREFIX)[:12]


def print_campaign_list(listing: list[dict[str, Any]], cursor: str | None, out: Console) -> None:
    """``campaign list``: one row per campaign status payload (or its error code).

    Ids are shortened to 12 hex digits (``--json`` and ``--quiet`` give whole
    ids); counts are never cut: narrow terminals fold the header instead.
    """
    table = Table(show_edge=False)
    table.add_column("campaign", no_wrap=True, min_width=12)
    table.add_column("name / candidate", overflow="fold")
    for name in ("items", "succeeded", "failed", "retrying", "leased"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(str(name)) // 2)
    table.add_column("report", no_wrap=True)
    for entry in listing:
        candidate = Candidate(**(entry.get("candidate") or {}))
        label = labels(entry.get("name"), candidate)
        if "error" in entry:
            table.add_row(
                short_id(entry["campaign_id"]),
                label,
                str(entry["work_count"]),
                "",
                "",
                "",
                "",
                str(entry["error"]),
            )
            continue
        counts = entry["counts"]
        table.add_row(
            short_id(entry["campaign_id"]),
            label,
            str(entry["work_count"]),
            str(counts[WorkStatus.SUCCEEDED]),
            str(counts[WorkStatus.FAILED]),
            str(counts[WorkStatus.RETRY_WAIT]),
            str(counts[WorkStatus.LEASED]),
            entry["report_finalization"]["status"]
            + (", archived" if entry.get("archived_at") is not None else ""),
        )
    if listing:
        out.print(table)
    else:
        out.print("no campaigns")
    if cursor is not None:
        out.print(f"(more: --cursor {cursor})")


# -- studies ------------------------------------------------------------------------------


def amount(dimension: str, value: int) -> str:
    """A budget amount in its unit: bytes in KiB..TiB, seconds in min or h."""
    if dimension.endswith("_bytes"):
        size = float(value)
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(size) < 1024 or unit == "TiB":
                return f"{size:g} {unit}" if unit != "B" else f"{value} B"
            size /= 1024
    if dimension.endswith("_seconds"):
        if value % 3600 == 0 or value >= 36000:
            return f"{value / 3600:g} h"
        if value % 60 == 0:
            return f"{value // 60} min"
        return f"{value} s"
    return str(value)


#: The four budget dimensions, in words (the demo explains them).
DIMENSION_NAMES = {
    "attempt_slots": "attempt slots (runs admitted)",
    "admitted_wall_seconds": "admitted wall time (how long admitted runs may run)",
    "retained_bytes": "retained storage (what runs keep: checkpoints, logs)",
    "peak_staging_bytes": "peak staging (scratch space in use at once)",
}


def _budget_table(page: StudyPage) -> Table:
    table = Table(show_edge=False)
    table.add_column("dimension")
    for name in ("limit", "charged", "remaining"):
        table.add_column(name, justify="right", no_wrap=True)
    limits, charged, remaining = (
        page.study.limits.to_document(),
        page.charged.to_document(),
        page.remaining.to_document(),
    )
    for name in DIMENSIONS:
        table.add_row(
            name,
            amount(name, limits[name]),
            amount(name, charged[name]),
            amount(name, remaining[name]),
        )
    return table


def print_study(page: StudyPage, out: Console) -> None:
    study_value = page.study
    out.print(f"[bold]study[/bold] {study_value.id}  {study_value.name}")
    out.print(
        f"state {study_value.state.value}, epoch {study_value.admission_epoch}, "
        f"revision {study_value.revision}, {len(study_value.trial_ids)} trial(s), "
        f"policy {study_value.policy_sha256[:16]}…"
    )
    out.print(_budget_table(page))
    if page.reservations:
        table = Table(show_edge=False)
        for name in ("reservation", "epoch", "trial", "run", "parent", "state"):
            table.add_column(name, no_wrap=True)
        for item in page.reservations:
            table.add_row(
                item.id[:12],
                str(item.admission_epoch),
                item.trial_id[:12],
                item.run_id[:12],
                (item.parent_run_id or "-")[:12],
                item.state.value,
            )
        out.print(table)
    if page.page.next_offset is not None:
        out.print(f"(more reservations: --offset {page.page.next_offset})")


def print_study_list(listing: StudyList, out: Console) -> None:
    """``study list``: study summaries, then the cursor to continue."""
    if not listing.studies:
        out.print("no studies")
        return
    table = Table(show_edge=False)
    for name in ("study", "name", "state", "epoch", "revision", "trials"):
        table.add_column(name, no_wrap=name == "study")
    for item in listing.studies:
        table.add_row(
            item.id,
            item.name,
            item.state.value,
            str(item.admission_epoch),
            str(item.revision),
            str(item.trial_count),
        )
    out.print(table)
    if listing.next_cursor:
        out.print(f"(more: --cursor {listing.next_cursor})")


def print_candidate(result: CandidateResult, out: Console) -> None:
    candidate = result.candidate
    out.print(f"[bold]candidate[/bold] {candidate.id} ({candidate.decision})")
    out.print(
        f"run {result.run_id}, trial {candidate.trial_id}, checkpoint step "
        f"{result.checkpoint.step} ({result.checkpoint.sha256[:16]}…)"
    )
    for limitation in candidate.limitations:
        out.print(f"limitation: {limitation}")
