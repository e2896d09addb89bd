"""Two campaigns over one suite, compared: which items were paired, which were dropped and
why, and the paired statistics (:mod:`benchledger.domain.comparison`) of the pairs.

An item pairs when both campaigns have it (same locale, same case key) and both
succeeded with a numeric score; every other item is counted under one
:class:`DropReason`, so a reader sees how much of the suite the numbers cover.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from benchledger.domain.campaign_labels import Candidate
from benchledger.domain.comparison import Comparison


class DropReason(enum.StrEnum):
    """Why an item of either campaign is not one of the pairs."""

    #: Only campaign A has this (locale, case key): its locales differ from B's.
    ONLY_IN_A = "only_in_a"
    ONLY_IN_B = "only_in_b"
    #: Both have it; A's did not succeed (pending, leased, retrying or failed).
    A_NOT_SUCCEEDED = "a_not_succeeded"
    B_NOT_SUCCEEDED = "b_not_succeeded"
    NEITHER_SUCCEEDED = "neither_succeeded"
    #: Both succeeded, but a result has no finite numeric ``score``.
    NO_SCORE = "no_score"


def _dropped(value: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType({reason.value: int(value.get(reason, 0)) for reason in DropReason})


@attrs.frozen
class CampaignSide:
    """One of the two campaigns compared, as a reader tells it apart."""

    campaign_id: str
    name: str | None
    candidate: Candidate

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "name": self.name,
            "candidate": self.candidate.as_payload(),
        }


@attrs.frozen
class CampaignComparison:
    """What ``CampaignService.compare(a, b)`` returns (differences are B - A)."""

    a: CampaignSide
    b: CampaignSide
    suite_sha256: str
    #: Items paired (both succeeded with a score), and the others by reason.
    paired: int
    dropped: Mapping[str, int] = attrs.field(converter=_dropped, hash=False)
    #: The statistics; None when nothing paired (every number needs pairs).
    comparison: Comparison | None = None

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def as_payload(self) -> dict[str, Any]:
        return {
            "a": self.a.as_payload(),
            "b": self.b.as_payload(),
            "suite_sha256": self.suite_sha256,
            "paired": self.paired,
            "dropped": dict(self.dropped),
            **({} if self.comparison is None else self.comparison.as_document()),
        }
