"""Benchmark campaigns: the :class:`CampaignService` facade and the modules it uses.

- :mod:`.service`: ``CampaignService`` (create, the lease lifecycle of work items
  and of the one report, status, health and the integrity audit);
- :mod:`.plans`: each campaign's policy and suite, read once, verified and cached;
- :mod:`.outcomes`: what lease-holder calls return and record (outcomes,
  failures and their retry rule, the operation guard);
- :mod:`benchledger.domain.campaign_rules`: the pure invariants health checks
  on stored rows;
- :mod:`benchledger.services.campaign_actions`, ``campaign_integrity`` and
  ``campaign_views``: operator actions, the integrity audit, the dashboard's reads.

``CampaignService.claim`` reaches its one SQL statement in
:meth:`benchledger.repositories.campaigns.WorkLeases.lease_next` (``LEASE_NEXT``);
docs/architecture.md walks it.
"""

from benchledger.services.campaigns.service import CampaignService

__all__ = ["CampaignService"]
