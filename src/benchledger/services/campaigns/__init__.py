"""Benchmark campaigns: the :class:`CampaignService` facade and one module per job.

- :mod:`.service`: ``CampaignService``, a facade: each method hands its
  arguments to the module below that does the job;
- :mod:`.context`: what the jobs share (database, result verifier, report
  builder, clock, plan cache; the throttled touch; renewing a lease and
  recording a failure, the same for a work item and the report);
- :mod:`.creation`: ``create`` and ``register`` (storing the plan);
- :mod:`.leases`: the work-item lease lifecycle: ``claim``, ``renew``,
  ``complete``, ``fail``;
- :mod:`.reports`: the report's lease lifecycle (``claim_report`` ...
  ``fail_report``), building and storing it (``summarize``), ``load_report``;
- :mod:`.reads`: ``list``, ``status``, ``health`` and the audit ``verify``;
- :mod:`.plans`: each campaign's policy and suite, read once, verified and
  cached; ``verify_binding``;
- :mod:`.outcomes`: what lease-holder calls return and record (outcomes,
  failures and their retry rule, the operation guard);
- :mod:`benchledger.domain.campaign_rules`: the pure invariants health checks
  on stored rows, and what a flow-control cap may be;
- :mod:`.status`: ``CampaignGauges``, the cheap polled reads behind ``status``
  and ``health``;
- :mod:`.integrity`: ``CampaignInspector``, the integrity audit ``verify`` and
  ``load_report``;
- :mod:`.actions` and :mod:`.views`: operators' actions, the dashboard's reads.

The repositories mirror these modules (``repositories/campaigns/``: ``store``,
``work``, ``leases``, ``reports``, ``reads``, ``views``, ``actions``).
``CampaignService.claim`` is :func:`.leases.claim`, whose SQL is all in
:mod:`benchledger.repositories.campaigns.leases` (``WorkLeases``, ``CLAIM`` and
the claim's gate); docs/architecture.md walks it.
"""

from benchledger.services.campaigns.service import CampaignService

__all__ = ["CampaignService"]
