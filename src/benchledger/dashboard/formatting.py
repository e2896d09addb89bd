"""The dashboard's Jinja environment: its template filters (how a page writes times,
durations, numbers, codes and health reasons) and the globals every template sees.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import jinja2

from benchledger.dashboard import reference
from benchledger.domain.campaign import STATUSES
from benchledger.domain.campaign_codes import (
    DEPENDENCY_PREFIX,
    REASON_REPORT_ERROR_PREFIX,
    code_of_reason,
)
from benchledger.domain.campaign_labels import Candidate
from benchledger.services.campaigns.actions import short_id

#: The templates (and static files) ship in the package.
HERE = Path(__file__).resolve().parent
NONE = "\N{EN DASH}"  # what a page shows for no value


def _when(value: float | None) -> str:
    if value is None:
        return NONE
    moment = dt.datetime.fromtimestamp(float(value), dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return NONE
    sign = "-" if value < 0 else ""
    seconds = round(abs(value))
    if seconds < 60:
        return f"{sign}{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{sign}{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h {minutes:02d}m"
    return f"{sign}{hours // 24}d {hours % 24}h"


def _number(value: float | int | None) -> str:
    if value is None:
        return NONE
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def _percent(value: float | None) -> str:
    return NONE if value is None else f"{100 * float(value):.1f}%"


def _short(value: str | None, keep: int = 12) -> str:
    if value is None:
        return NONE
    return value if len(value) <= keep + 1 else value[:keep] + "…"


def _code(value: str | None) -> str:
    """An error code, in full (one spelling per code on every surface)."""
    return NONE if value is None else value


def _short_id(value: str) -> str:
    """The 12 hex digits the command line prints (a prefix URLs accept)."""
    return short_id(value)


def _seconds(value: float | None) -> str:
    """A duration of a second or more as :func:`_duration`, a shorter one in ms."""
    if value is None or not math.isfinite(value):
        return NONE
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 10:
        return f"{value:.2f} s"
    return _duration(value)


def _score(value: float | None) -> str:
    return NONE if value is None else f"{value:.3f}"


def _pvalue(value: float | None) -> str:
    if value is None:
        return NONE
    return "< 0.0001" if value < 0.0001 else f"{value:.4f}"


def _signed(value: float | None, percent: bool = False) -> str:
    if value is None:
        return NONE
    return f"{100 * value:+.1f} pp" if percent else f"{value:+.3f}"


def reason_label(reason: str) -> str:
    """A health reason as the command line words it: an error reason is the full code it
    names and whose last error it is; any other reason is itself."""
    code = code_of_reason(reason)
    if code is None:
        return reason
    whose = (
        "last error of the report finalization"
        if reason.startswith(REASON_REPORT_ERROR_PREFIX)
        else "last error of some items"
    )
    if code.startswith(DEPENDENCY_PREFIX):
        whose += " (the evaluator's code)"
    return f"{whose}: {code}"


def reason_code(reason: str) -> str:
    """The full error code an error reason names, else the reason itself."""
    return code_of_reason(reason) or reason


def label(name: str | None, candidate: Candidate) -> str:
    """A campaign's name (if any) and candidate, as the command line shows them."""
    return f"{name} · {candidate.label}" if name else candidate.label


def environment(**page_globals: Any) -> jinja2.Environment:
    """The templates with every filter, the error reference (``explain``), ``label``,
    ``statuses``, and the ``page_globals`` the pages add (limits, defaults)."""
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters.update(
        when=_when,
        duration=_duration,
        number=_number,
        percent=_percent,
        short=_short,
        code=_code,
        short_id=_short_id,
        seconds=_seconds,
        score=_score,
        pvalue=_pvalue,
        signed=_signed,
        reason_label=reason_label,
        reason_code=reason_code,
    )
    templates.globals.update(
        explain=reference.explain,
        label=label,
        statuses=STATUSES,
        **page_globals,
    )
    return templates
