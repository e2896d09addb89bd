"""The claim's gate: a cancelled campaign hands out nothing, a capped one within its caps.

A claim reads this module only when :data:`~.leases.CLAIM` leased nothing (the
campaign may have a gate): :func:`claim_gate` reads the campaign's controls and
its limit group's caps (locking the rows whose caps apply) into a :class:`Gate`,
``WorkLeases.lease_next_gated`` leases within the caps and :func:`record_claim`
logs a rate-capped claim (in the campaign's log, its group's usage, or both).
Statements are prebuilt and run on the claim's Connection.
"""

from __future__ import annotations

from typing import Any, Final, cast

import attrs
import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.models.campaign import (
    CampaignRow,
    ClaimLogRow,
    LimitGroupRow,
    LimitGroupUsageRow,
)

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
CLAIMS = cast(sa.Table, ClaimLogRow.__table__)
GROUPS = cast(sa.Table, LimitGroupRow.__table__)
USAGE = cast(sa.Table, LimitGroupUsageRow.__table__)

#: The window of ``max_claims_per_minute`` (a campaign's and a limit group's).
RATE_WINDOW_SECONDS: Final = 60.0

_CID = sa.bindparam("campaign_id", type_=sa.Text())
_GROUP = sa.bindparam("group", type_=sa.Text())
_NOW: sa.BindParameter[float] = sa.bindparam("now", type_=sa.Double())
_SINCE: sa.BindParameter[float] = sa.bindparam("since", type_=sa.Double())
CONTROL_COLUMNS = (
    CAMPAIGNS.c.cancelled_at,
    CAMPAIGNS.c.max_concurrent_leases,
    CAMPAIGNS.c.max_claims_per_minute,
    CAMPAIGNS.c.limit_group,
)
CONTROLS = sa.select(*CONTROL_COLUMNS).where(CAMPAIGNS.c.campaign_id == _CID)
READ_CONTROLS = Prebuilt(CONTROLS)
# FOR NO KEY UPDATE: claimers of one capped campaign take turns on its row (the count and
# the lease are one decision), while foreign-key checks (KEY SHARE) never wait.
CONTROLS_LOCKED = Prebuilt(CONTROLS.with_for_update(key_share=True))
GROUP_CAP_COLUMNS = (
    GROUPS.c.max_concurrent_leases,
    GROUPS.c.max_claims_per_minute,
    GROUPS.c.max_cost_per_minute,
)
GROUP_CAPS = sa.select(*GROUP_CAP_COLUMNS).where(GROUPS.c.group_key == _GROUP)
READ_GROUP_CAPS = Prebuilt(GROUP_CAPS)
# Every claimer of every campaign in a capped group takes its turn on the group's row, after
# its campaign's row (always in that order: no deadlock between the two locks).
GROUP_CAPS_LOCKED = Prebuilt(GROUP_CAPS.with_for_update(key_share=True))
#: The claim log drops rows older than the window once every this many logged claims.
PRUNE_EVERY: Final = 32
LOG_CLAIM = Prebuilt(
    sa.insert(CLAIMS).values(campaign_id=_CID, claimed_at=_NOW).returning(CLAIMS.c.claim_id)
)
PRUNE_CLAIMS = Prebuilt(
    sa.delete(CLAIMS).where(CLAIMS.c.campaign_id == _CID, CLAIMS.c.claimed_at <= _SINCE)
)
LOG_GROUP_USAGE = Prebuilt(
    sa.insert(USAGE)
    .values(
        group_key=_GROUP,
        used_at=_NOW,
        claims=sa.bindparam("claims", type_=sa.Integer()),
        cost_units=sa.bindparam("cost_units", type_=sa.Integer()),
    )
    .returning(USAGE.c.usage_id)
)
PRUNE_GROUP_USAGE = Prebuilt(
    sa.delete(USAGE).where(USAGE.c.group_key == _GROUP, USAGE.c.used_at <= _SINCE)
)


def group_capped() -> sa.ColumnElement[bool]:
    """The campaign row's limit group has a cap (for a statement that reads ``CAMPAIGNS``)."""
    return sa.exists().where(
        GROUPS.c.group_key == CAMPAIGNS.c.limit_group,
        sa.or_(*(column.is_not(None) for column in GROUP_CAP_COLUMNS)),
    )


