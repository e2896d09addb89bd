"""Limit groups: set, clear and read the caps campaigns share, and a group's usage now.

``CampaignService.set_group_limits`` / ``clear_group_limits`` /
``group_limits`` / ``group_usage``: each one transaction through
:class:`~benchledger.repositories.campaigns.limit_groups.LimitGroupRepository`.
The claim enforces the caps itself (:mod:`benchledger.repositories.campaigns.gate`).
"""

from __future__ import annotations

from benchledger.db.notify import notify_work
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_codes import LIMIT_GROUP_INVALID
from benchledger.domain.campaign_labels import limit_group_key
from benchledger.domain.limit_groups import LimitGroup, LimitGroupUsage
from benchledger.repositories.campaigns.limit_groups import LimitGroupRepository
from benchledger.repositories.campaigns.reads import read_snapshot
from benchledger.services.campaigns.context import CampaignContext


def _key(group: object) -> str:
    key = limit_group_key(group)
    if key is None:
        raise blocked(LIMIT_GROUP_INVALID)
    return key


def set_group_limits(context: CampaignContext, limits: LimitGroup, now: float | None) -> None:
    """Set a group's caps (every cap of ``limits``: ``None`` is no such cap)."""
    if not isinstance(limits, LimitGroup):
        raise blocked(LIMIT_GROUP_INVALID)
    current = context.now(now)
    caps = {
        "max_concurrent_leases": limits.max_concurrent_leases,
        "max_claims_per_minute": limits.max_claims_per_minute,
        "max_cost_per_minute": limits.max_cost_per_minute,
    }
    with context.db.write_connection() as connection:
        LimitGroupRepository(connection).put(limits.key, caps, current)
        notify_work(connection)  # caps raised: waiting campaigns may claim now


def clear_group_limits(context: CampaignContext, group: str) -> bool:
    """Drop a group's caps (its campaigns stay in it, uncapped); whether it had any."""
    key = _key(group)
    with context.db.write_connection() as connection:
        notify_work(connection)
        return LimitGroupRepository(connection).delete(key)


def _limits(row: object) -> LimitGroup:
    return LimitGroup(
        key=row.group_key,  # type: ignore[attr-defined]
        max_concurrent_leases=row.max_concurrent_leases,  # type: ignore[attr-defined]
        max_claims_per_minute=row.max_claims_per_minute,  # type: ignore[attr-defined]
        max_cost_per_minute=row.max_cost_per_minute,  # type: ignore[attr-defined]
        updated_at=float(row.updated_at),  # type: ignore[attr-defined]
    )


def group_limits(context: CampaignContext) -> tuple[LimitGroup, ...]:
    """Every group with caps, by key."""
    with read_snapshot(context.db.engine) as connection:
        return tuple(_limits(row) for row in LimitGroupRepository(connection).all())


def group_usage(context: CampaignContext, group: str, now: float | None) -> LimitGroupUsage:
    """A group's caps (none set: no caps), its campaigns and its usage at ``now``."""
    key = _key(group)
    current = context.now(now)
    with read_snapshot(context.db.engine) as connection:
        groups = LimitGroupRepository(connection)
        row = groups.get(key)
        campaigns = groups.campaigns(key)
        if row is None and not campaigns:
            raise blocked(dom.NOT_FOUND)
        live, claims, cost = groups.usage(key, current)
    return LimitGroupUsage(
        group=LimitGroup(key) if row is None else _limits(row),
        live_leases=live,
        claims_last_minute=claims,
        cost_last_minute=cost,
        campaigns=campaigns,
    )
