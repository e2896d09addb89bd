"""Limit groups: caps keyed by a name (a model provider, say) shared by many campaigns.

A campaign belongs to at most one group (``limit_group``, by default its
policy's provider). A group's caps hold across all its campaigns at once, in
the claim itself, beside each campaign's own caps (the tighter one wins):
live leases, claims per minute, and cost units per minute that evaluators
report with their results (``Outcome(result, cost_units=N)``). Pure values.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_codes import LIMIT_GROUP_INVALID
from benchledger.domain.campaign_labels import limit_group_key

#: The largest group cap (claims or cost units per minute, live leases).
MAX_GROUP_CAP: Final = 1_000_000_000


def group_cap(value: Any) -> int | None:
    """A group cap: ``None`` (none), or an integer from 0 (paused) to :data:`MAX_GROUP_CAP`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GROUP_CAP:
        raise blocked(LIMIT_GROUP_INVALID)
    return int(value)


def _key(value: Any) -> str:
    key = limit_group_key(value)
    if key is None:
        raise blocked(LIMIT_GROUP_INVALID)
    return key


@attrs.frozen
class LimitGroup:
    """A limit group's caps (``None``: no such cap; 0 pauses every campaign in it)."""

    key: str = attrs.field(converter=_key)
    max_concurrent_leases: int | None = attrs.field(default=None, converter=group_cap)
    max_claims_per_minute: int | None = attrs.field(default=None, converter=group_cap)
    max_cost_per_minute: int | None = attrs.field(default=None, converter=group_cap)
    updated_at: float | None = None

    @property
    def paused(self) -> bool:
        return 0 in (
            self.max_concurrent_leases,
            self.max_claims_per_minute,
            self.max_cost_per_minute,
        )

    def as_payload(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "max_concurrent_leases": self.max_concurrent_leases,
            "max_claims_per_minute": self.max_claims_per_minute,
            "max_cost_per_minute": self.max_cost_per_minute,
            "updated_at": self.updated_at,
        }


@attrs.frozen
class LimitGroupUsage:
    """A group's use of its caps at one moment: live leases now, and the last minute's
    claims and reported cost units (counted only while a per-minute cap is set)."""

    group: LimitGroup
    live_leases: int
    claims_last_minute: int
    cost_last_minute: int
    campaigns: tuple[str, ...]

    @property
    def at_cap(self) -> bool:
        """Whether a claim of one of its campaigns would be held back now."""
        group = self.group
        return group.paused or any(
            cap is not None and used >= cap
            for cap, used in (
                (group.max_concurrent_leases, self.live_leases),
                (group.max_claims_per_minute, self.claims_last_minute),
                (group.max_cost_per_minute, self.cost_last_minute),
            )
        )

    def as_payload(self) -> dict[str, Any]:
        return {
            **self.group.as_payload(),
            "live_leases": self.live_leases,
            "claims_last_minute": self.claims_last_minute,
            "cost_last_minute": self.cost_last_minute,
            "at_cap": self.at_cap,
            "campaigns": list(self.campaigns),
        }
