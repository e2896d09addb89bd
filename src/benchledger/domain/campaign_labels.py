"""What tells campaigns apart for people: the candidate their policy measures and a name.

The candidate (provider, model, model version) is the policy's own, copied onto
the campaign row when it is created (or registered), so listings show and
filter by it without reading policies. The name is metadata an operator gives
(``create(..., name=...)``, ``rename``): it is not part of the policy's
identity, so the same policy is the same campaign whatever it is called.
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any, Final

import attrs

from benchledger.domain.campaign import blocked, is_text
from benchledger.domain.campaign_codes import (
    EVALUATOR_INVALID,
    FILTER_INVALID,
    LIMIT_GROUP_INVALID,
    NAME_INVALID,
)
from benchledger.errors import CampaignBlocked

#: The longest campaign name, in characters.
MAX_NAME_LENGTH: Final = 200
#: Unicode categories a name never holds: control, format, surrogates, line separators.
_NOT_IN_NAMES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def campaign_name(value: Any) -> str | None:
    """A campaign's name: ``None`` (no name), or 1-200 characters of plain NFC text
    without control characters and not only blanks (``name_invalid``)."""
    if value is None:
        return None
    if not is_text(value) or not 1 <= len(value) <= MAX_NAME_LENGTH or not value.strip():
        raise blocked(NAME_INVALID)
    if any(unicodedata.category(character) in _NOT_IN_NAMES for character in value):
        raise blocked(NAME_INVALID)
    return str(value)


#: An evaluator's name: what ``campaign create --evaluator`` stores (``module:function``
#: or any short name a fleet maps to code through its own allow-list).
EVALUATOR_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$")


def limit_group_key(value: Any) -> str | None:
    """A limit group's key: ``None`` (none), or 1-200 characters as a campaign name
    (``limit_group_invalid``)."""
    if value is None:
        return None
    try:
        return campaign_name(value)
    except CampaignBlocked:
        raise blocked(LIMIT_GROUP_INVALID) from None


def evaluator_name(value: Any) -> str | None:
    """A campaign's evaluator name, or ``None`` (``evaluator_invalid``)."""
    if value is None:
        return None
    if not isinstance(value, str) or EVALUATOR_NAME.fullmatch(value) is None:
        raise blocked(EVALUATOR_INVALID)
    return value


@attrs.frozen
class Candidate:
    """The candidate a campaign's policy measures (``None`` parts: not known, e.g. a
    campaign adopted from a legacy store whose policy is not registered yet)."""

    provider_id: str | None = None
    model_id: str | None = None
    model_version: str | None = None

    @property
    def label(self) -> str:
        """``provider / model @ version`` (what listings and pages show), or ``?``."""
        if self.model_id is None and self.provider_id is None:
            return "?"
        text = f"{self.provider_id or '?'} / {self.model_id or '?'}"
        return f"{text} @ {self.model_version}" if self.model_version else text

    def as_payload(self) -> dict[str, str | None]:
        return {
            "provider_id": self.provider_id,
            "model_id": self.model_id,
            "model_version": self.model_version,
        }


def candidate_of(row: Any) -> Candidate:
    """The candidate stored on a campaign row (its ``candidate_*`` columns)."""
    return Candidate(
        getattr(row, "candidate_provider_id", None),
        getattr(row, "candidate_model_id", None),
        getattr(row, "candidate_model_version", None),
    )


@attrs.frozen
class CampaignFilter:
    """Which campaigns a listing shows: all of these that are given must hold.

    ``provider`` and ``model`` match the candidate exactly; ``suite`` is a prefix
    of the suite's sha256 (hex digits); ``name`` a part of the name (ASCII letters
    match in either case).
    """

    provider: str | None = None
    model: str | None = None
    suite: str | None = None
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        for value in (self.provider, self.model, self.name):
            if value is not None and not (is_text(value) and 1 <= len(value) <= MAX_NAME_LENGTH):
                raise blocked(FILTER_INVALID)
        suite = self.suite
        if suite is not None and not (
            isinstance(suite, str)
            and 1 <= len(suite) <= 64
            and all(character in string.hexdigits for character in suite)
        ):
            raise blocked(FILTER_INVALID)

    @property
    def empty(self) -> bool:
        return all(value is None for value in attrs.astuple(self))
