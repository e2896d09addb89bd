"""Numbers on the command line: ASCII digits only, one test per kind of option.

``int()`` reads ``' 5'``, ``'5_0'`` (fifty), ``'-0'``, Arabic-Indic and fullwidth
digits; ``float()`` reads ``'nan'`` and ``'1e999'``. A fullwidth zero given as a
cap would pause a campaign.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from benchledger.cli.numbers import Integer, parse_float, parse_int
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService

from .helpers import Invoke, json_of, refused
from .test_campaign_commands import create, write_inputs

#: What int() reads and a person does not mean: each refused wherever a number is read.
NOT_INTEGERS = (
    " 5", "5 ", "5_0", "-0", "+5", "05", "\u0665", "\uff10", "\uff15", "\u0b6b", "5\u200b",
    "0x10", "1e3", "", "9" * 19,
)  # fmt: skip
NOT_NUMBERS = ("nan", "inf", "-inf", "1e999", " 1.5", "1_0.5", "\uff11.5", "1.5\u0665", "-0", "")


@pytest.mark.parametrize("text", NOT_INTEGERS)
def test_parse_int_takes_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError):
        parse_int(text)


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_parse_float_takes_finite_ascii_numbers_only(text: str) -> None:
    with pytest.raises(ValueError):
        parse_float(text)


def test_plain_numbers_are_read() -> None:
    assert [parse_int(t) for t in ("0", "7", "-3", "123456789012345678")] == [
        0, 7, -3, 123456789012345678,
    ]  # fmt: skip
    assert [parse_float(t) for t in ("2", "0.5", ".5", "1e-3", "-2.5")] == [
        2.0, 0.5, 0.5, 0.001, -2.5,
    ]  # fmt: skip


def test_an_integer_option_refuses_non_ascii_digits(cli: Invoke, ledger_db: Database) -> None:
    """``campaign list --limit`` (a plain integer option)."""
    for text in NOT_INTEGERS:
        line = refused(
            cli("campaign", "list", "--limit", text, url=ledger_db.url),
            "ledger.cli.usage",
            exit_code=2,
        )
        assert "--limit" in line and "ASCII digits" in line
    assert json_of(cli("campaign", "list", "--json", "--limit", "5", url=ledger_db.url))


def test_a_bounded_integer_option_refuses_non_ascii_digits_and_its_range() -> None:
    """An ``Integer(1, 256)`` option (click's ``IntRange``, ASCII only)."""

    @click.command()
    @click.option("--count", type=Integer(1, 256), default=1)
    def command(count: int) -> None:
        click.echo(str(count))

    runner = CliRunner()
    for text in (*NOT_INTEGERS, "0", "257"):
        result = runner.invoke(command, ["--count", text])
        assert result.exit_code == 2, (text, result.output)
        assert "--count" in result.output and "from 1 to 256" in result.output
    assert runner.invoke(command, ["--count", "256"]).output == "256\n"


def test_campaign_work_reads_workers_in_ascii_only(cli: Invoke, ledger_db: Database) -> None:
    """``campaign work --workers``: refused before anything is read or started."""
    for text in NOT_INTEGERS:
        line = refused(
            cli("campaign", "work", "abcd", "--workers", text, "--evaluator", "m:f",
                url=ledger_db.url),
            "ledger.cli.usage",
            exit_code=2,
        )  # fmt: skip
        assert "--workers" in line


def test_a_number_option_refuses_non_ascii_and_non_finite(cli: Invoke, ledger_db: Database) -> None:
    """``campaign health --stale-after`` (a float option)."""
    for text in NOT_NUMBERS:
        line = refused(
            cli("campaign", "health", "abcd", "--stale-after", text, url=ledger_db.url),
            "ledger.cli.usage",
            exit_code=2,
        )
        assert "--stale-after" in line


def test_a_fullwidth_zero_cap_does_not_pause_a_campaign(
    cli: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    """``campaign limits --max-concurrent-leases N|none`` (a cap)."""
    policy_file, suite_file, _, _ = write_inputs(tmp_path, cases=2)
    campaign_id = create(cli, ledger_db, policy_file, suite_file)
    for text in (*NOT_INTEGERS, " none"):
        refused(
            cli("campaign", "limits", campaign_id, "--max-concurrent-leases", text,
                url=ledger_db.url),
            "benchmark.campaign.limit_invalid",
        )  # fmt: skip
    controls = CampaignService(ledger_db).controls(campaign_id)
    assert controls.max_concurrent_leases is None  # untouched: not paused
    limits = json_of(
        cli("campaign", "limits", campaign_id, "--json", "--max-concurrent-leases", "0",
            url=ledger_db.url)
    )  # fmt: skip
    assert limits["max_concurrent_leases"] == 0  # an ASCII 0 still pauses it
