"""``benchledger campaign``: create, status, health, rename, report, verify, list.

The other commands live in modules of their own, imported when looked up
(``_COMMANDS``): work, results, attempts, compare, watch, archive, and the
operators' actions (:mod:`benchledger.cli.campaign_actions`).

Every command that takes a campaign id accepts a unique prefix of it (at least
4 hex digits, with or without ``benchmark-campaign-``), as git does.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from benchledger.cli.group import LedgerGroup
from benchledger.cli.numbers import INTEGER, NUMBER, parse_float, parse_int
from benchledger.cli.output import (
    CommandError,
    console,
    emit_json,
    fail,
    json_option,
    read_json_file,
)
from benchledger.cli.policy import policy_problem
from benchledger.cli.settings import Settings, pass_settings
from benchledger.cli.views import (
    print_campaign_list,
    print_controls,
    print_health,
    print_report,
    print_status,
)

if TYPE_CHECKING:  # imported where a command needs them: importing the CLI stays cheap
    from rich.console import Console

    from benchledger.domain.campaign_plan import CampaignPolicy, Suite
    from benchledger.services.campaigns import CampaignService
    from benchledger.services.campaigns.actions import CampaignActions


#: Commands defined in modules of their own, imported when looked up.
_COMMANDS = {
    "work": "benchledger.cli.campaign_work:campaign_work",
    "results": "benchledger.cli.campaign_results:campaign_results",
    "attempts": "benchledger.cli.campaign_results:campaign_attempts",
    "compare": "benchledger.cli.campaign_compare:campaign_compare",
    "watch": "benchledger.cli.campaign_watch:campaign_watch",
    "archive": "benchledger.cli.campaign_archive:campaign_archive",
    "register": "benchledger.cli.campaign_actions:campaign_register",
    "retry": "benchledger.cli.campaign_actions:campaign_retry",
    "delete": "benchledger.cli.campaign_actions:campaign_delete",
    "cancel": "benchledger.cli.campaign_actions:campaign_cancel",
    "resume": "benchledger.cli.campaign_actions:campaign_resume",
    "limits": "benchledger.cli.campaign_actions:campaign_limits",
}


@click.group(cls=LedgerGroup, lazy_commands=_COMMANDS, short_help="Benchmark campaigns.")
def campaign() -> None:
    """Benchmark campaigns: create, work, watch, status, health, report, list; results,
    attempts, compare; register, rename, retry, archive, delete.

    CAMPAIGN_ID may be any unique prefix of an id (at least 4 hex digits).
    """


@contextlib.contextmanager
def campaign_service(
    settings: Settings, *, pass_score: float | None = None
) -> Iterator[CampaignService]:
    """The campaign service on the settings' database, disposed of afterwards.

    With a signing key (``--signing-key-file``) it accepts only results signed by
    the key ring; with ``pass_score`` its report builder counts a result without a
    ``passed`` flag as passed at that score.
    """
    from benchledger.services.campaigns import CampaignService

    options = settings.service_options(pass_score=pass_score)  # a bad key: before the database
    database = settings.database()
    try:
        yield CampaignService(database, **options)
    finally:
        database.dispose()


# -- the pass threshold ----------------------------------------------------------------------

PASS_SCORE_INVALID = "ledger.input.pass_score_invalid"


class PassScore(click.ParamType[float]):
    """``--pass-score``: a number from 0 to 1 in ASCII digits, else a coded refusal."""

    name = "pass_score"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            score = parse_float(value)
        except ValueError:
            score = -1.0
        if not 0 <= score <= 1:
            shown = ascii(value)[:40] if isinstance(value, str) else type(value).__name__
            raise CommandError(
                PASS_SCORE_INVALID, f"--pass-score must be a number from 0 to 1, not {shown}"
            )
        return score

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SCORE"


def pass_score_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--pass-score SCORE`` (0 to 1; default the report builder's, 0.5)."""
    return click.option("--pass-score", type=PassScore(), default=None, help=help_text)


def actions(campaigns: CampaignService) -> CampaignActions:
    """The operators' actions on the service's database (resolve, retry, delete, ...)."""
    from benchledger.services.campaigns.actions import CampaignActions

    return CampaignActions(campaigns)


def _show(value: Any, as_json: bool, payload: Any, show: Callable[[Any, Console], None]) -> None:
    if as_json:
        emit_json(payload)
    else:
        show(value, console())


