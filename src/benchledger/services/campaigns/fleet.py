"""What a fleet of workers serves: the open campaigns, each with its evaluator's name.

``CampaignService.open_campaigns`` lists the campaigns that name an evaluator
and are neither cancelled nor finished (``status().next_due_at`` is ``None``
once the report is final or the campaign is blocked for good), optionally only
some providers' or some ids. One status read per campaign: cheap at any size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_views import OpenCampaign
from benchledger.errors import LedgerError
from benchledger.repositories.campaigns.fleet import servable_campaigns
from benchledger.repositories.campaigns.reads import read_snapshot
from benchledger.services.campaigns.context import CampaignContext
from benchledger.services.campaigns.status import CampaignGauges


def _names(values: Iterable[str]) -> frozenset[str]:
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise blocked(dom.FILTER_INVALID)
    try:
        names = frozenset(values)
    except TypeError:  # unhashable members
        raise blocked(dom.FILTER_INVALID) from None
    if not all(dom.is_identifier(name) for name in names):
        raise blocked(dom.FILTER_INVALID)
    return names


def open_campaigns(
    context: CampaignContext,
    gauges: CampaignGauges,
    providers: Iterable[str] = (),
    campaign_ids: Iterable[str] = (),
) -> tuple[OpenCampaign, ...]:
    """The servable campaigns with work left, oldest first (see the module);
    ``filter_invalid`` unless each filter is a collection of identifiers."""
    wanted_providers, wanted_ids = _names(providers), _names(campaign_ids)
    with read_snapshot(context.db.engine) as connection:
        rows = servable_campaigns(connection)
    found = []
    for row in rows:
        if wanted_providers and row.candidate_provider_id not in wanted_providers:
            continue
        if wanted_ids and row.campaign_id not in wanted_ids:
            continue
        try:
            status = gauges.status(row.campaign_id)
        except LedgerError:
            continue  # unregistered or broken: nothing a worker can do with it
        if status.next_due_at is None:
            continue  # finished, or blocked for good
        found.append(
            OpenCampaign(
                campaign_id=row.campaign_id,
                evaluator=row.evaluator,
                limit_group=row.limit_group,
                provider=row.candidate_provider_id,
                next_due_at=status.next_due_at,
                complete=status.complete,
            )
        )
    return tuple(found)
