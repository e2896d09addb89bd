"""Strict query parameters: every page reads its parameters through these, and anything
malformed is a coded 400 (``ledger.dashboard.query_invalid``), never a 500.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final

from starlette.requests import Request

from benchledger.errors import LedgerError

#: The dashboard's refusal of a malformed query parameter (documented in docs/errors.md).
QUERY_INVALID = "ledger.dashboard.query_invalid"
#: Query parameters: ASCII digits only (``int()`` would take Arabic-Indic or fullwidth
#: digits, blanks around them, and underscores between them).
_DIGITS = re.compile(r"[0-9]{1,19}")
#: The largest integer a query parameter may be (a signed 64-bit database integer).
MAX_QUERY_INT: Final = 2**63 - 1
#: The longest text a query parameter may be.
MAX_QUERY_TEXT: Final = 256


def int_query(
    request: Request, name: str, default: int | None, *, low: int = 0, high: int = MAX_QUERY_INT
) -> Any:
    """The parameter as an integer in ``[low, high]``: ASCII digits only (no sign, blank,
    underscore or other script's digit); absent or empty: ``default``; else 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if _DIGITS.fullmatch(raw) is None or not low <= int(raw) <= high:
        raise LedgerError(QUERY_INVALID, f"{name} must be an integer from {low} to {high}")
    return int(raw)


def text_query(request: Request, name: str) -> str | None:
    """The parameter as text (``None`` when absent or empty): at most 256 characters, no
    control character (a database refuses NUL); else 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_QUERY_TEXT or any(
        unicodedata.category(character) in ("Cc", "Cs") for character in raw
    ):
        raise LedgerError(
            QUERY_INVALID, f"{name} must be at most {MAX_QUERY_TEXT} plain characters"
        )
    return raw


def choice_query(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    """The parameter as one of ``choices`` (``None`` when absent or empty); else 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise LedgerError(QUERY_INVALID, f"{name} is one of: {', '.join(choices)}")
    return raw
