"""AsyncCampaignService: CampaignService's methods, awaited on the async driver.

Every method awaits the same method of a :class:`CampaignService` over
:attr:`AsyncDatabase.sync` through SQLAlchemy's greenlet bridge: the same
prebuilt statements, the same rules, the same return values and error codes,
by construction (there is no second copy of either). Signatures follow the
sync service's (a test holds the two in step).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from benchledger.aio._bridge import awaiting_outage, run_sync
from benchledger.aio.db import AsyncDatabase
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.faults import Outage, OutagePolicy
from benchledger.services.campaigns import CampaignService

P = ParamSpec("P")
T = TypeVar("T")

#: The public methods of CampaignService spelled out below (the others: _bridge_the_rest).
METHODS: Final = (
    "policy",
    "suite",
    "create",
    "register",
    "claim",
    "renew",
    "complete",
    "fail",
    "list",
    "status",
    "health",
    "verify",
    "report_finalization_required",
    "claim_report",
    "renew_report",
    "complete_report",
    "fail_report",
    "summarize",
    "load_report",
)


def _bridged(
    method: Callable[Concatenate[CampaignService, P], T],
) -> Callable[Concatenate[AsyncCampaignService, P], Coroutine[Any, Any, T]]:
    async def call(self: AsyncCampaignService, /, *args: P.args, **kwargs: P.kwargs) -> T:
        service = await self.ready()
        return await run_sync(method, service, *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


class AsyncCampaignService:
    """Benchmark campaigns for asyncio code: ``await campaigns.claim(...)`` and so on.

    Takes an :class:`~benchledger.aio.AsyncDatabase` and the keyword options of
    :class:`~benchledger.services.campaigns.CampaignService` (result verifier,
    report builder, clock, clock skew). The sync service is opened on first
    use (its schema check reads the database); ``await campaigns.ready()``
    opens it at a time of your choosing and raises what its constructor would
    (``ledger.schema.behind``, ``benchmark.campaign.dependency_invalid``, ...).
    Opening rides out a database outage within ``outage`` (an option, or
    ``ready``'s argument; default :data:`~benchledger.faults.STARTUP_OUTAGE`, a
    few seconds; :class:`~benchledger.aio.AsyncWorker` opens it with its whole
    budget), waiting without blocking the event loop, then raises
    ``ledger.database.unavailable``: never a raw SQLAlchemy error.

    Ports (verifier, report builder, an ``operation_guard`` given to
    ``summarize``) are plain sync callables, called on the event loop's thread.
    """

    def __init__(self, db: AsyncDatabase, **options: Any) -> None:
        if not isinstance(db, AsyncDatabase):
            raise blocked(dom.DEPENDENCY_INVALID)
        self.db = db
        self._options = options
        self._service: CampaignService | None = None
        self._opening = asyncio.Lock()

    async def ready(self, *, outage: Outage | OutagePolicy | None = None) -> CampaignService:
        """Open the sync service (once); returns it, for :meth:`AsyncDatabase.run_sync` code.

        ``outage`` (else the ``outage`` option, else the start-up default) is how long
        an unreachable database is waited for; the waits are awaited.
        """
        if self._service is None:
            async with self._opening:
                if self._service is None:
                    chosen = self._options.get("outage") if outage is None else outage
                    options = {**self._options, "outage": awaiting_outage(chosen)}
                    self._service = await run_sync(CampaignService, self.db.sync, **options)
        return self._service

    policy = _bridged(CampaignService.policy)
    suite = _bridged(CampaignService.suite)
    create = _bridged(CampaignService.create)
    register = _bridged(CampaignService.register)
    claim = _bridged(CampaignService.claim)
    renew = _bridged(CampaignService.renew)
    complete = _bridged(CampaignService.complete)
    fail = _bridged(CampaignService.fail)
    list = _bridged(CampaignService.list)
    status = _bridged(CampaignService.status)
    health = _bridged(CampaignService.health)
    verify = _bridged(CampaignService.verify)
    report_finalization_required = _bridged(CampaignService.report_finalization_required)
    claim_report = _bridged(CampaignService.claim_report)
    renew_report = _bridged(CampaignService.renew_report)
    complete_report = _bridged(CampaignService.complete_report)
    fail_report = _bridged(CampaignService.fail_report)
    summarize = _bridged(CampaignService.summarize)
    load_report = _bridged(CampaignService.load_report)


def _bridge_the_rest() -> None:
    """Await any further public CampaignService method too, so the two never drift apart.

    The methods above are spelled out for type checkers; a method added to
    CampaignService later is bridged here the same way until it is listed.
    """
    for name, value in vars(CampaignService).items():
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        if name not in vars(AsyncCampaignService):
            setattr(AsyncCampaignService, name, _bridged(value))


_bridge_the_rest()
