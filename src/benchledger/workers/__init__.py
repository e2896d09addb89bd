"""The workers: the loop that works a campaign, its drivers, its leases and its options.

- :mod:`~benchledger.workers.options`: :class:`WorkerOptions`, every setting
  checked once;
- :mod:`~benchledger.workers.lease`: the runtime, the heartbeat and the lease
  keeper;
- :mod:`~benchledger.workers.drivers`: ``run_next_case`` and
  ``run_report_finalization``, one leased attempt each, over one skeleton;
- :mod:`~benchledger.workers.loop`: :class:`Worker` and what it reports.

Nothing is imported here, so the command line can read the options' defaults
without loading the services (``benchledger.Worker`` and the drivers are public
from the top-level package).
"""
