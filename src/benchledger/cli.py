"""The ``benchledger`` command line.

Conventions (see ``docs/cli.md``):

- ``--url`` (or ``BENCHLEDGER_DATABASE_URL``) names the database; the default
  is ``sqlite:///benchledger.db``. Only ``db upgrade`` and ``demo`` create a
  database; every other command refuses a SQLite file that does not exist.
- Every read command takes ``--json`` and then prints exactly one JSON
  document on stdout (the value objects' payloads), nothing else.
- Every refusal is one line on stderr, ``error: <code>: <message>``, and a
  non-zero exit status: 1 for an error, 2 for a usage error, 3/4 for
  ``db check`` behind/ahead, 130 when interrupted. No traceback
  (``BENCHLEDGER_DEBUG=1`` re-raises for one).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

from benchledger.db import URL_ENV, Database, head_revision
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import (
    STATUSES,
    CampaignHealth,
    CampaignPolicy,
    CampaignStatus,
    Suite,
)
from benchledger.domain.study import (
    DIMENSIONS,
    Budget,
    CandidateResult,
    Material,
    MaterialRef,
    RunState,
    SelectionPolicy,
    StudyPage,
    StudyState,
    to_document,
)
from benchledger.domain.study_evidence import RunEvidence
from benchledger.domain.study_rules import Role
from benchledger.errors import SCHEMA_AHEAD, SCHEMA_BEHIND, LedgerError, StudyError
from benchledger.examples.study import material_from_document
from benchledger.services.studies import StudyService

if TYPE_CHECKING:  # imported where a command needs them: importing the CLI stays cheap
    from benchledger.services.campaigns import CampaignService
    from benchledger.workpool import PoolResult

F = TypeVar("F", bound=Callable[..., Any])

DEBUG_ENV = "BENCHLEDGER_DEBUG"

# -- error codes of the command line itself ------------------------------------------

CLI_USAGE = "ledger.cli.usage"
CLI_INTERRUPTED = "ledger.cli.interrupted"
FILE_MISSING = "ledger.input.file_missing"
FILE_UNREADABLE = "ledger.input.file_unreadable"
JSON_INVALID = "ledger.input.json_invalid"
EVALUATOR_INVALID = "ledger.input.evaluator_invalid"
DATABASE_MISSING = "ledger.database.missing"
DATABASE_UNAVAILABLE = "ledger.database.unavailable"
DATABASE_URL_INVALID = "ledger.database.url_invalid"
DATABASE_ERROR = "ledger.database.error"

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SCHEMA_BEHIND = 3
EXIT_SCHEMA_AHEAD = 4
EXIT_INTERRUPTED = 130


class CommandError(click.ClickException):
    """A refusal shown as one line: ``error: <code>: <message>``."""

    def __init__(self, code: str, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code
        self.status = exit_code
        # click reads ``exit_code`` (a class variable there) when it shows the error itself.
        setattr(self, "exit_code", exit_code)  # noqa: B010

    def format_message(self) -> str:
        return f"{self.code}: {_one_line(self.message)}"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _ledger_error(error: LedgerError) -> CommandError:
    message = error.message if error.message and error.message != error.code else ""
    return CommandError(error.code, message or _default_message(error.code))


#: Campaign errors carry no text (the seed's rule): what to tell a person instead.
_MESSAGES = {
    "benchmark.campaign.not_found": "no such campaign in this database",
    "benchmark.campaign.policy_unregistered": (
        "the campaign has no stored policy and suite (a legacy campaign): register it first"
    ),
    "benchmark.campaign.policy_invalid": "the policy is not a valid campaign policy",
    "benchmark.campaign.suite_invalid": "the suite is not a valid suite manifest",
    "benchmark.campaign.suite_mismatch": "the policy's suite_sha256 is not this suite's sha256",
    "benchmark.campaign.attempts_invalid": "max attempts must be an integer from 1 to 20",
    "benchmark.campaign.attempts_mismatch": (
        "the campaign already exists with another max attempts"
    ),
    "benchmark.campaign.validity_expired": "the policy's valid_until has passed",
    "benchmark.campaign.report_missing": (
        "the report is not finalized yet: run `benchledger campaign work` to finish the campaign"
    ),
    "benchmark.campaign.incomplete": "not every item of the campaign has succeeded",
    "benchmark.campaign.state_invalid": "stored campaign rows fail verification",
    "benchmark.campaign.report_invalid": "the stored report does not match its results",
    "benchmark.campaign.report_state_invalid": "the report state contradicts the work items",
    "benchmark.campaign.duration_invalid": "a duration must be > 0 and at most one day",
    "benchmark.campaign.retry_invalid": "retry settings are invalid (base must not exceed max)",
    "benchmark.campaign.identity_invalid": "the worker id is not a valid identifier",
    "benchmark.campaign.stale_threshold_invalid": "--stale-after must be > 0 and at most a year",
    "benchmark.campaign.time_invalid": "a time must be finite, non-negative epoch seconds",
}


def _default_message(code: str) -> str:
    """A short human reading of a bare code."""
    return _MESSAGES.get(code) or code.rsplit(".", 1)[-1].replace("_", " ")


def _database_error(error: sa.exc.SQLAlchemyError) -> CommandError:
    if isinstance(error, sa.exc.ArgumentError | sa.exc.NoSuchModuleError):
        return CommandError(DATABASE_URL_INVALID, f"the database URL is not usable: {error}")
    if isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError):
        detail = getattr(error, "orig", None) or error
        return CommandError(DATABASE_UNAVAILABLE, f"cannot use the database: {detail}")
    detail = getattr(error, "orig", None) or error
    return CommandError(DATABASE_ERROR, f"the database refused an operation: {detail}")


class LedgerGroup(click.Group):
    """A click group that turns every known failure into one ``error:`` line."""

    def invoke(self, ctx: click.Context) -> Any:
        if os.environ.get(DEBUG_ENV):
            return super().invoke(ctx)
        try:
            return super().invoke(ctx)
        except LedgerError as error:
            raise _ledger_error(error) from None
        except sa.exc.SQLAlchemyError as error:
            raise _database_error(error) from None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except CommandError as error:
            error.show()
            sys.exit(error.status)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else "benchledger"
            message = f"{_one_line(error.format_message())} (see `{where} --help`)"
            CommandError(CLI_USAGE, message).show()
            sys.exit(EXIT_USAGE)
        except click.ClickException as error:
            CommandError(CLI_USAGE, error.format_message()).show()
            sys.exit(error.exit_code)
        except click.Abort:
            CommandError(CLI_INTERRUPTED, "interrupted").show()
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(result if isinstance(result, int) else 0)


# -- shared plumbing ------------------------------------------------------------------


class Settings:
    """What the top-level options decided, passed to every command."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def database(self, *, create: bool = False, check_schema: bool = True) -> Database:
        """The database; refuses a SQLite file that does not exist unless ``create``."""
        try:
            database = Database(self.url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as error:
            raise CommandError(
                DATABASE_URL_INVALID, f"the database URL is not usable: {error}"
            ) from None
        path = database.sqlite_path
        if path is not None and not create and not path.exists():
            database.dispose()
            raise CommandError(
                DATABASE_MISSING,
                f"no database at {path}: create it with `benchledger db upgrade`",
            )
        if check_schema:
            database.require_current_schema()
        return database


pass_settings = click.make_pass_decorator(Settings)


def json_option(function: F) -> F:
    """``--json``: print the value as one JSON document instead of tables."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document (the value objects' payloads) instead of tables.",
    )(function)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False))


def console() -> Console:
    """A rich console on stdout; plain (no colour, 160 columns) when stdout is not a terminal."""
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def read_json_file(path: str, what: str) -> Any:
    """Parse a JSON file, refusing a missing, unreadable or malformed one in one line."""
    file = Path(path)
    if not file.exists():
        raise CommandError(FILE_MISSING, f"{what} file {path} does not exist")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CommandError(FILE_UNREADABLE, f"cannot read {what} file {path}: {reason}") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as error:
        raise CommandError(JSON_INVALID, f"{what} file {path} is not valid JSON: {error}") from None


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


def fail(code: str, message: str, exit_code: int = EXIT_ERROR) -> NoReturn:
    raise CommandError(code, message, exit_code)


# -- the command tree -------------------------------------------------------------------


@click.group(cls=LedgerGroup)
@click.option(
    "--url",
    envvar=URL_ENV,
    default=None,
    metavar="URL",
    help=f"Database URL (env {URL_ENV}; default sqlite:///benchledger.db).",
)
@click.version_option(package_name="benchledger")
@click.pass_context
def main(context: click.Context, url: str | None) -> None:
    """A durable, auditable ledger of evaluation work."""
    context.obj = Settings(url)


# -- db ----------------------------------------------------------------------------------


@main.group(cls=LedgerGroup, short_help="Schema: upgrade, current, check.")
def db() -> None:
    """Schema management: upgrade, current revision, check."""


def _schema_state(database: Database) -> dict[str, Any]:
    path = database.sqlite_path
    current = None if path is not None and not path.exists() else database.current_revision()
    head = head_revision()
    if current is None:
        state = "behind"
    elif current == head:
        state = "current"
    else:
        try:
            database.require_current_schema()
            state = "current"
        except LedgerError as error:
            state = "ahead" if error.code == SCHEMA_AHEAD else "behind"
    return {"url": _display_url(database), "current": current, "head": head, "state": state}


def _display_url(database: Database) -> str:
    return sa.make_url(database.url).render_as_string(hide_password=True)


@db.command("upgrade")
@pass_settings
def db_upgrade(settings: Settings) -> None:
    """Create or upgrade the schema to head (adopting a legacy seed database)."""
    database = settings.database(create=True, check_schema=False)
    try:
        database.upgrade()
        click.echo(f"{_display_url(database)} at {database.current_revision()} (head)")
    finally:
        database.dispose()


@db.command("current")
@json_option
@pass_settings
def db_current(settings: Settings, as_json: bool) -> None:
    """Show the schema revision of the database and this version's head."""
    database = settings.database(create=True, check_schema=False)
    try:
        state = _schema_state(database)
    finally:
        database.dispose()
    if as_json:
        emit_json(state)
        return
    click.echo(
        f"{state['url']}: at {state['current'] or 'nothing (empty)'}, "
        f"head {state['head']} ({state['state']})"
    )


@db.command("check")
@json_option
@pass_settings
def db_check(settings: Settings, as_json: bool) -> None:
    """Exit 0 when the schema is at head; 3 when behind, 4 when ahead."""
    database = settings.database(create=True, check_schema=False)
    try:
        state = _schema_state(database)
    finally:
        database.dispose()
    if as_json:
        emit_json(state)
    if state["state"] == "behind":
        fail(
            SCHEMA_BEHIND,
            f"the schema is at {state['current'] or 'nothing'}, behind head {state['head']}: "
            "run `benchledger db upgrade`",
            EXIT_SCHEMA_BEHIND,
        )
    if state["state"] == "ahead":
        fail(
            SCHEMA_AHEAD,
            f"the schema is at {state['current']}, ahead of this benchledger's head "
            f"{state['head']}: upgrade benchledger",
            EXIT_SCHEMA_AHEAD,
        )
    if not as_json:
        click.echo(f"{state['url']}: at head {state['head']}")


# -- campaign ------------------------------------------------------------------------------


@main.group(cls=LedgerGroup, short_help="Benchmark campaigns.")
def campaign() -> None:
    """Benchmark campaigns: create, work, status, health, report, list."""


def _campaigns(settings: Settings) -> tuple[Database, CampaignService]:
    from benchledger.services.campaigns import CampaignService

    database = settings.database()
    return database, CampaignService(database)


def _fmt_time(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@campaign.command("create", short_help="Create a campaign; print its id.")
@click.option("--policy", "policy_file", required=True, metavar="FILE", help="Policy JSON file.")
@click.option("--suite", "suite_file", required=True, metavar="FILE", help="Suite JSON file.")
@click.option(
    "--max-attempts",
    type=int,
    default=3,
    show_default=True,
    help="Attempts per item (1-20), fixed for the campaign.",
)
@json_option
@pass_settings
def campaign_create(
    settings: Settings, policy_file: str, suite_file: str, max_attempts: int, as_json: bool
) -> None:
    """Create a campaign (idempotent) and print its id."""
    policy = CampaignPolicy.from_payload(read_json_file(policy_file, "policy"))
    suite = Suite.from_manifest(read_json_file(suite_file, "suite"))
    database, campaigns = _campaigns(settings)
    try:
        campaign_id = campaigns.create(policy, suite, max_attempts=max_attempts)
        status = campaigns.status(campaign_id)
    finally:
        database.dispose()
    if as_json:
        emit_json(status.as_payload())
    else:
        click.echo(campaign_id)


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
    facts.add_row("valid until", _fmt_time(status.valid_until))
    facts.add_row("created", _fmt_time(status.created_at))
    facts.add_row("updated", _fmt_time(status.updated_at))
    facts.add_row(
        "next due",
        "never (nothing left to do)"
        if status.next_due_at is None
        else _fmt_time(status.next_due_at),
    )
    tables = [counts, facts]
    if status.error_counts:
        errors = Table(title="last error codes", show_edge=False, title_justify="left")
        errors.add_column("code")
        errors.add_column("items", justify="right")
        for code, count in sorted(status.error_counts.items()):
            errors.add_row(code, str(count))
        tables.append(errors)
    return tables


def print_status(status: CampaignStatus, out: Console) -> None:
    out.print(f"[bold]campaign[/bold] {status.campaign_id}")
    for table in _status_tables(status):
        out.print(table)
        out.print()


def print_health(health: CampaignHealth, out: Console) -> None:
    out.print(f"[bold]health of[/bold] {health.campaign_id}")
    table = Table(show_header=False, show_edge=False, box=None)
    table.add_column()
    table.add_column()
    style = {"healthy": "green", "degraded": "yellow", "blocked": "red"}[health.status]
    table.add_row("status", f"[{style}]{health.status}[/{style}]")
    table.add_row("reasons", "\n".join(health.reasons) if health.reasons else "-")
    table.add_row("items", " ".join(f"{name} {count}" for name, count in health.counts))
    table.add_row("report ready", "yes" if health.report_ready else "no")
    table.add_row("last progress", _fmt_time(health.last_progress_at))
    out.print(table)


def print_report(report: Mapping[str, Any], out: Console) -> None:
    """The default report builder's shape: per-locale items, passed, pass rate, mean score."""
    locales = report.get("locales")
    if not isinstance(locales, Mapping):
        out.print_json(data=dict(report))
        return
    candidate = report.get("candidate") or {}
    out.print(f"[bold]report of[/bold] {report.get('campaign_id', '?')}")
    if isinstance(candidate, Mapping) and candidate:
        out.print(
            f"candidate {candidate.get('provider_id')}/{candidate.get('model_id')} "
            f"{candidate.get('model_version')}, {report.get('case_count', '?')} cases"
        )
    table = Table(show_edge=False)
    table.add_column("locale")
    table.add_column("items", justify="right")
    table.add_column("passed", justify="right")
    table.add_column("pass rate", justify="right")
    table.add_column("mean score", justify="right")

    def row(name: str, summary: Any, style: str | None = None) -> None:
        if not isinstance(summary, Mapping):
            return
        rate, mean = summary.get("pass_rate"), summary.get("mean_score")
        table.add_row(
            name,
            str(summary.get("items", "")),
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


def _campaign_health(campaigns: CampaignService, campaign_id: str, stale: float) -> CampaignHealth:
    health = campaigns.health(campaign_id, stale_after_seconds=stale)
    for code in (dom.NOT_FOUND, dom.POLICY_UNREGISTERED):
        if health.reasons == (code,):
            raise CommandError(code, f"no usable campaign {campaign_id}")
    return health


@campaign.command("status", short_help="Counts by status and error code.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_status(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """Counts by status and error code, completion, report finalization."""
    database, campaigns = _campaigns(settings)
    try:
        status = campaigns.status(campaign_id)
    finally:
        database.dispose()
    if as_json:
        emit_json(status.as_payload())
    else:
        print_status(status, console())


@campaign.command("health", short_help="Healthy, degraded or blocked, and why.")
@click.argument("campaign_id")
@click.option(
    "--stale-after",
    type=float,
    default=3600.0,
    show_default=True,
    metavar="SECONDS",
    help="No progress for this long is 'stalled'.",
)
@json_option
@pass_settings
def campaign_health(
    settings: Settings, campaign_id: str, stale_after: float, as_json: bool
) -> None:
    """Healthy, degraded or blocked, with text-free reasons (never fails on bad state)."""
    database, campaigns = _campaigns(settings)
    try:
        health = _campaign_health(campaigns, campaign_id, stale_after)
    finally:
        database.dispose()
    if as_json:
        emit_json(health.as_payload())
    else:
        print_health(health, console())


@campaign.command("report", short_help="The finalized report, per locale.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_report(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """The finalized report, verified against the results (per-locale table)."""
    database, campaigns = _campaigns(settings)
    try:
        report = campaigns.load_report(campaign_id)
    finally:
        database.dispose()
    if as_json:
        emit_json(report)
    else:
        print_report(report, console())


@campaign.command("list")
@click.option("--cursor", default=None, metavar="ID", help="Continue after this campaign id.")
@click.option(
    "--limit",
    type=int,
    default=None,
    help="At most this many campaigns (1-1000), then a cursor to continue [default: all].",
)
@json_option
@pass_settings
def campaign_list(settings: Settings, cursor: str | None, limit: int | None, as_json: bool) -> None:
    """Campaigns, oldest first, with their counts."""
    database, campaigns = _campaigns(settings)
    try:
        listing: list[dict[str, Any]] = []
        while True:
            page = campaigns.list(
                cursor=cursor, limit=dom.DEFAULT_LIST_LIMIT if limit is None else limit
            )
            for summary in page.campaigns:
                try:
                    listing.append(campaigns.status(summary.campaign_id).as_payload())
                except LedgerError as error:  # e.g. a legacy campaign without a stored policy
                    listing.append({**summary.as_payload(), "error": error.code})
            cursor = page.next_cursor
            if limit is not None or cursor is None:
                break
    finally:
        database.dispose()
    if as_json:
        emit_json({"campaigns": listing, "next_cursor": cursor})
        return
    table = Table(show_edge=False)
    table.add_column("campaign", no_wrap=True)
    for name in ("items", "succeeded", "failed", "retrying", "leased", "report"):
        table.add_column(name, justify="right")
    for entry in listing:
        if "error" in entry:
            code = str(entry["error"]).removeprefix(dom.C)  # the whole code is in --json
            table.add_row(entry["campaign_id"], str(entry["work_count"]), "", "", "", "", code)
            continue
        counts = entry["counts"]
        table.add_row(
            entry["campaign_id"],
            str(entry["work_count"]),
            str(counts["succeeded"]),
            str(counts["failed"]),
            str(counts["retry_wait"]),
            str(counts["leased"]),
            entry["report_finalization"]["status"],
        )
    out = console()
    if listing:
        out.print(table)
    else:
        out.print("no campaigns")
    if cursor is not None:
        out.print(f"(more: --cursor {cursor})")


@campaign.command("work", short_help="Work a campaign with N processes.")
@click.argument("campaign_id")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes.")
@click.option(
    "--evaluator",
    required=True,
    metavar="MODULE:FUNCTION",
    help="evaluate(claim, heartbeat) -> result, e.g. benchledger.examples.evaluator:evaluate.",
)
@click.option("--worker-id", "worker_prefix", default=None, help="Worker id prefix.")
@click.option("--lease-seconds", type=float, default=300.0, show_default=True)
@click.option("--retry-base-seconds", type=float, default=5.0, show_default=True)
@click.option("--retry-max-seconds", type=float, default=3600.0, show_default=True)
@click.option("--retry-jitter", type=float, default=0.0, show_default=True)
@click.option(
    "--poll-seconds",
    type=float,
    default=1.0,
    show_default=True,
    help="Longest wait between looks when no item is due (wakes sooner when one falls due).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bar (default: when stderr is a terminal).",
)
@pass_settings
def campaign_work(
    settings: Settings,
    campaign_id: str,
    workers: int,
    evaluator: str,
    worker_prefix: str | None,
    lease_seconds: float,
    retry_base_seconds: float,
    retry_max_seconds: float,
    retry_jitter: float,
    poll_seconds: float,
    progress: bool | None,
) -> None:
    """Work a campaign with N processes until it is finished, blocked or interrupted.

    Exit 0 when the report is finalized, 1 when the campaign is blocked (an
    item or the report failed for good), 130 when interrupted (Ctrl-C: workers
    finish their current case first; nothing is lost, run again to resume).
    """
    from benchledger.workpool import WorkOptions, run_pool

    database = settings.database()
    database.dispose()
    options = WorkOptions(
        lease_seconds=lease_seconds,
        retry_base_seconds=retry_base_seconds,
        retry_max_seconds=retry_max_seconds,
        retry_jitter=retry_jitter,
        poll_seconds=poll_seconds,
    )
    result = run_pool(
        database.url,
        campaign_id,
        evaluator,
        workers=workers,
        options=options,
        worker_prefix=worker_prefix,
        progress=progress,
    )
    finish_work(result)


def finish_work(result: PoolResult) -> None:
    """Print how a pool run ended and exit accordingly (shared with the demo)."""
    status = result.status
    counts = status.counts
    click.echo(
        f"{status.campaign_id}: {counts['succeeded']}/{status.work_count} succeeded, "
        f"{counts['failed']} failed, {counts['retry_wait']} retrying, "
        f"{counts['leased']} leased; report {status.report_finalization['status']} "
        f"({result.cases} cases in {result.elapsed:.1f} s)",
        err=True,
    )
    if result.errors:
        code, message = result.errors[0]
        fail(code, message)
    if result.interrupted:
        fail(CLI_INTERRUPTED, "stopped; run `campaign work` again to resume", EXIT_INTERRUPTED)
    if status.blocked:
        failed = counts["failed"]
        if failed:
            fail(
                dom.REASON_FAILED,
                f"{failed} item(s) failed for good: see `benchledger campaign status "
                f"{status.campaign_id}`",
            )
        fail(
            dom.REASON_REPORT_FAILED,
            f"report finalization failed ({status.report_finalization['error_code']})",
        )


# -- study ----------------------------------------------------------------------------------

ACTOR_ENV = "BENCHLEDGER_ACTOR"
ACTOR_MISSING = "ledger.input.actor_missing"


class StudyContext:
    """The settings plus the acting actor of every study command."""

    def __init__(self, settings: Settings, actor: str | None) -> None:
        self.settings = settings
        self._actor = actor

    @property
    def actor(self) -> str:
        if not self._actor:
            fail(ACTOR_MISSING, f"name the acting actor with --actor or {ACTOR_ENV}")
        return self._actor

    @contextlib.contextmanager
    def service(self) -> Iterator[StudyService]:
        database = self.settings.database()
        service = StudyService(database)
        try:
            yield service
        except StudyError as error:
            if error.code == "forbidden" and service.role_of(self.actor) is None:
                raise CommandError(
                    error.code,
                    f"{error.message} {self.actor!r} has no role: the ledger's first owner runs "
                    "`benchledger study bootstrap`, then grants roles with `study grant`",
                ) from None
            raise
        finally:
            database.dispose()


pass_study = click.make_pass_decorator(StudyContext)


@main.group(cls=LedgerGroup, short_help="Experiment studies.")
@click.option(
    "--actor",
    envvar=ACTOR_ENV,
    default=None,
    metavar="ID",
    help=f"The acting actor (env {ACTOR_ENV}); every operation is authorized for it.",
)
@click.pass_context
def study(context: click.Context, actor: str | None) -> None:
    """Experiment studies: budgets, trials, admissions, epochs, candidates."""
    context.obj = StudyContext(context.find_object(Settings) or Settings(None), actor)


def request_key_option(function: F) -> F:
    return click.option(
        "--request-key",
        default=None,
        metavar="KEY",
        help="Idempotency key (8-128 chars): repeat it to retry safely. Default: a new one.",
    )(function)


def revision_option(function: F) -> F:
    return click.option(
        "--revision",
        type=int,
        default=None,
        help="The study revision this change is based on (default: the current one).",
    )(function)


def _key(request_key: str | None) -> str:
    return request_key or f"cli-{uuid.uuid4().hex}"


def _revision(service: StudyService, actor: str, study_id: str, revision: int | None) -> int:
    if revision is not None:
        return revision
    return service.get(actor, study_id, limit=1).study.revision


def emit_document(value: object) -> None:
    emit_json(to_document(value))


def _budget_table(page: StudyPage) -> Table:
    table = Table(show_edge=False)
    table.add_column("dimension")
    for name in ("limit", "charged", "remaining"):
        table.add_column(name, justify="right")
    limits, charged, remaining = (
        page.study.limits.to_document(),
        page.charged.to_document(),
        page.remaining.to_document(),
    )
    for name in DIMENSIONS:
        table.add_row(name, str(limits[name]), str(charged[name]), str(remaining[name]))
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


@study.command("create", short_help="Create a draft study; print its id.")
@click.option(
    "--spec", "spec_file", required=True, metavar="FILE", help="JSON: name, limits, policy."
)
@click.option("--name", default=None, help="Override the spec's name.")
@request_key_option
@json_option
@pass_study
def study_create(
    ctx: StudyContext, spec_file: str, name: str | None, request_key: str | None, as_json: bool
) -> None:
    """Create a draft study (owner only) and print its id."""
    spec = read_json_file(spec_file, "study spec")
    if not isinstance(spec, dict) or set(spec) != {"name", "limits", "policy"}:
        fail("invalid", f"study spec {spec_file} needs exactly: name, limits, policy")
    limits = Budget.from_document(spec["limits"], "Study limits")
    policy = SelectionPolicy.from_document(spec["policy"])
    with ctx.service() as service:
        created = service.create(
            ctx.actor,
            name=name or spec["name"],
            limits=limits,
            policy=policy,
            request_key=_key(request_key),
        )
    if as_json:
        emit_document(created)
    else:
        click.echo(created.id)


@study.command("show", short_help="The study, its budget and reservations.")
@click.argument("study_id")
@click.option("--offset", type=int, default=0, help="First reservation to show.")
@click.option("--revision", type=int, default=None, help="Pin the revision (later pages).")
@json_option
@pass_study
def study_show(
    ctx: StudyContext, study_id: str, offset: int, revision: int | None, as_json: bool
) -> None:
    """The study, its budget (limit, charged, remaining) and its reservations."""
    with ctx.service() as service:
        page = service.get(ctx.actor, study_id, offset=offset, revision=revision)
    if as_json:
        emit_document(page)
    else:
        print_study(page, console())


@study.command("list")
@click.option("--cursor", default=None, help="Continue after this study id.")
@click.option("--limit", type=int, default=20, show_default=True)
@json_option
@pass_study
def study_list(ctx: StudyContext, cursor: str | None, limit: int, as_json: bool) -> None:
    """Study summaries in id order."""
    with ctx.service() as service:
        listing = service.list(ctx.actor, cursor=cursor, limit=limit)
    if as_json:
        emit_document(listing)
        return
    out = console()
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


def _material_ref(service: StudyService, actor: str, material: str) -> MaterialRef:
    """A material sha256, or a material JSON file to register first."""
    if Path(material).is_file() or material.endswith(".json"):
        document = read_json_file(material, "material")
        recipe, envelope, trainer_id, builtin = material_from_document(document)
        registered = service.register_material(
            actor, recipe=recipe, envelope=envelope, trainer_id=trainer_id, builtin=builtin
        )
        return registered.ref
    return MaterialRef(material)


@study.command("material", short_help="Register recipe materials.")
@click.argument("material_file", metavar="FILE")
@json_option
@pass_study
def study_material(ctx: StudyContext, material_file: str, as_json: bool) -> None:
    """Register recipe materials (one JSON object or a list); print their sha256."""
    documents = read_json_file(material_file, "material")
    items = documents if isinstance(documents, list) else [documents]
    registered: list[Material] = []
    with ctx.service() as service:
        for document in items:
            recipe, envelope, trainer_id, builtin = material_from_document(document)
            registered.append(
                service.register_material(
                    ctx.actor,
                    recipe=recipe,
                    envelope=envelope,
                    trainer_id=trainer_id,
                    builtin=builtin,
                )
            )
    if as_json:
        emit_json([to_document(item) for item in registered])
        return
    for item in registered:
        click.echo(item.sha256)


@study.command("trial", short_help="Add a member trial; print its id.")
@click.argument("study_id")
@click.option(
    "--material",
    required=True,
    metavar="SHA256|FILE",
    help="A registered material's sha256, or a material JSON file (registered first).",
)
@click.option("--replicate", type=int, default=1, show_default=True)
@revision_option
@request_key_option
@json_option
@pass_study
def study_trial(
    ctx: StudyContext,
    study_id: str,
    material: str,
    replicate: int,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Add an immutable member trial (one material, one replicate); print its id."""
    with ctx.service() as service:
        ref = _material_ref(service, ctx.actor, material)
        trial = service.prepare_trial(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            material=ref,
            replicate=replicate,
            request_key=_key(request_key),
        )
    if as_json:
        emit_document(trial)
    else:
        click.echo(trial.id)


@study.command("open", short_help="Open a draft, or continue a study.")
@click.argument("study_id")
@click.option(
    "--epoch",
    type=int,
    default=None,
    help="The admission epoch being continued (default: the current one).",
)
@revision_option
@request_key_option
@json_option
@pass_study
def study_open(
    ctx: StudyContext,
    study_id: str,
    epoch: int | None,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Open a draft, or continue a stopped study into a new epoch (owner only)."""
    with ctx.service() as service:
        current = service.get(ctx.actor, study_id, limit=1).study
        base = current.revision if revision is None else revision
        if current.state is StudyState.DRAFT and epoch is None:
            opened = service.open_study(
                ctx.actor, study_id, revision=base, request_key=_key(request_key)
            )
        else:
            opened = service.continue_study(
                ctx.actor,
                study_id,
                revision=base,
                admission_epoch=current.admission_epoch if epoch is None else epoch,
                request_key=_key(request_key),
            )
    if as_json:
        emit_document(opened)
    else:
        click.echo(f"{opened.id} open in epoch {opened.admission_epoch}")


@study.command("admit", short_help="Admit one run attempt; print its run id.")
@click.argument("study_id")
@click.option("--trial", "trial_id", required=True, help="The member trial to run.")
@click.option("--epoch", type=int, default=None, help="Admission epoch (default: current).")
@click.option("--approval", "approval_id", default=None, help="An owner's execution grant.")
@click.option("--parent-run", "parent_run_id", default=None, help="Retry of this ceased run.")
@revision_option
@request_key_option
@json_option
@pass_study
def study_admit(
    ctx: StudyContext,
    study_id: str,
    trial_id: str,
    epoch: int | None,
    approval_id: str | None,
    parent_run_id: str | None,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Admit one run attempt, reserving its material's whole envelope; print the run id."""
    with ctx.service() as service:
        current = service.get(ctx.actor, study_id, limit=1).study
        admission = service.admit(
            ctx.actor,
            study_id,
            revision=current.revision if revision is None else revision,
            admission_epoch=current.admission_epoch if epoch is None else epoch,
            trial_id=trial_id,
            request_key=_key(request_key),
            approval_id=approval_id,
            parent_run_id=parent_run_id,
        )
    if as_json:
        emit_document(admission)
    else:
        click.echo(admission.run.id)


@study.command("reconcile", short_help="Settle reservations from run state.")
@click.argument("study_id")
@json_option
@pass_study
def study_reconcile(ctx: StudyContext, study_id: str, as_json: bool) -> None:
    """Settle reservations from run state; close admission on unknown custody."""
    with ctx.service() as service:
        page = service.reconcile(ctx.actor, study_id)
    if as_json:
        emit_document(page)
    else:
        print_study(page, console())


@study.command("stop", short_help="Close admission; cancel live runs.")
@click.argument("study_id")
@revision_option
@request_key_option
@json_option
@pass_study
def study_stop(
    ctx: StudyContext,
    study_id: str,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Close the admission epoch and cancel the runs that have not ceased."""
    with ctx.service() as service:
        outcome = service.stop(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            request_key=_key(request_key),
        )
    if as_json:
        emit_document(outcome)
        return
    receipt = outcome.receipt
    out = console()
    out.print(
        f"stopped admission: epoch {receipt.admission_epoch}, receipt {receipt.stop_receipt_id}, "
        f"{len(receipt.run_ids)} run(s) asked to cancel"
    )
    print_study(outcome.status, out)


@study.command("select", short_help="Select a candidate checkpoint.")
@click.argument("study_id")
@click.option("--trial", "trial_id", required=True)
@click.option("--run", "run_id", required=True)
@click.option("--checkpoint", "checkpoint_sha256", default=None, help="Explicit checkpoint.")
@revision_option
@request_key_option
@json_option
@pass_study
def study_select(
    ctx: StudyContext,
    study_id: str,
    trial_id: str,
    run_id: str,
    checkpoint_sha256: str | None,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Retain a diagnostic candidate: the policy's checkpoint of a completed member run."""
    with ctx.service() as service:
        result = service.select_candidate(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            trial_id=trial_id,
            run_id=run_id,
            request_key=_key(request_key),
            checkpoint_sha256=checkpoint_sha256,
        )
    if as_json:
        emit_document(result)
        return
    print_candidate(result, console())


def print_candidate(result: CandidateResult, out: Console) -> None:
    candidate = result.candidate
    out.print(f"[bold]candidate[/bold] {candidate.id} ({candidate.decision})")
    out.print(
        f"run {result.run_id}, trial {candidate.trial_id}, checkpoint step "
        f"{result.checkpoint.step} ({result.checkpoint.sha256[:16]}…)"
    )
    for limitation in candidate.limitations:
        out.print(f"limitation: {limitation}")


@study.command("candidate", short_help="Show a retained candidate.")
@click.argument("candidate_id")
@json_option
@pass_study
def study_candidate(ctx: StudyContext, candidate_id: str, as_json: bool) -> None:
    """A retained candidate, re-verified against its run's evidence."""
    with ctx.service() as service:
        result = service.candidate(ctx.actor, candidate_id)
    if as_json:
        emit_document(result)
    else:
        print_candidate(result, console())


@study.command("approve", short_help="Grant one execution of a trial.")
@click.argument("study_id")
@click.option("--trial", "trial_id", required=True)
@click.option("--material", "material_sha256", required=True, help="The trial's material sha256.")
@click.option("--consumer", "consumer_actor_id", required=True, help="Who may admit it.")
@click.option("--ttl", "ttl_seconds", type=int, default=600, show_default=True)
@revision_option
@request_key_option
@json_option
@pass_study
def study_approve(
    ctx: StudyContext,
    study_id: str,
    trial_id: str,
    material_sha256: str,
    consumer_actor_id: str,
    ttl_seconds: int,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Grant another actor one admission of an exact trial material (owner only)."""
    with ctx.service() as service:
        grant = service.approve(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            trial_id=trial_id,
            expected_material_sha256=material_sha256,
            consumer_actor_id=consumer_actor_id,
            request_key=_key(request_key),
            ttl_seconds=ttl_seconds,
        )
    if as_json:
        emit_document(grant)
    else:
        click.echo(grant.id)


@study.command("run", short_help="Show a run's state, or report its new state.")
@click.argument("run_id")
@click.argument(
    "state", required=False, default=None, type=click.Choice([state.value for state in RunState])
)
@click.option(
    "--ceased/--not-ceased",
    "custody_ceased",
    default=None,
    help="Whether the run's process is proved gone (terminal states; default: ceased).",
)
@json_option
@pass_study
def study_run(
    ctx: StudyContext, run_id: str, state: str | None, custody_ceased: bool | None, as_json: bool
) -> None:
    """Show a run's state, or report its new STATE (what a run supervisor does)."""
    if state is None and custody_ceased is not None:
        raise click.UsageError(
            "--ceased/--not-ceased goes with a STATE to report", click.get_current_context()
        )
    with ctx.service() as service:
        if state is None:
            run = service.run(ctx.actor, run_id)
        else:
            run = service.report_run(ctx.actor, run_id, state, custody_ceased=custody_ceased)
    if as_json:
        emit_document(run)
    else:
        click.echo(f"{run.id} {run.state.value}{' (ceased)' if run.ceased else ''}")


@study.command("evidence", short_help="Record a run's model evidence.")
@click.argument("evidence_file", metavar="FILE")
@pass_study
def study_evidence(ctx: StudyContext, evidence_file: str) -> None:
    """Record a run's model evidence (JSON; see docs/cli.md) once."""
    evidence = RunEvidence.from_document(read_json_file(evidence_file, "evidence"))
    with ctx.service() as service:
        service.record_evidence(ctx.actor, evidence)
    click.echo(f"{evidence.run_id} evidence {evidence.sha256}")


@study.command("bootstrap", short_help="Become the ledger's first owner.")
@pass_study
def study_bootstrap(ctx: StudyContext) -> None:
    """Make the acting actor the ledger's first owner (refused once there is one)."""
    with ctx.service() as service:
        role = service.bootstrap_owner(ctx.actor)
    click.echo(f"{ctx.actor} is {role.value}")


@study.command("grant")
@click.argument("subject")
@click.argument("role", type=click.Choice([role.value for role in Role]))
@pass_study
def study_grant(ctx: StudyContext, subject: str, role: str) -> None:
    """Give SUBJECT a role (owner only)."""
    with ctx.service() as service:
        granted = service.grant_role(ctx.actor, subject, role)
    click.echo(f"{subject} is {granted.value}")


@study.command("revoke", short_help="Remove an actor's role.")
@click.argument("subject")
@pass_study
def study_revoke(ctx: StudyContext, subject: str) -> None:
    """Remove SUBJECT's role (owner only; the last owner stays)."""
    with ctx.service() as service:
        service.revoke_role(ctx.actor, subject)
    click.echo(f"{subject} has no role")


# -- demo ----------------------------------------------------------------------------------


@main.command(short_help="Run both domains end to end.")
@click.option(
    "--cases",
    type=click.IntRange(1, 300),
    default=None,
    help="Use the first N cases of the example suite (default: all 300).",
)
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bars (default: when stderr is a terminal).",
)
@pass_settings
def demo(settings: Settings, cases: int | None, workers: int, progress: bool | None) -> None:
    """Run both domains end to end on one database (creates or upgrades it).

    Campaigns over the bundled example suite worked by N processes, then a
    study spending its budget and selecting a candidate. Safe to run again.
    """
    from benchledger.demo import run_demo

    database = settings.database(create=True, check_schema=False)
    database.dispose()
    run_demo(database.url, cases=cases, workers=workers, out=console(), progress=progress)