@attrs.frozen
class Gate:
    """What the claim may do: ``open`` or not, within which caps (``None``: none; the
    lease checks them, ``WorkLeases.lease_next_gated``), and which usage to log.

    The campaign's own caps (``max_live``, ``max_rate``) and its limit group's
    (``group``: its key, ``group_max_*``) all hold: the tighter one wins.
    """

    open: bool
    rate_capped: bool = False
    locked: bool = False
    max_live: int | None = None
    max_rate: int | None = None
    group: str | None = None
    group_max_live: int | None = None
    group_max_rate: int | None = None
    group_max_cost: int | None = None

    @property
    def group_logged(self) -> bool:
        """Whether the claim is logged in its group's usage (a per-minute group cap)."""
        return self.group is not None and (
            self.group_max_rate is not None or self.group_max_cost is not None
        )


CLOSED: Final = Gate(False)
OPEN: Final = Gate(True)


def _has_caps(row: Any, columns: tuple[str, ...]) -> bool:
    return row is not None and any(getattr(row, name) is not None for name in columns)


def claim_gate(connection: sa.Connection, campaign_id: str) -> Gate:
    """The gate of a claim of ``campaign_id``, under the locks its caps need.

    :data:`CLOSED` for a cancelled (or deleted) campaign, or one paused (a cap
    of 0, its own or its group's); :data:`OPEN` for one without caps, neither
    its own nor its limit group's (no lock: uncapped claims stay on the SKIP
    LOCKED path); else the caps, which the lease counts under the locks. On
    PostgreSQL the locks are the campaign row's when it has caps of its own, then
    the group row's when the group has caps (``FOR NO KEY UPDATE``), so claimers
    of a capped campaign or group count and lease one at a time; SQLite's write
    lock already serializes every claim.
    """
    params = {"campaign_id": campaign_id}
    row = READ_CONTROLS(connection, params).first()
    if row is None or row.cancelled_at is not None:
        return CLOSED
    group = row.limit_group
    caps = None if group is None else READ_GROUP_CAPS(connection, {"group": group}).first()
    own = _has_caps(row, ("max_concurrent_leases", "max_claims_per_minute"))
    shared = _has_caps(
        caps, ("max_concurrent_leases", "max_claims_per_minute", "max_cost_per_minute")
    )
    if not own and not shared:
        return OPEN
    if connection.dialect.name != "sqlite":
        if own:
            row = CONTROLS_LOCKED(connection, params).first()
            if row is None or row.cancelled_at is not None:
                return CLOSED
        if shared:
            caps = GROUP_CAPS_LOCKED(connection, {"group": group}).first()
    if not shared:
        caps = None
    limits = (
        row.max_concurrent_leases,
        row.max_claims_per_minute,
        *((None, None, None) if caps is None else tuple(caps)),
    )
    if 0 in limits:
        return CLOSED  # paused
    return Gate(
        True,
        rate_capped=row.max_claims_per_minute is not None,
        locked=True,
        max_live=row.max_concurrent_leases,
        max_rate=row.max_claims_per_minute,
        group=group if caps is not None else None,
        group_max_live=None if caps is None else caps.max_concurrent_leases,
        group_max_rate=None if caps is None else caps.max_claims_per_minute,
        group_max_cost=None if caps is None else caps.max_cost_per_minute,
    )


def campaign_cancelled(connection: sa.Connection, campaign_id: str) -> bool:
    """Whether an operator cancelled the campaign (a report claim then hands out nothing)."""
    row = READ_CONTROLS(connection, {"campaign_id": campaign_id}).first()
    return row is not None and row.cancelled_at is not None


def record_claim(connection: sa.Connection, campaign_id: str, gate: Gate, now: float) -> None:
    """Log a claim handed out through a rate-capped gate (the campaign's, its group's)."""
    since = now - RATE_WINDOW_SECONDS
    if gate.rate_capped:
        claim_id = LOG_CLAIM(connection, {"campaign_id": campaign_id, "now": now})
        if int(claim_id.scalar_one()) % PRUNE_EVERY == 0:  # older rows never count
            PRUNE_CLAIMS(connection, {"campaign_id": campaign_id, "since": since})
    if gate.group_logged:
        log_group_usage(connection, str(gate.group), now, claims=1, cost_units=0)


def log_group_usage(
    connection: sa.Connection, group: str, now: float, *, claims: int, cost_units: int
) -> None:
    """Add a claim or a reported cost to the group's last minute (pruning older rows)."""
    params = {"group": group, "now": now, "claims": claims, "cost_units": cost_units}
    usage_id = LOG_GROUP_USAGE(connection, params).scalar_one()
    if int(usage_id) % PRUNE_EVERY == 0:
        PRUNE_GROUP_USAGE(connection, {"group": group, "since": now - RATE_WINDOW_SECONDS})
