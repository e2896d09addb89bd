"""The campaigns a fleet of workers may serve: not cancelled, and naming an evaluator."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from benchledger.db import Prebuilt
from benchledger.repositories.campaigns.gate import CAMPAIGNS

SERVABLE = Prebuilt(
    sa.select(
        CAMPAIGNS.c.campaign_id,
        CAMPAIGNS.c.evaluator,
        CAMPAIGNS.c.limit_group,
        CAMPAIGNS.c.candidate_provider_id,
    )
    .where(CAMPAIGNS.c.cancelled_at.is_(None), CAMPAIGNS.c.evaluator.is_not(None))
    .order_by(CAMPAIGNS.c.created_at, CAMPAIGNS.c.campaign_id)
)


def servable_campaigns(connection: sa.Connection) -> list[sa.Row[Any]]:
    """Every campaign neither cancelled nor without an evaluator name, oldest first."""
    return list(SERVABLE(connection, {}).all())