def _cap(value: str | None, option: str) -> int | None:
    if value is None or value.lower() == "none":
        return None
    try:
        return parse_int(value)  # ASCII digits only: a fullwidth 0 must not pause a campaign
    except ValueError:
        raise CommandError(
            "benchmark.campaign.limit_invalid",
            f"{option} is an integer from 0 (paused) to 1,000,000, or none",
        ) from None


def parse_caps(concurrent: str | None, per_minute: str | None) -> dict[str, int | None]:
    """The caps given on the command line (an option left out is not changed)."""
    caps: dict[str, int | None] = {}
    if concurrent is not None:
        caps["max_concurrent_leases"] = _cap(concurrent, "--max-concurrent-leases")
    if per_minute is not None:
        caps["max_claims_per_minute"] = _cap(per_minute, "--max-claims-per-minute")
    return caps


def cap_options(function: Callable[..., Any]) -> Callable[..., Any]:
    function = click.option(
        "--max-claims-per-minute",
        default=None,
        metavar="N|none",
        help="At most N item claims in any 60 s (0 pauses; none: no cap).",
    )(function)
    return click.option(
        "--max-concurrent-leases",
        default=None,
        metavar="N|none",
        help="At most N items leased at once (0 pauses; none: no cap).",
    )(function)


def read_policy_and_suite(policy_file: str, suite_file: str) -> tuple[CampaignPolicy, Suite]:
    """Read the policy and suite files; a bad policy names its field and the rule."""
    from benchledger.domain.campaign import POLICY_INVALID
    from benchledger.domain.campaign_plan import CampaignPolicy, Suite
    from benchledger.errors import LedgerError

    document = read_json_file(policy_file, "policy")
    try:
        policy = CampaignPolicy.from_payload(document)
    except LedgerError as error:
        if error.code != POLICY_INVALID:
            raise
        raise CommandError(POLICY_INVALID, f"{policy_file}: {policy_problem(document)}") from None
    return policy, Suite.from_manifest(read_json_file(suite_file, "suite"))


@campaign.command("create", short_help="Create a campaign; print its id.")
@click.option("--policy", "policy_file", required=True, metavar="FILE", help="Policy JSON file.")
@click.option("--suite", "suite_file", required=True, metavar="FILE", help="Suite JSON file.")
@click.option(
    "--max-attempts",
    type=INTEGER,
    default=3,
    show_default=True,
    help="Attempts per item (1-20), fixed for the campaign.",
)
@click.option(
    "--name",
    default=None,
    help="A name people know it by (metadata: not part of its identity).",
)
@click.option(
    "--evaluator",
    default=None,
    metavar="NAME",
    help=(
        "The evaluator a fleet (`benchledger work --all`) runs it with, e.g. "
        "mybench:evaluate: stored as a name only, which a fleet maps to code through "
        "its own --evaluator list."
    ),
)
@click.option(
    "--limit-group",
    default=None,
    metavar="KEY",
    help="The limit group whose caps it shares (default: its policy's provider).",
)
@click.option(
    "--max-throttles",
    type=INTEGER,
    default=100,
    show_default=True,
    help="Throttled hand-backs per item (no attempt spent) before a throttle spends one.",
)
@cap_options
@json_option
@pass_settings
def campaign_create(
    settings: Settings,
    policy_file: str,
    suite_file: str,
    max_attempts: int,
    name: str | None,
    evaluator: str | None,
    limit_group: str | None,
    max_throttles: int,
    max_concurrent_leases: str | None,
    max_claims_per_minute: str | None,
    as_json: bool,
) -> None:
    """Create a campaign (idempotent) and print its id.

    --name gives it a name (`campaign rename` changes it);
    --max-concurrent-leases and --max-claims-per-minute set its flow-control
    caps (for evaluators that call rate-limited APIs); `campaign limits`
    changes them later. --limit-group names the group whose caps (`benchledger
    limits set`) it shares with other campaigns; --evaluator names the
    evaluator a fleet serves it with.
    """
    policy, suite = read_policy_and_suite(policy_file, suite_file)
    caps = parse_caps(max_concurrent_leases, max_claims_per_minute)
    with campaign_service(settings) as campaigns:
        given = {key: value for key, value in caps.items() if value is not None}
        campaign_id = campaigns.create(
            policy,
            suite,
            max_attempts=max_attempts,
            name=name,
            max_concurrent_leases=given.get("max_concurrent_leases"),
            max_claims_per_minute=given.get("max_claims_per_minute"),
            max_throttles=max_throttles,
            limit_group=limit_group,
            evaluator=evaluator,
        )
        if len(given) < len(caps):  # "none" clears a cap, as `campaign limits` does
            actions(campaigns).set_limits(
                campaign_id, **{name: None for name in caps if name not in given}
            )
        status = campaigns.status(campaign_id)
    if as_json:
        emit_json(status.as_payload())
    else:
        click.echo(campaign_id)


