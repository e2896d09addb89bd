"""Limit groups' rows: their caps, and their usage counted the way the claim counts it.

The claim's own reads of a group (its caps under the group row's lock, the
counts inside the lease) are in :mod:`.gate` and :mod:`.leases`; this module
holds what operators and status read and write: set, clear and list caps, and
a group's usage now (the same counts the claim makes: live leases over its
campaigns, and the last minute's claims and cost units).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.domain.campaign import WorkStatus
from benchledger.repositories.campaigns.gate import (
    CAMPAIGNS,
    GROUPS,
    RATE_WINDOW_SECONDS,
    USAGE,
    log_group_usage,
)
from benchledger.repositories.campaigns.leases import WORK

_GROUP = sa.bindparam("group", type_=sa.Text())
_NOW = sa.bindparam("now", type_=WORK.c.lease_expires_at.type)
_SINCE = sa.bindparam("since", type_=USAGE.c.used_at.type)

READ_GROUP = Prebuilt(sa.select(GROUPS).where(GROUPS.c.group_key == _GROUP))
LIST_GROUPS = Prebuilt(sa.select(GROUPS).order_by(GROUPS.c.group_key))
GROUP_CAMPAIGNS = Prebuilt(
    sa.select(CAMPAIGNS.c.campaign_id)
    .where(CAMPAIGNS.c.limit_group == _GROUP)
    .order_by(CAMPAIGNS.c.campaign_id)
)
GROUP_OF = Prebuilt(
    sa.select(CAMPAIGNS.c.limit_group).where(
        CAMPAIGNS.c.campaign_id == sa.bindparam("campaign_id", type_=sa.Text())
    )
)
LIVE_LEASES = Prebuilt(
    sa.select(sa.func.count())
    .select_from(WORK)
    .where(
        WORK.c.campaign_id.in_(
            sa.select(CAMPAIGNS.c.campaign_id).where(CAMPAIGNS.c.limit_group == _GROUP)
        ),
        WORK.c.status == WorkStatus.LEASED.value,
        WORK.c.lease_expires_at > _NOW,
    )
)
RECENT_USAGE = Prebuilt(
    sa.select(
        sa.func.coalesce(sa.func.sum(USAGE.c.claims), 0),
        sa.func.coalesce(sa.func.sum(USAGE.c.cost_units), 0),
    ).where(USAGE.c.group_key == _GROUP, USAGE.c.used_at > _SINCE)
)
DELETE_GROUP = Prebuilt(sa.delete(GROUPS).where(GROUPS.c.group_key == _GROUP))
DELETE_USAGE = Prebuilt(sa.delete(USAGE).where(USAGE.c.group_key == _GROUP))
_CAPS = ("max_concurrent_leases", "max_claims_per_minute", "max_cost_per_minute")


class LimitGroupRepository:
    """Limit groups on a Connection (one write or read transaction of the caller's)."""

    def __init__(self, connection: sa.Connection) -> None:
        self.connection = connection

    def get(self, group: str) -> sa.Row[Any] | None:
        return READ_GROUP(self.connection, {"group": group}).first()

    def all(self) -> list[sa.Row[Any]]:
        return list(LIST_GROUPS(self.connection, {}).all())

    def put(self, group: str, caps: dict[str, int | None], now: float) -> None:
        """Set the group's caps (insert, or update the row: its lock orders the claims)."""
        values = {name: caps.get(name) for name in _CAPS}
        updated = self.connection.execute(
            sa.update(GROUPS).where(GROUPS.c.group_key == group).values(updated_at=now, **values)
        )
        if updated.rowcount == 0:
            self.connection.execute(
                sa.insert(GROUPS).values(group_key=group, created_at=now, updated_at=now, **values)
            )

    def delete(self, group: str) -> bool:
        """Drop the group's caps and usage; whether it had caps."""
        DELETE_USAGE(self.connection, {"group": group})
        return DELETE_GROUP(self.connection, {"group": group}).rowcount == 1

    def campaigns(self, group: str) -> tuple[str, ...]:
        return tuple(GROUP_CAMPAIGNS(self.connection, {"group": group}).scalars())

    def group_of(self, campaign_id: str) -> str | None:
        return GROUP_OF(self.connection, {"campaign_id": campaign_id}).scalar_one_or_none()

    def usage(self, group: str, now: float) -> tuple[int, int, int]:
        """Live leases over the group's campaigns at ``now``, and the last minute's claims
        and cost units (what the claim's caps count)."""
        live = LIVE_LEASES(self.connection, {"group": group, "now": now}).scalar_one()
        since = now - RATE_WINDOW_SECONDS
        claims, cost = RECENT_USAGE(self.connection, {"group": group, "since": since}).one()
        return int(live), int(claims), int(cost)

    def add_cost(self, group: str, now: float, cost_units: int) -> None:
        """Count cost units an evaluator reported against the group's last minute."""
        log_group_usage(self.connection, group, now, claims=0, cost_units=cost_units)
