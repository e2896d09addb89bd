"""``benchledger campaign archive``: retention for a finished campaign.

Drops the campaign's items, attempt history and claim log
(``CampaignService.archive``) and keeps its report, the results' digest and a
per-locale summary. With ``--export PATH`` every item is first written to PATH
as JSON Lines (``campaign results --format jsonl``'s columns, plus each stored
result and its sha256), flushed to disk before anything is deleted: the rows
move to the file instead of going away.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click

from benchledger.cli.campaign import actions, campaign_service
from benchledger.cli.output import (
    CONFIRMATION_REQUIRED,
    CommandError,
    emit_json,
    fail,
    fmt_time,
    json_option,
)
from benchledger.cli.settings import Settings, pass_settings

#: The export file exists already: the archive never overwrites one.
EXPORT_EXISTS = "ledger.input.export_exists"
#: The export file cannot be created or written (nothing was archived).
EXPORT_UNWRITABLE = "ledger.input.export_unwritable"


def write_records(records: Iterator[dict[str, Any]], out: IO[str]) -> int:
    """One JSON object a line, as ``campaign results --format jsonl`` writes; the count."""
    written = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        out.write("\n")
        written += 1
    return written


class _ExportFile:
    """PATH written through a temporary file beside it: synced to disk before the archive
    deletes anything, and renamed to PATH only once the archive committed."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        if self.path.exists():
            fail(EXPORT_EXISTS, f"{path} exists: the archive never overwrites a file")
        try:
            handle, name = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".partial"
            )
        except OSError as error:
            fail(EXPORT_UNWRITABLE, f"cannot write {path}: {error.strerror or error}")
        self.temporary = Path(name)
        self.out = os.fdopen(handle, "w", encoding="utf-8", newline="\n")

    def __call__(self, records: Iterator[dict[str, Any]]) -> None:
        try:
            write_records(records, self.out)
            self.out.flush()
            os.fsync(self.out.fileno())
        except OSError as error:
            raise CommandError(
                EXPORT_UNWRITABLE,
                f"cannot write {self.path}: {error.strerror or error}: nothing was archived",
            ) from None
        finally:
            self.out.close()

    def keep(self) -> None:
        """The archive committed: the file takes its name (the directory synced too)."""
        if self.path.exists():  # made meanwhile by someone else: keep both, say where
            fail(
                EXPORT_EXISTS,
                f"archived, but {self.path} appeared meanwhile: the export is {self.temporary}",
            )
        os.replace(self.temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def drop(self) -> None:
        self.out.close()
        self.temporary.unlink(missing_ok=True)


@click.command("archive", short_help="Drop a finished campaign's items; keep its report.")
@click.argument("campaign_id")
@click.option(
    "--export",
    "export_path",
    default=None,
    metavar="PATH",
    help="First write every item, with its result, to PATH as JSON Lines (a new file).",
)
@click.option("--yes", is_flag=True, help="Really drop the items (required).")
@json_option
@pass_settings
def campaign_archive(
    settings: Settings, campaign_id: str, export_path: str | None, yes: bool, as_json: bool
) -> None:
    """Retention for a finished campaign: drop its items, their results and attempt
    history (and its claim log); keep its report, the report's state, the policy and
    suite, the results' digest and a per-locale summary.

    Refused, with nothing changed, unless every item succeeded
    (benchmark.campaign.incomplete), the report is final (report_missing) and the
    integrity audit, run now, finds nothing (integrity_failed); an archived campaign
    is refused with benchmark.campaign.archived. Give --signing-key-file to check
    the results' signatures one last time. Afterwards `campaign report`, `status`,
    `health` and `verify` work as before; `campaign results`, `attempts` and
    `compare` refuse with benchmark.campaign.archived.

    --export PATH first writes every item to PATH as JSON Lines (the columns of
    `campaign results --format jsonl`, then result_sha256 and the stored result),
    synced to disk before anything is deleted; PATH must not exist. Requires --yes:
    without an export there is no undo.
    """
    if not yes:
        fail(
            CONFIRMATION_REQUIRED,
            "archiving drops the campaign's items and results for good: add --yes "
            "(and --export PATH to keep them in a file)",
        )
    export = _ExportFile(export_path) if export_path is not None else None
    try:
        with campaign_service(settings) as campaigns:
            cid = actions(campaigns).resolve(campaign_id)
            outcome = campaigns.archive(cid, export=export)
    except BaseException:
        if export is not None:
            export.drop()
        raise
    if export is not None:
        export.keep()
    if as_json:
        emit_json({**outcome.as_payload(), "export": export_path})
        return
    summary = outcome.summary
    locales = summary.get("locales") or {}
    dropped = outcome.dropped
    click.echo(f"archived {outcome.campaign_id} at {fmt_time(outcome.archived_at)}")
    click.echo(
        f"  kept: the report (sha256 {outcome.report_sha256}), its state, the policy and "
        f"suite, the results' digest ({outcome.results_sha256}) and the summary of "
        f"{outcome.items} item(s) in {len(locales)} locale(s) "
        f"(pass score {summary.get('pass_score')})"
    )
    click.echo(
        "  dropped: " + ", ".join(f"{rows} row(s) of {table}" for table, rows in dropped.items())
    )
    if export_path is not None:
        click.echo(f"  exported: {outcome.exported} item(s) to {export_path}")
