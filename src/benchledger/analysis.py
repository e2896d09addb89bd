"""Per-case results out of the ledger: JSON Lines, CSV, Arrow, pandas and Parquet.

``write_results`` streams a campaign's items (``CampaignService.iter_results``,
a page at a time) to a file in any of the formats; memory stays bounded by one
page whatever the campaign's size. ``results_table`` (Arrow) and
``results_frame`` (pandas) give typed columns for analysis; they and Parquet
need the ``analysis`` extra (``pip install 'benchledger[analysis]'``), imported
only when asked for, so the base install stays as small as it is.
"""

from __future__ import annotations

import csv
import enum
import itertools
import json
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, Final

from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.results import RESULT_COLUMNS, ItemResult
from benchledger.errors import LedgerError

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from benchledger.services.campaigns import CampaignService

#: Refused when pyarrow or pandas is needed and not installed.
ANALYSIS_MISSING: Final = "ledger.analysis.extra_missing"
INSTALL_HINT: Final = "needs the analysis extra: pip install 'benchledger[analysis]'"
#: Rows per Arrow record batch (and per Parquet row group write).
BATCH_ROWS: Final = 10_000


class ExportFormat(enum.StrEnum):
    """The formats ``write_results`` and ``campaign results --format`` write."""

    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"


class AnalysisUnavailable(LedgerError):
    """pyarrow or pandas is needed and not installed (``ledger.analysis.extra_missing``)."""

    def __init__(self, missing: str) -> None:
        super().__init__(ANALYSIS_MISSING, f"{missing} {INSTALL_HINT}")


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise AnalysisUnavailable("pyarrow") from None
    return pyarrow


def arrow_schema() -> pyarrow.Schema:
    """The typed columns of a results table (one per ``RESULT_COLUMNS`` entry)."""
    pa = _pyarrow()
    fields = [
        pa.field("locale", pa.string(), nullable=False),
        pa.field("case_key", pa.string(), nullable=False),
        pa.field("work_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("score", pa.float64()),
        pa.field("passed", pa.bool_()),
        pa.field("error_code", pa.string()),
        pa.field("first_attempt_at", pa.timestamp("us", tz="UTC")),
        pa.field("last_attempt_at", pa.timestamp("us", tz="UTC")),
        *(
            pa.field(f"attempts_{outcome.value}", pa.int32(), nullable=False)
            for outcome in AttemptOutcome
        ),
    ]
    return pa.schema(fields)


def _micros(value: float | None) -> int | None:
    return None if value is None else round(value * 1_000_000)


def _record_batches(items: Iterable[ItemResult]) -> Iterator[pyarrow.RecordBatch]:
    pa = _pyarrow()
    schema = arrow_schema()
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, BATCH_ROWS)):
        columns: dict[str, list[Any]] = {name: [] for name in RESULT_COLUMNS}
        for item in chunk:
            row = item.as_dict()
            row["first_attempt_at"] = _micros(item.first_attempt_at)
            row["last_attempt_at"] = _micros(item.last_attempt_at)
            for name in RESULT_COLUMNS:
                columns[name].append(row[name])
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def results_table(
    service: CampaignService,
    campaign_id: str,
    *,
    status: str | None = None,
    locale: str | None = None,
) -> pyarrow.Table:
    """Every item of the campaign as an Arrow table with typed columns."""
    pa = _pyarrow()
    items = service.iter_results(campaign_id, status=status, locale=locale)
    return pa.Table.from_batches(list(_record_batches(items)), schema=arrow_schema())


def results_frame(
    service: CampaignService,
    campaign_id: str,
    *,
    status: str | None = None,
    locale: str | None = None,
) -> pandas.DataFrame:
    """Every item of the campaign as a pandas DataFrame (via Arrow: typed columns)."""
    try:
        import pandas  # noqa: F401  (to_pandas needs it)
    except ImportError:
        raise AnalysisUnavailable("pandas") from None
    return results_table(service, campaign_id, status=status, locale=locale).to_pandas()


def write_items(items: Iterable[ItemResult], out: IO[Any], export: ExportFormat | str) -> int:
    """Write ``items`` to ``out`` (text for jsonl/csv, binary for parquet); the row count."""
    export = ExportFormat(export)
    if export is ExportFormat.PARQUET:
        return _write_parquet(items, out)
    written = 0
    if export is ExportFormat.CSV:
        writer = csv.DictWriter(out, fieldnames=RESULT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for item in items:
            writer.writerow(item.as_dict())
            written += 1
        return written
    for item in items:
        out.write(json.dumps(item.as_dict(), ensure_ascii=False, separators=(",", ":")))
        out.write("\n")
        written += 1
    return written


def _write_parquet(items: Iterable[ItemResult], out: IO[bytes]) -> int:
    _pyarrow()
    import pyarrow.parquet as pq

    written = 0
    with pq.ParquetWriter(out, arrow_schema()) as writer:
        for batch in _record_batches(items):
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def write_results(
    service: CampaignService,
    campaign_id: str,
    out: IO[Any],
    export: ExportFormat | str = ExportFormat.JSONL,
    *,
    status: str | None = None,
    locale: str | None = None,
) -> int:
    """Stream every item of the campaign to ``out`` in ``export`` format; the row count."""
    items = service.iter_results(campaign_id, status=status, locale=locale)
    return write_items(items, out, export)
