"""Signed results on the command line: ``--signing-key-file`` / ``BENCHLEDGER_SIGNING_KEY``,
``campaign work`` signing with the key, ``campaign verify`` with the right key, a wrong
one, a key ring, and none."""

from __future__ import annotations

import json
import secrets
import textwrap
from pathlib import Path

import pytest

from benchledger import Database
from benchledger.cli.settings import key_id

from .helpers import Invoke, refused
from .test_campaign_commands import EVALUATOR, FAST
from .test_log_format import create_campaign, run

pytestmark = pytest.mark.slow

KEY_A = secrets.token_hex(32)
KEY_B = secrets.token_hex(32)
ID_A = key_id(bytes.fromhex(KEY_A))
ID_B = key_id(bytes.fromhex(KEY_B))
INVALID = "ledger.input.signing_key_invalid"


def key_file(directory: Path, name: str, text: str) -> str:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def write_signing_evaluator(directory: Path) -> None:
    """``signing:evaluate``: the example evaluator signing its own results with key A, as a
    trusted evaluator may (what ``campaign work --signing-key-file`` does for any)."""
    (directory / "signing.py").write_text(
        textwrap.dedent(
            f"""
            from benchledger import HmacAttestationSigner
            from benchledger.examples.evaluator import evaluate as example

            KEY = bytes.fromhex("{KEY_A}")
            SIGNER = HmacAttestationSigner("{ID_A}", KEY)

            def evaluate(claim, heartbeat):
                policy_sha256 = claim.campaign_id.removeprefix("benchmark-campaign-")
                return SIGNER.sign(example(claim, heartbeat), policy_sha256)
            """
        ),
        encoding="utf-8",
    )


def verify(url: str, campaign_id: str, *options: str, env: dict[str, str] | None = None) -> dict:
    """``[OPTIONS] campaign verify ID --json``: its document and exit status."""
    result = run(*options, "campaign", "verify", campaign_id, "--json", url=url, env=env)
    document = json.loads(result.stdout)
    document["exit"] = result.returncode
    document["stderr"] = result.stderr
    return document


def kinds(document: dict) -> dict[str, int]:
    return {problem["kind"]: problem["count"] for problem in document["problems"]}


