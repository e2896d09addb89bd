"""The command line's database codes are the library's, spelled once in each place."""

from __future__ import annotations

from benchledger import errors
from benchledger.cli import output


def test_the_cli_spells_the_database_codes_as_the_library_raises_them() -> None:
    for name in (
        "DATABASE_UNAVAILABLE",
        "DATABASE_URL_INVALID",
        "DATABASE_ERROR",
        "DATABASE_UNSUPPORTED",
        "DATABASE_DRIVER_MISSING",
    ):
        assert getattr(output, name) == getattr(errors, name), name
