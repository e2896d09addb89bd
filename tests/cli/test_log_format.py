"""``--log-format json``: every line of stderr is one JSON object, with whitelisted keys
only, and neither a result payload nor a token ever reaches it."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger import Database
from benchledger.cli.logs import JsonFormatter, LogSettings, configure_logging, scrub
from benchledger.errors import LedgerError
from benchledger.examples import evaluator as example
from benchledger.models.campaign import WorkRow
from benchledger.services.campaigns import CampaignService

from .test_campaign_commands import FAST, write_inputs

BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))
#: Planted in results and in the dashboard's token: neither may reach a log line.
MARKER = "result-payload-7f3a9c"
TOKEN = "dashboard-token-5e1b0d"
KEYS = {"time", "level", "logger", "message", "campaign", "work_id", "worker", "code"}


def run(
    *args: str,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stderr: Any = subprocess.PIPE,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``benchledger [--url URL] ARGS`` in a process of its own."""
    argv = [BENCHLEDGER, *(["--url", url] if url is not None else []), *args]
    return subprocess.run(
        argv,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=timeout,
        check=False,
    )


def create_campaign(url: str, directory: Path, cases: int = 3, **changes: str) -> str:
    policy_file, suite_file, _, _ = write_inputs(directory, cases, **changes)
    result = run(
        "campaign", "create", "--policy", str(policy_file), "--suite", str(suite_file), url=url
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as a JSON object with the whitelisted keys only."""
    records = []
    for line in text.splitlines():
        record = json.loads(line)  # a line that is not JSON fails the test here
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= set(record) <= KEYS, line
        assert record["time"].endswith("Z"), line
        records.append(record)
    return records


def stored_results(db: Database, campaign_id: str) -> list[str]:
    """Every stored result text of the campaign; each must carry :data:`MARKER`."""
    with db.read() as session:
        texts = list(
            session.scalars(
                sa.select(WorkRow.result_json).where(WorkRow.campaign_id == campaign_id)
            )
        )
    assert texts and all(MARKER in text for text in texts)
    return texts


def write_evaluator(directory: Path) -> None:
    """``marked:evaluate``: the example's results, each carrying :data:`MARKER`."""
    (directory / "marked.py").write_text(
        textwrap.dedent(
            f"""
            from benchledger.examples.evaluator import evaluate as example

            def evaluate(claim, heartbeat):
                return {{**example(claim, heartbeat), "notes": "{MARKER}"}}
            """
        ),
        encoding="utf-8",
    )


@pytest.mark.slow
def test_campaign_work_writes_only_json_lines(ledger_db: Database, tmp_path: Path) -> None:
    campaign_id = create_campaign(ledger_db.url, tmp_path)
    write_evaluator(tmp_path)
    result = run(
        "--log-format", "json", "-v", "campaign", "work", campaign_id, "--workers", "2",
        "--evaluator", "marked:evaluate", *FAST,
        url=ledger_db.url, cwd=tmp_path, env={"BENCHLEDGER_DASHBOARD_TOKEN": TOKEN},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = json_lines(result.stderr)
    assert any(r["logger"].startswith("alembic") for r in records)  # -v: the schema check
    summary = [r for r in records if r["logger"] == "benchledger.cli"][-1]
    assert summary["level"] == "info"
    assert f"{campaign_id}: 12/12 succeeded" in summary["message"]
    assert MARKER not in result.stderr and TOKEN not in result.stderr
    assert stored_results(ledger_db, campaign_id)  # the payload was there to leak


@pytest.mark.slow
def test_sql_statements_are_logged_without_their_parameters(
    ledger_db: Database, tmp_path: Path
) -> None:
    """``-vv`` logs every statement; the parameters (results among them) stay out."""
    campaign_id = create_campaign(ledger_db.url, tmp_path)
    write_evaluator(tmp_path)
    log = tmp_path / "stderr.log"  # one file: each process's lines land whole
    with log.open("w", encoding="utf-8") as stderr:
        result = run(
            "--log-format", "json", "-vv", "campaign", "work", campaign_id,
            "--evaluator", "marked:evaluate", *FAST,
            url=ledger_db.url, cwd=tmp_path, stderr=stderr,
        )  # fmt: skip
    text = log.read_text(encoding="utf-8")
    assert result.returncode == 0, text
    records = json_lines(text)
    sql = [r for r in records if r["logger"].startswith("sqlalchemy.engine")]
    assert any(r["message"].startswith("SELECT") for r in sql)
    assert any(r["message"].endswith("[SQL parameters hidden]") for r in sql)
    assert campaign_id not in "".join(r["message"] for r in sql)  # parameters, not statements
    assert MARKER not in text


def test_a_refusal_is_an_error_record_with_its_code(ledger_db: Database) -> None:
    result = run(
        "--log-format", "json", "campaign", "status", "feedfacefeed", url=ledger_db.url
    )  # fmt: skip
    assert result.returncode == 1
    (record,) = json_lines(result.stderr)
    assert record["level"] == "error"
    assert record["code"] == "benchmark.campaign.not_found"
    assert record["logger"] == "benchledger.cli"
    assert not record["message"].startswith("error:")


def test_the_format_comes_from_the_environment_and_text_stays_the_default(
    ledger_db: Database,
) -> None:
    as_json = run("-v", "db", "current", url=ledger_db.url, env={"BENCHLEDGER_LOG_FORMAT": "json"})
    assert as_json.returncode == 0, as_json.stderr
    assert json_lines(as_json.stderr)
    as_text = run("-v", "db", "current", url=ledger_db.url)
    assert as_text.returncode == 0, as_text.stderr
    assert as_text.stderr.startswith("INFO  [alembic.")
    refused = run("--log-format", "xml", "db", "current", url=ledger_db.url)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: ledger.cli.usage: ")


def serve_once(tmp_path: Path) -> tuple[str, str]:
    """``serve --log-format json`` at uvicorn's info level, one request carrying the token in
    its address, then SIGTERM: (stdout, stderr)."""
    pytest.importorskip("uvicorn")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("db", "upgrade", url=url).returncode == 0
    process = subprocess.Popen(
        [BENCHLEDGER, "--url", url, "--log-format", "json", "serve", "--host", "0.0.0.0",
         "--port", "0"],
        env={**os.environ, "BENCHLEDGER_DASHBOARD_TOKEN": TOKEN, "BENCHLEDGER_LOG": "info"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    seen = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            running = re.search(r"running on http://[^:]+:(\d+)", json.loads(line)["message"])
            if running:
                break
        else:
            raise AssertionError("serve did not start: " + "".join(seen))
        with contextlib.suppress(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{running[1]}/?token={TOKEN}", timeout=30)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=60)
    return out, "".join(seen) + err


@pytest.mark.slow
def test_serve_writes_json_lines_without_its_token(tmp_path: Path) -> None:
    _out, err = serve_once(tmp_path)
    records = json_lines(err)
    assert records[0]["message"].startswith("benchledger dashboard on http://")
    assert TOKEN not in err


@pytest.mark.slow
def test_serve_access_log_keeps_the_token_out(tmp_path: Path) -> None:
    out, err = serve_once(tmp_path)
    assert TOKEN not in out + err


# -- the formatter itself ------------------------------------------------------------------


def record(**extra: Any) -> logging.LogRecord:
    entry = logging.LogRecord(
        "benchledger.worker", logging.WARNING, __file__, 1, "%s", ("x",), None
    )
    entry.__dict__.update(extra)
    return entry


def test_only_whitelisted_keys_reach_a_line() -> None:
    line = JsonFormatter().format(
        record(
            campaign="benchmark-campaign-1",
            work_id="benchmark-work-2",
            worker="host:1:0",
            code="benchmark.campaign.lease_lost",
            result={"notes": MARKER},
            token=TOKEN,
            password=TOKEN,
        )
    )
    document = json.loads(line)
    assert document == {
        "time": document["time"],
        "level": "warning",
        "logger": "benchledger.worker",
        "message": "x",
        "campaign": "benchmark-campaign-1",
        "work_id": "benchmark-work-2",
        "worker": "host:1:0",
        "code": "benchmark.campaign.lease_lost",
    }
    assert MARKER not in line and TOKEN not in line


def test_an_exception_is_its_type_and_code_never_its_traceback() -> None:
    def fails(secret: str) -> None:
        raise LedgerError("benchmark.campaign.state_invalid", f"bad {secret[:0]}")

    try:
        fails(TOKEN)
    except LedgerError:
        entry = record()
        entry.exc_info = sys.exc_info()
    document = json.loads(JsonFormatter().format(entry))
    assert document["error_type"] == "LedgerError"
    assert document["code"] == "benchmark.campaign.state_invalid"
    assert TOKEN not in json.dumps(document) and "Traceback" not in json.dumps(document)


def test_credentials_in_a_message_are_hidden() -> None:
    text = scrub(
        f"GET /?token={TOKEN}&page=2 Authorization: Bearer {TOKEN} "
        f"postgresql+psycopg://ledger:{TOKEN}@db/ledger api_key={TOKEN}"
    )
    assert TOKEN not in text
    assert "page=2" in text and "postgresql+psycopg://ledger:[hidden]@db/ledger" in text


@pytest.fixture
def captured_stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], io.StringIO]]:
    """``capture()`` puts a fresh stream in ``sys.stderr`` (pytest's capture replaces it
    between setup and call, so a test calls it itself); logging is reset afterwards."""

    def capture() -> io.StringIO:
        stream = io.StringIO()
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    yield capture
    configure_logging(LogSettings())  # as a command without -v leaves it


def test_json_mode_turns_stderr_writes_into_records(
    captured_stderr: Callable[[], io.StringIO],
) -> None:
    stream = captured_stderr()
    configure_logging(LogSettings(format="json"))
    print("b3f34403fd17: 3/12  ok 3", file=sys.stderr)
    sys.stderr.write("error: ledger.input.file_missing: policy file p.json does not exist\n")
    sys.stderr.write("\n")
    logging.getLogger("benchledger.faults").warning("database fault", extra={"code": "x.y"})
    logging.getLogger("benchledger.faults").info("not at the default level")
    records = json_lines(stream.getvalue())
    assert [(r["level"], r.get("code"), r["message"]) for r in records] == [
        ("info", None, "b3f34403fd17: 3/12  ok 3"),
        ("error", "ledger.input.file_missing", "policy file p.json does not exist"),
        ("warning", "x.y", "database fault"),
    ]
    assert not sys.stderr.isatty()
    configure_logging(LogSettings())
    assert sys.stderr is stream


def test_sql_parameters_stay_out_of_an_in_process_log(
    captured_stderr: Callable[[], io.StringIO], tmp_path: Path
) -> None:
    """A real engine, -vv, a real result written: the statement is logged, not the result."""
    stream = captured_stderr()
    configure_logging(LogSettings(verbose=2, format="json"))
    database = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        database.upgrade()
        _, _, policy, suite = write_inputs(tmp_path, cases=1)
        campaigns = CampaignService(database)
        campaign_id = campaigns.create(policy, suite)
        claim = campaigns.claim(campaign_id, "w-1")
        assert claim is not None
        result = example.result_for(claim.job_payload)
        campaigns.complete(claim, {**result, "notes": MARKER})
    finally:
        database.dispose()
    text = stream.getvalue()
    records = json_lines(text)
    assert any(r["message"].startswith("UPDATE") for r in records)
    assert any(r["message"].endswith("[SQL parameters hidden]") for r in records)
    assert MARKER not in text


def test_the_options_name_what_the_log_module_takes() -> None:
    """``benchledger.cli`` spells them without importing ``benchledger.cli.logs``."""
    import benchledger.cli
    from benchledger.cli import logs

    assert benchledger.cli.LOG_FORMAT_ENV == logs.LOG_FORMAT_ENV
    assert benchledger.cli.LOG_FORMATS == logs.FORMATS
    assert benchledger.cli.LOG_LEVELS == logs.LEVELS


def test_log_settings_pickle_for_worker_processes() -> None:
    import pickle

    settings = LogSettings(verbose=1, format="json")
    assert pickle.loads(pickle.dumps(settings)) == settings
    with pytest.raises(ValueError):
        LogSettings(format="xml")


def test_text_format_is_unchanged(captured_stderr: Callable[[], io.StringIO]) -> None:
    stream = captured_stderr()
    configure_logging(LogSettings(verbose=1))
    logging.getLogger("benchledger.faults").info("hello")
    assert stream.getvalue() == "INFO  [benchledger.faults] hello\n"


__all__ = ["BENCHLEDGER", "create_campaign", "json_lines", "run"]
