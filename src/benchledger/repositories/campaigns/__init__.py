"""All SQL of benchmark campaigns, one module per job (mirroring ``services/campaigns``).

- :mod:`.store`: ``CampaignRepository``, the campaign rows and the
  content-addressed policies and suites they bind; the throttled touch of a
  campaign's ``updated_at``;
- :mod:`.work`: ``WorkRepository``, the work items' insert and reads;
- :mod:`.leases`: the lease state machine and the claim: ``CLAIM``,
  ``LEASE_NEXT_GATED``, ``WorkLeases``; a work item's claim reads only this
  module (docs/architecture.md, Walk 1) unless its campaign has a gate;
- :mod:`.gate`: the claim's gate for a cancelled or capped campaign
  (``claim_gate``, ``record_claim``);
- :mod:`.attempts`: the attempt history's writes, in the transaction of the
  outcome each records;
- :mod:`.results`: per-case results, the attempt history and comparisons (reads);
- :mod:`.reports`: ``ReportRepository`` and ``ReportLeases``, the report and
  its finalization lease;
- :mod:`.reads`: the statements behind status, health and the integrity audit;
- :mod:`.views`: the dashboard's read-only statements;
- :mod:`.actions`: operators' actions (retry, cancel/resume, caps, delete);
- :mod:`.predicates`: the work table's partial-index predicates as literal SQL.

Repositories run statements on the caller's session or connection and never
commit: the service owns the transaction.
"""