@campaign.command("status", short_help="Counts by status and error code.")
@click.argument("campaign_id")
@json_option
@pass_settings
def campaign_status(settings: Settings, campaign_id: str, as_json: bool) -> None:
    """Counts by status and error code, completion, report finalization."""
    with campaign_service(settings) as campaigns:
        status = campaigns.status(actions(campaigns).resolve(campaign_id))
        controls = actions(campaigns).controls(status.campaign_id)
    if as_json:
        emit_json(status.as_payload())
        return
    out = console()
    print_status(status, out)
    print_controls(controls, out)


@campaign.command("health", short_help="Healthy, degraded or blocked, and why.")
@click.argument("campaign_id")
@click.option(
    "--stale-after",
    type=NUMBER,
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
    """Healthy, degraded or blocked, with text-free reasons.

    Bad state is reported, never refused: whatever it finds (failed items, a
    corrupt row, a legacy campaign still to register), it prints it and exits
    0. It exits 1 only when CAMPAIGN_ID names no campaign (or several).
    """
    with campaign_service(settings) as campaigns:
        health = campaigns.health(
            actions(campaigns).resolve(campaign_id), stale_after_seconds=stale_after
        )
    _show(health, as_json, health.as_payload(), print_health)


@campaign.command("rename", short_help="Name a campaign (metadata, not identity).")
@click.argument("campaign_id")
@click.argument("name", required=False)
@click.option("--clear", is_flag=True, help="Remove the campaign's name.")
@pass_settings
def campaign_rename(settings: Settings, campaign_id: str, name: str | None, clear: bool) -> None:
    """Give the campaign NAME (listings and pages show it); --clear removes it.

    The name is metadata: the campaign's id comes from its policy, so renaming
    changes neither, and `campaign create` with the same policy finds it.
    """
    if (name is None) == (not clear):
        fail("ledger.cli.usage", "give a NAME, or --clear (not both)", exit_code=2)
    with campaign_service(settings) as campaigns:
        cid = actions(campaigns).resolve(campaign_id)
        campaigns.rename(cid, None if clear else name)
    click.echo(f"{cid}: " + ("name cleared" if clear else f"named {name}"))


@campaign.command("report", short_help="The finalized report, per locale.")
@click.argument("campaign_id")
@click.option(
    "--provisional",
    is_flag=True,
    help="Summarize what has succeeded so far (a running or blocked campaign); never stored.",
)
@pass_score_option(
    "With --provisional: count a result without a passed flag as passed from this "
    "score (0-1) [default: 0.5]."
)
@json_option
@pass_settings
def campaign_report(
    settings: Settings,
    campaign_id: str,
    provisional: bool,
    pass_score: float | None,
    as_json: bool,
) -> None:
    """The finalized report, verified against the results (per-locale table).

    A campaign that is not finished (or is blocked) has no report yet
    (`incomplete`): --provisional shows what has succeeded so far instead,
    marked provisional. A finalized report keeps the pass score it was built
    with (its pass_score): --pass-score applies to --provisional only.
    """
    if pass_score is not None and not provisional:
        fail(
            "ledger.cli.usage",
            "--pass-score applies to --provisional: a finalized report keeps the pass "
            "score it was built with",
            exit_code=2,
        )
    with campaign_service(settings, pass_score=pass_score) as campaigns:
        cid = actions(campaigns).resolve(campaign_id)
        report = campaigns.load_report(cid, provisional=provisional)
    _show(report, as_json, report, print_report)


@campaign.command("verify", short_help="The integrity audit: re-verify every stored row.")
@click.argument("campaign_id")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bar on stderr (default: when stderr is a terminal).",
)
@json_option
@pass_settings
def campaign_verify(
    settings: Settings, campaign_id: str, progress: bool | None, as_json: bool
) -> None:
    """Re-verify every stored row of the campaign (results, hashes, work ids, seals,
    signatures, the report) in batches, and record when and what was found.

    Exit 0 when nothing is off; otherwise print every kind of problem found
    (its code, how many rows, the first few) and exit 1. `campaign status` and
    `campaign health` show the last audit. Reads the whole campaign: run it
    after a campaign finishes, before trusting its report, and now and then
    (it does not block workers).

    With --signing-key-file (a global option) every result must carry a valid
    signature by a key of the ring; one that does not is a result_invalid
    problem. Without a key, signatures are not checked (the output says so).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    keys = settings.signing_keys()
    key_ids = [] if keys is None else list(keys.key_ids)
    live = sys.stderr.isatty() if progress is None else progress
    with campaign_service(settings) as campaigns:
        campaign_id = actions(campaigns).resolve(campaign_id)
        if not live:
            report = campaigns.verify(campaign_id)
        else:
            with Progress(
                TextColumn("verifying"),
                BarColumn(),
                MofNCompleteColumn(),
                console=Console(file=sys.stderr, highlight=False),
                transient=True,
            ) as bar:
                task = bar.add_task("verify", total=None)
                report = campaigns.verify(
                    campaign_id,
                    progress=lambda done, total: bar.update(task, completed=done, total=total),
                )
    if as_json:
        emit_json({**report.as_payload(), "signing_keys": key_ids})
    else:
        out = console()
        outcome = "[green]ok[/green]" if report.ok else "[red]problems found[/red]"
        out.print(f"[bold]integrity of[/bold] {report.campaign_id}: {outcome}")
        out.print(f"rows checked: {report.rows_checked}")
        out.print(_signatures_line(key_ids), markup=False)
        for problem in report.problems:
            out.print(f"  {problem.kind}: {problem.count} row(s), {problem.code}", markup=False)
            for example in problem.examples:
                out.print(f"    {example}", markup=False)
        if key_ids and any(problem.kind == "result_invalid" for problem in report.problems):
            out.print(
                "  result_invalid with a signing key: results signed by no key of the ring "
                "(another key, or unsigned), or edited since they were signed; see "
                "docs/signing.md",
                markup=False,
            )
    if not report.ok:
        fail(
            report.problems[0].code,
            f"the integrity audit found {report.problem_count} problem(s) of "
            f"{len(report.problems)} kind(s)",
        )


def _signatures_line(key_ids: list[str]) -> str:
    if not key_ids:
        return "signatures: not checked (no signing key: --signing-key-file)"
    return "signatures: checked against " + ", ".join(key_ids)


@campaign.command("list")
@click.option("--cursor", default=None, metavar="ID", help="Continue after this campaign id.")
@click.option(
    "--limit",
    type=INTEGER,
    default=None,
    help="At most this many campaigns (1-1000), then a cursor to continue [default: all].",
)
@click.option(
    "-q", "--quiet", is_flag=True, help="Print the whole ids only, one per line (for scripts)."
)
@click.option("--provider", default=None, help="Only campaigns of this candidate provider.")
@click.option("--model", default=None, help="Only campaigns of this candidate model id.")
@click.option(
    "--suite", default=None, metavar="SHA", help="Only campaigns over this suite (sha256 prefix)."
)
@click.option("--name", default=None, help="Only campaigns whose name contains this.")
@json_option
@pass_settings
def campaign_list(
    settings: Settings,
    cursor: str | None,
    limit: int | None,
    quiet: bool,
    provider: str | None,
    model: str | None,
    suite: str | None,
    name: str | None,
    as_json: bool,
) -> None:
    """Campaigns, oldest first, with their name, candidate and counts (short ids: any
    unique prefix works); --provider, --model, --suite and --name keep only some."""
    from benchledger.domain.campaign import DEFAULT_LIST_LIMIT
    from benchledger.domain.campaign_labels import CampaignFilter
    from benchledger.errors import LedgerError

    where = CampaignFilter(provider=provider, model=model, suite=suite, name=name)

    listing: list[dict[str, Any]] = []
    with campaign_service(settings) as campaigns:
        if cursor is not None:  # a prefix; anything else is the service's page_invalid
            with contextlib.suppress(LedgerError):
                cursor = actions(campaigns).resolve(cursor)
        while True:
            page = campaigns.list(
                cursor=cursor,
                limit=DEFAULT_LIST_LIMIT if limit is None else limit,
                where=None if where.empty else where,
            )
            for summary in page.campaigns:
                if quiet:
                    click.echo(summary.campaign_id)
                    continue
                try:
                    listing.append(campaigns.status(summary.campaign_id).as_payload())
                except LedgerError as error:  # e.g. a legacy campaign without a stored policy
                    listing.append({**summary.as_payload(), "error": error.code})
            cursor = page.next_cursor
            if limit is not None or cursor is None:
                break
    if quiet:
        return
    if as_json:
        emit_json({"campaigns": listing, "next_cursor": cursor})
    else:
        print_campaign_list(listing, cursor, console())