def test_verify_checks_signatures_with_the_key_it_is_given(
    ledger_db: Database, tmp_path: Path
) -> None:
    url = ledger_db.url
    campaign_id = create_campaign(url, tmp_path)
    write_signing_evaluator(tmp_path)
    worked = run(
        "campaign", "work", campaign_id, "--evaluator", "signing:evaluate", *FAST,
        url=url, cwd=tmp_path,
    )  # fmt: skip
    assert worked.returncode == 0, worked.stderr
    a = key_file(tmp_path, "a.key", KEY_A + "\n")
    b = key_file(tmp_path, "b.key", f"# rotated in 2026\n{KEY_B}\n")

    right = verify(url, campaign_id, "--signing-key-file", a)
    assert (right["exit"], right["ok"], right["signing_keys"]) == (0, True, [ID_A])

    wrong = verify(url, campaign_id, "--signing-key-file", b)
    assert wrong["exit"] == 1 and not wrong["ok"]
    assert wrong["signing_keys"] == [ID_B]
    # every result is refused by the verifier, and so the report built from them
    assert kinds(wrong) == {"result_invalid": 12, "report_invalid": 1}
    assert {p["code"] for p in wrong["problems"]} == {
        "benchmark.campaign.state_invalid",
        "benchmark.campaign.report_invalid",
    }
    assert wrong["stderr"] == (
        "error: benchmark.campaign.state_invalid: the integrity audit found 13 problem(s) "
        "of 2 kind(s)\n"
    )
    text = run("--signing-key-file", b, "campaign", "verify", campaign_id, url=url)
    assert f"signatures: checked against {ID_B}" in text.stdout
    assert "result_invalid: 12 row(s), benchmark.campaign.state_invalid" in text.stdout
    assert "result_invalid with a signing key" in text.stdout
    # The failed audit is recorded: health says so until an audit with the right key.
    health = json.loads(run("campaign", "health", campaign_id, "--json", url=url).stdout)
    assert "benchmark.campaign.integrity_failed" in health["reasons"]
    report = run("--signing-key-file", b, "campaign", "report", campaign_id, url=url)
    assert report.returncode == 1
    assert report.stderr.startswith("error: benchmark.campaign.state_invalid: ")

    # Without a key, signatures are not checked (and the output says so).
    unchecked = verify(url, campaign_id)
    assert (unchecked["exit"], unchecked["ok"], unchecked["signing_keys"]) == (0, True, [])
    text = run("campaign", "verify", campaign_id, url=url)
    assert "signatures: not checked (no signing key: --signing-key-file)" in text.stdout

    # A key ring verifies what any of its keys signed; the environment's key works too,
    # and a key file given wins over it.
    ring = key_file(tmp_path, "ring.key", f"{KEY_B}  # signs from now on\n{KEY_A}\n")
    rotated = verify(url, campaign_id, "--signing-key-file", ring)
    assert (rotated["exit"], rotated["signing_keys"]) == (0, [ID_B, ID_A])
    from_env = verify(url, campaign_id, env={"BENCHLEDGER_SIGNING_KEY": KEY_A})
    assert (from_env["exit"], from_env["signing_keys"]) == (0, [ID_A])
    overridden = verify(
        url,
        campaign_id,
        env={"BENCHLEDGER_SIGNING_KEY": KEY_B, "BENCHLEDGER_SIGNING_KEY_FILE": a},
    )
    assert (overridden["exit"], overridden["signing_keys"]) == (0, [ID_A])
    health = json.loads(run("campaign", "health", campaign_id, "--json", url=url).stdout)
    assert health["status"] == "healthy"


def test_campaign_work_signs_with_the_key_file(ledger_db: Database, tmp_path: Path) -> None:
    url = ledger_db.url
    campaign_id = create_campaign(url, tmp_path)
    a = key_file(tmp_path, "a.key", KEY_A)
    b = key_file(tmp_path, "b.key", KEY_B)
    worked = run(
        "--signing-key-file", a, "campaign", "work", campaign_id, "--workers", "2",
        "--evaluator", EVALUATOR, *FAST, url=url,
    )  # fmt: skip
    assert worked.returncode == 0, worked.stderr
    assert verify(url, campaign_id, "--signing-key-file", a)["exit"] == 0
    assert kinds(verify(url, campaign_id, "--signing-key-file", b)) == {
        "result_invalid": 12,
        "report_invalid": 1,
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "cannot read signing key file"),
        ("", "holds no key"),
        ("# nothing but a comment\n", "holds no key"),
        ("not-hex-at-all", "key 1 of signing key file"),
        ("abc", "is not hex"),
        ("00" * 15, "is 15 bytes: a key needs at least 16"),
    ],
)
def test_a_bad_key_is_refused_in_one_coded_line(
    cli: Invoke, ledger_db: Database, tmp_path: Path, text: str | None, says: str
) -> None:
    path = tmp_path / "signing.key"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    line = refused(
        cli("--signing-key-file", str(path), "campaign", "list", url=ledger_db.url), INVALID
    )
    assert says in line
    # Commands that neither sign nor verify do not read it.
    assert cli("--signing-key-file", str(path), "db", "current", url=ledger_db.url).exit_code == 0


def test_a_bad_key_in_the_environment_is_refused(cli: Invoke, ledger_db: Database) -> None:
    line = refused(
        cli("campaign", "list", url=ledger_db.url, env={"BENCHLEDGER_SIGNING_KEY": "00" * 8}),
        INVALID,
    )
    assert "BENCHLEDGER_SIGNING_KEY is 8 bytes" in line
    assert "00" * 8 not in line  # a refusal never repeats the key
