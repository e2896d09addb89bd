"""Numbers on the command line: ASCII digits only, refused in one coded line.

Python's ``int()`` and ``float()`` read far more than a person means to type:
``' 5'``, ``'5_0'`` (fifty), ``'-0'``, Arabic-Indic (``'\u0665'``) and fullwidth
(``'\uff15'``) digits, ``'nan'``, ``'1e999'`` (infinity). A fullwidth zero given to
``campaign limits --max-concurrent-leases`` would pause a campaign. Every
numeric option takes one of the click types here instead of ``int``,
``float``, ``IntRange`` or ``FloatRange``; anything else than plain ASCII
digits (an optional ``-``, for a float a ``.`` and an exponent) is a usage error,
``ledger.cli.usage`` (exit 2), naming the option.

Only click and the standard library are imported: the command line loads this
before any command runs.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import click

#: The most digits an integer option takes: any value that fits a signed 64-bit column.
MAX_INT_DIGITS: Final = 18
#: The longest float option accepted (digits, point and exponent).
MAX_FLOAT_LENGTH: Final = 40

_INT: Final = re.compile(r"-?(?:0|[1-9][0-9]{0,17})", re.ASCII)
_FLOAT: Final = re.compile(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]{1,3})?|-?\.[0-9]+", re.ASCII
)


def parse_int(text: str) -> int:
    """``text`` as an integer: ASCII digits, an optional ``-``, no leading zero, no ``-0``,
    at most 18 digits. ``ValueError`` otherwise."""
    if not isinstance(text, str) or _INT.fullmatch(text) is None or text == "-0":
        raise ValueError("not a plain integer")
    return int(text)


def parse_float(text: str) -> float:
    """``text`` as a finite float written in ASCII (``2``, ``0.5``, ``.5``, ``1e-3``);
    ``ValueError`` otherwise (``nan``, ``inf``, ``1_0``, ``-0``, non-ASCII digits)."""
    if (
        not isinstance(text, str)
        or len(text) > MAX_FLOAT_LENGTH
        or _FLOAT.fullmatch(text) is None
        or (text.startswith("-") and float(text) == 0)
    ):
        raise ValueError("not a plain number")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _refuse(param: click.Parameter | None, value: Any, rule: str) -> click.BadParameter:
    """click's usage error (``ledger.cli.usage``, exit 2): "Invalid value for '--x': ..."."""
    shown = ascii(value)[:40] if isinstance(value, str) else type(value).__name__
    return click.BadParameter(f"must be {rule}, not {shown}", param=param)


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low:,} to {high:,}"
    if low is not None:
        return f" of at least {low:,}"
    if high is not None:
        return f" of at most {high:,}"
    return ""


class Integer(click.ParamType[int]):
    """An integer in ASCII digits, optionally from ``min`` to ``max`` (click's ``IntRange``)."""

    name = "integer"

    def __init__(self, min: int | None = None, max: int | None = None) -> None:
        self.min = min
        self.max = max

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value  # a default, never typed by anyone
        else:
            try:
                number = parse_int(value)
            except ValueError:
                raise _refuse(
                    param, value, "an integer in ASCII digits" + _range(self.min, self.max)
                ) from None
        if (self.min is not None and number < self.min) or (
            self.max is not None and number > self.max
        ):
            raise _refuse(param, value, "an integer" + _range(self.min, self.max))
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        if self.min is not None and self.max is not None:
            return f"INTEGER RANGE ({self.min}-{self.max})"
        return "INTEGER"


class Number(click.ParamType[float]):
    """A finite float in ASCII, optionally from ``min`` to ``max`` (click's ``FloatRange``)."""

    name = "number"

    def __init__(self, min: float | None = None, max: float | None = None) -> None:
        self.min = min
        self.max = max

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)  # a default
        else:
            try:
                number = parse_float(value)
            except ValueError:
                raise _refuse(
                    param, value, "a finite number in ASCII digits" + _range(self.min, self.max)
                ) from None
        if (self.min is not None and number < self.min) or (
            self.max is not None and number > self.max
        ):
            raise _refuse(param, value, "a number" + _range(self.min, self.max))
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NUMBER"


#: The plain integer and number options.
INTEGER: Final = Integer()
NUMBER: Final = Number()
