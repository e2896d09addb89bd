"""``benchledger campaign results`` and ``attempts``: every case's outcome and history.

``results`` prints a table (through a pager on a terminal) or streams JSON
Lines, CSV or Parquet to a file or stdout, a page of items at a time;
``attempts`` lists the attempt history (every try, including the ones that
failed before an item succeeded). Work ids are printed in full, so they can be
given to ``campaign retry --work-id``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, Any

import click

from benchledger.cli.campaign import actions, campaign_service, pass_score_option
from benchledger.cli.output import emit_json, fail, fmt_time, json_option
from benchledger.cli.settings import Settings, pass_settings
from benchledger.domain.campaign import STATUSES

_FORMATS = ("table", "jsonl", "csv", "parquet")


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _passed(value: bool | None) -> str:
    return "" if value is None else ("pass" if value else "fail")


def _table_lines(items: Iterator[Any]) -> Iterator[str]:
    header = ("locale", "case", "status", "tries", "score", "verdict", "error code", "work id")
    yield "\t".join(header) + "\n"
    for item in items:
        yield (
            "\t".join(
                (
                    item.locale,
                    item.case_key,
                    item.status,
                    str(item.attempts),
                    _score(item.score),
                    _passed(item.passed),
                    item.error_code or "",
                    item.work_id,
                )
            )
            + "\n"
        )


@click.command("results", short_help="Every case's outcome: table, JSONL, CSV, Parquet.")
@click.argument("campaign_id")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only items in it.")
@click.option("--locale", default=None, help="Only items of this target locale.")
@click.option(
    "--format",
    "export",
    type=click.Choice(_FORMATS),
    default="table",
    show_default=True,
    help="table (paged on a terminal), or a stream: jsonl, csv, parquet (the analysis extra).",
)
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="FILE",
    help="Write to FILE instead of stdout (required for parquet on a terminal).",
)
@pass_score_option("A result without a passed flag passes from this score (0-1) [default: 0.5].")
@pass_settings
def campaign_results(
    settings: Settings,
    campaign_id: str,
    status: str | None,
    locale: str | None,
    export: str,
    output: str | None,
    pass_score: float | None,
) -> None:
    """Every item of the campaign in (locale, case key) order: its status, attempts,
    score and verdict, last error code (in full) and work id.

    The verdict is the result's own passed flag when it has one, else whether
    its score reaches --pass-score (0.5 by default). The stream formats read a
    page of items at a time, so memory stays flat whatever the campaign's size.
    Items that failed for good are listed with `--status failed`; give their
    work ids to `campaign retry --work-id`.
    """
    from benchledger.analysis import write_items

    with campaign_service(settings, pass_score=pass_score) as campaigns:
        cid = actions(campaigns).resolve(campaign_id)
        items = campaigns.iter_results(cid, status=status, locale=locale)
        if export == "table":
            lines = _table_lines(items)
            if output is not None:
                with open(output, "w", encoding="utf-8") as out:
                    out.writelines(lines)
            elif sys.stdout.isatty():
                click.echo_via_pager(lines)
            else:
                for line in lines:
                    click.echo(line, nl=False)
            return
        binary = export == "parquet"
        if output is None and binary and sys.stdout.isatty():
            fail("ledger.cli.usage", "parquet is binary: give -o FILE (or redirect stdout)")
        if output is not None:
            with open(
                output,
                "wb" if binary else "w",
                encoding=None if binary else "utf-8",
                newline="" if not binary else None,
            ) as out:
                write_items(items, out, export)
            return
        stream: IO[Any] = sys.stdout.buffer if binary else sys.stdout
        write_items(items, stream, export)
        stream.flush()


@click.command("attempts", short_help="The attempt history: every try of every item.")
@click.argument("campaign_id")
@click.option("--work-id", default=None, help="Only this item's attempts.")
@click.option("--cursor", default=None, metavar="N", help="Continue after this attempt.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="At most this many attempts, then a cursor to continue.",
)
@json_option
@pass_settings
def campaign_attempts(
    settings: Settings,
    campaign_id: str,
    work_id: str | None,
    cursor: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """The attempt history, in the order it was recorded: worker, claimed and
    finished at, outcome (succeeded, failed, retry_scheduled, lease_expired,
    released), error code in full, the evaluator's duration.

    Items adopted from a legacy store, or finished before the history was kept
    (schema revision 0009), have no history: nothing is invented for them.
    """
    with campaign_service(settings) as campaigns:
        cid = actions(campaigns).resolve(campaign_id)
        page = campaigns.attempts(cid, work_id=work_id, cursor=cursor, limit=limit)
    if as_json:
        emit_json(
            {
                "attempts": [
                    {
                        "work_id": a.work_id,
                        "attempt": a.attempt,
                        "worker_id": a.worker_id,
                        "claimed_at": a.claimed_at,
                        "finished_at": a.finished_at,
                        "outcome": str(a.outcome),
                        "error_code": a.error_code,
                        "duration_seconds": a.duration_seconds,
                    }
                    for a in page.attempts
                ],
                "next_cursor": page.next_cursor,
            }
        )
        return
    from rich.table import Table

    from benchledger.cli.output import console

    table = Table(show_edge=False)
    for name in ("work id", "#", "worker", "claimed", "finished", "outcome", "seconds", "code"):
        table.add_column(name, no_wrap=name in ("work id", "code"))
    for a in page.attempts:
        table.add_row(
            a.work_id,
            str(a.attempt),
            a.worker_id or "",
            fmt_time(a.claimed_at) if a.claimed_at is not None else "",
            fmt_time(a.finished_at),
            str(a.outcome),
            "" if a.duration_seconds is None else f"{a.duration_seconds:.3f}",
            a.error_code or "",
        )
    out = console()
    if page.attempts:
        out.print(table)
    else:
        out.print("no attempts recorded")
    if page.next_cursor is not None:
        out.print(f"(more: --cursor {page.next_cursor})")
