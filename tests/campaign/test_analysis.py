"""``benchledger.analysis``: a campaign's results as Arrow, pandas, Parquet, CSV, JSON Lines."""

from __future__ import annotations

import io
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchledger import analysis
from benchledger.domain.results import RESULT_COLUMNS
from benchledger.services.campaigns import CampaignService

from .helpers import result_for


@pytest.fixture
def worked(service: CampaignService, cid: str) -> str:
    first = service.claim(cid, "w-1")
    assert first is not None
    service.fail(first, "example.broken", retryable=False)
    while (claim := service.claim(cid, "w-1")) is not None:
        service.complete(claim, result_for(claim, score=0.25), duration_seconds=0.5)
    return cid


def test_the_table_and_frame_have_typed_columns(service: CampaignService, worked: str) -> None:
    table = analysis.results_table(service, worked)
    assert table.column_names == list(RESULT_COLUMNS)
    assert table.num_rows == service.status(worked).work_count
    assert table.schema.field("score").type == pa.float64()
    assert table.schema.field("passed").type == pa.bool_()
    assert table.schema.field("first_attempt_at").type == pa.timestamp("us", tz="UTC")
    frame = analysis.results_frame(service, worked, status="succeeded")
    assert len(frame) == table.num_rows - 1
    assert str(frame["score"].dtype) == "float64" and not frame["passed"].any()
    assert (frame["attempts_succeeded"] == 1).all()


def test_every_format_streams_the_same_rows(service: CampaignService, worked: str) -> None:
    text = io.StringIO()
    assert analysis.write_results(service, worked, text, "jsonl") == 6
    rows = [json.loads(line) for line in text.getvalue().splitlines()]
    buffer = io.BytesIO()
    assert analysis.write_results(service, worked, buffer, "parquet") == 6
    buffer.seek(0)
    assert pq.read_table(buffer).to_pylist()[0]["work_id"] == rows[0]["work_id"]
    failed = [row for row in rows if row["status"] == "failed"]
    assert [row["error_code"] for row in failed] == ["example.broken"]
    with pytest.raises(ValueError):
        analysis.write_results(service, worked, text, "xlsx")


def test_without_the_extra_a_coded_error_says_what_to_install(
    service: CampaignService, worked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what `import pyarrow` meets uninstalled
    with pytest.raises(analysis.AnalysisUnavailable) as caught:
        analysis.results_table(service, worked)
    assert caught.value.code == analysis.ANALYSIS_MISSING
    assert "benchledger[analysis]" in str(caught.value)
    text = io.StringIO()
    assert analysis.write_results(service, worked, text, "csv") == 6  # no pyarrow needed
