"""The claim's gate: a cancelled campaign hands out nothing, a capped one within its caps.

A claim reads this module only when :data:`~.leases.CLAIM` leased nothing (the
campaign may have a gate): :func:`claim_gate` reads the campaign's controls (and
locks its row when it has a cap), :func:`claim_allowed` turns them into a
:class:`Gate`, ``WorkLeases.lease_next_gated`` leases within the caps and
:func:`record_claim` logs a rate-capped claim. Statements are prebuilt and run
on the claim's Connection.
"""

from __future__ import annotations

from typing import Any, Final, cast

import attrs
import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.models.campaign import CampaignRow, ClaimLogRow

CAMPAIGNS = cast(sa.Table, CampaignRow.__table__)
CLAIMS = cast(sa.Table, ClaimLogRow.__table__)

#: The window of ``max_claims_per_minute``.
RATE_WINDOW_SECONDS: Final = 60.0

_CID = sa.bindparam("campaign_id", type_=sa.Text())
_NOW: sa.BindParameter[float] = sa.bindparam("now", type_=sa.Double())
_SINCE: sa.BindParameter[float] = sa.bindparam("since", type_=sa.Double())
CONTROL_COLUMNS = (
    CAMPAIGNS.c.cancelled_at,
    CAMPAIGNS.c.max_concurrent_leases,
    CAMPAIGNS.c.max_claims_per_minute,
)
CONTROLS = sa.select(*CONTROL_COLUMNS).where(CAMPAIGNS.c.campaign_id == _CID)
READ_CONTROLS = Prebuilt(CONTROLS)
# FOR NO KEY UPDATE: claimers of one capped campaign take turns on its row (the count and
# the lease are one decision), while foreign-key checks (KEY SHARE) never wait.
CONTROLS_LOCKED = Prebuilt(CONTROLS.with_for_update(key_share=True))
#: The claim log drops rows older than the window once every this many logged claims.
PRUNE_EVERY: Final = 32
LOG_CLAIM = Prebuilt(
    sa.insert(CLAIMS).values(campaign_id=_CID, claimed_at=_NOW).returning(CLAIMS.c.claim_id)
)
PRUNE_CLAIMS = Prebuilt(
    sa.delete(CLAIMS).where(CLAIMS.c.campaign_id == _CID, CLAIMS.c.claimed_at <= _SINCE)
)


@attrs.frozen
class Gate:
    """What the claim may do: ``open`` or not, within which caps (``None``: none; the
    lease checks them, ``WorkLeases.lease_next_gated``), and whether to log the claim."""

    open: bool
    rate_capped: bool = False
    locked: bool = False
    max_live: int | None = None
    max_rate: int | None = None


CLOSED: Final = Gate(False)
OPEN: Final = Gate(True)


def claim_gate(connection: sa.Connection, campaign_id: str) -> Gate | sa.Row[Any]:
    """Read the campaign's controls for a claim, locking its row when it has a cap.

    Returns :data:`CLOSED` for a cancelled (or deleted) campaign, :data:`OPEN`
    for one without caps (no lock: uncapped claims stay on the SKIP LOCKED
    path), else the caps to check with :func:`claim_allowed` under the lock. On
    PostgreSQL the lock is the campaign row's (``FOR NO KEY UPDATE``), so
    concurrent claimers of a capped campaign count and lease one at a time;
    SQLite's write lock already serializes every claim.
    """
    params = {"campaign_id": campaign_id}
    row = READ_CONTROLS(connection, params).first()
    if row is None or row.cancelled_at is not None:
        return CLOSED
    if row.max_concurrent_leases is None and row.max_claims_per_minute is None:
        return OPEN
    if connection.dialect.name != "sqlite":
        row = CONTROLS_LOCKED(connection, params).first()
        if row is None or row.cancelled_at is not None:
            return CLOSED
    return row


def campaign_cancelled(connection: sa.Connection, campaign_id: str) -> bool:
    """Whether an operator cancelled the campaign (a report claim then hands out nothing)."""
    row = READ_CONTROLS(connection, {"campaign_id": campaign_id}).first()
    return row is not None and row.cancelled_at is not None


def claim_allowed(caps: Gate | sa.Row[Any]) -> Gate:
    """The gate of a capped campaign: closed while paused (a cap of 0), else open within
    its caps (the lease counts live leases and the last minute's claims itself)."""
    if isinstance(caps, Gate):
        return caps
    concurrent, per_minute = caps.max_concurrent_leases, caps.max_claims_per_minute
    if 0 in (concurrent, per_minute):
        return CLOSED  # paused
    return Gate(
        True,
        rate_capped=per_minute is not None,
        locked=True,
        max_live=concurrent,
        max_rate=per_minute,
    )


def record_claim(connection: sa.Connection, campaign_id: str, gate: Gate, now: float) -> None:
    """Log a claim handed out through a rate-capped gate."""
    if gate.rate_capped:
        claim_id = LOG_CLAIM(connection, {"campaign_id": campaign_id, "now": now})
        if int(claim_id.scalar_one()) % PRUNE_EVERY == 0:  # older rows never count
            since = now - RATE_WINDOW_SECONDS
            PRUNE_CLAIMS(connection, {"campaign_id": campaign_id, "since": since})
