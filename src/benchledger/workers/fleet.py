"""FleetWorker: one worker (K lanes) for every open campaign with due work, fairly.

A fleet serves the campaigns :meth:`CampaignService.open_campaigns` lists
(they name an evaluator at create, and are neither cancelled nor finished),
looked at again every ``refresh_seconds`` so new campaigns are picked up
without a restart. Each lane takes the campaigns in turn (round robin over
the roster, one claim per turn): no campaign starves another, and one that
hands out nothing (nothing due, or held back by its caps or its limit group's)
rests briefly and yields to the others. A complete campaign's report is
finalized by whichever lane finds it due.

Evaluators are resolved per campaign through an allow-list: the mapping of
names to callables the fleet was started with. A name stored in the database
is only ever looked up in that mapping, never imported, so write access to the
database does not make a worker run code it was not started with; a campaign
naming an evaluator the fleet does not have is skipped (and logged once).

Everything else is :class:`~benchledger.workers.loop.Worker`'s: the same
lanes, leases, heartbeats, fault riding, throttling and adaptive concurrency.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_views import OpenCampaign
from benchledger.errors import CampaignBlocked
from benchledger.faults import OutagePolicy
from benchledger.ports.campaign import Evaluate
from benchledger.services.campaigns import CampaignService
from benchledger.workers.batching import ClaimBuffer
from benchledger.workers.drivers import DriverContext
from benchledger.workers.lanes import LaneLimit
from benchledger.workers.lease import Clock
from benchledger.workers.loop import Tally, Worker, WorkerProgress, WorkerSummary
from benchledger.workers.options import DEFAULTS, OperationGuard, WorkerOptions

log = logging.getLogger("benchledger.fleet")

#: How long a campaign that handed out nothing rests before its next turn, at most.
REST_SECONDS = 0.5


@attrs.define
class _Seat:
    """A campaign in the roster: what runs it and when it may next have work."""

    campaign: OpenCampaign
    evaluate: Evaluate
    due_at: float


class Roster:
    """The campaigns a fleet serves, taken in turn (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seats: list[_Seat] = []
        self._turn = 0

    def __len__(self) -> int:
        return len(self._seats)

    def replace(self, seats: list[_Seat]) -> None:
        """The campaigns listed now; a known campaign keeps its rest if it is later, unless
        it became complete meanwhile (its report is what is due now)."""
        with self._lock:
            known = {seat.campaign.campaign_id: seat for seat in self._seats}
            for seat in seats:
                before = known.get(seat.campaign.campaign_id)
                if before is not None and before.campaign.complete == seat.campaign.complete:
                    seat.due_at = max(seat.due_at, before.due_at)
            self._seats = seats

    def take(self, now: float) -> list[_Seat]:
        """The campaigns due at ``now``, starting after the last one given a turn."""
        with self._lock:
            count = len(self._seats)
            order = [self._seats[(self._turn + i) % count] for i in range(count)]
            self._turn = (self._turn + 1) % count if count else 0
        return [seat for seat in order if seat.due_at <= now]

    def rest(self, seat: _Seat, until: float) -> None:
        with self._lock:
            seat.due_at = max(seat.due_at, until)

    def wake(self, seat: _Seat, now: float) -> None:
        with self._lock:
            seat.due_at = min(seat.due_at, now)

    def earliest(self) -> float | None:
        with self._lock:
            return min((seat.due_at for seat in self._seats), default=None)

    def servable(self) -> int:
        """The campaigns that may still hand out work here (not set aside for good)."""
        with self._lock:
            return sum(seat.due_at != float("inf") for seat in self._seats)

    def seats(self) -> list[_Seat]:
        with self._lock:
            return list(self._seats)


class FleetWorker(Worker):
    """Serves every open campaign whose evaluator it has (``evaluators``: name -> callable).

    ``providers`` / ``campaign_ids`` narrow what it serves. ``run`` returns when
    no campaign it serves has work left (all finished or blocked, and none new
    at the last look), unless ``forever=True`` (then only a stop ends it). The
    keyword options are :class:`~benchledger.workers.options.WorkerOptions`' as
    for :class:`Worker` (``concurrency=K`` lanes on a thread pool);
    ``until_finished`` is implied: a fleet waits for retries and leases held
    elsewhere. ``progress`` gets a :class:`WorkerProgress` after every attempt.
    """

    def __init__(
        self,
        campaigns: CampaignService,
        worker_id: str,
        evaluators: Mapping[str, Evaluate],
        *,
        providers: Iterable[str] = (),
        campaign_ids: Iterable[str] = (),
        forever: bool = False,
        refresh_seconds: float = 5.0,
        clock: Clock = time.time,
        lease_seconds: float = DEFAULTS.lease_seconds,
        retry_base_seconds: float = DEFAULTS.retry_base_seconds,
        retry_max_seconds: float = DEFAULTS.retry_max_seconds,
        retry_jitter: float = DEFAULTS.retry_jitter,
        heartbeat_seconds: float | None = DEFAULTS.heartbeat_seconds,
        operation_guard: OperationGuard | None = DEFAULTS.operation_guard,
        progress: Callable[[WorkerProgress], Any] | None = None,
        should_stop: Callable[[], bool] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        poll_seconds: float = DEFAULTS.poll_seconds,
        outage: OutagePolicy | None = DEFAULTS.outage,
        concurrency: int = DEFAULTS.concurrency,
        adaptive_concurrency: bool = DEFAULTS.adaptive_concurrency,
    ) -> None:
        options = WorkerOptions(
            lease_seconds=lease_seconds,
            retry_base_seconds=retry_base_seconds,
            retry_max_seconds=retry_max_seconds,
            retry_jitter=retry_jitter,
            heartbeat_seconds=heartbeat_seconds,
            operation_guard=operation_guard,
            outage=outage,
            poll_seconds=poll_seconds,
            concurrency=concurrency,
            adaptive_concurrency=adaptive_concurrency,
            until_finished=True,
        )
        self._configure_fleet(
            campaigns,
            worker_id,
            evaluators,
            options,
            providers=providers,
            campaign_ids=campaign_ids,
            forever=forever,
            refresh_seconds=refresh_seconds,
            clock=clock,
            progress=progress,
            should_stop=should_stop,
            sleep=sleep,
        )

    @classmethod
    def from_fleet_options(
        cls,
        campaigns: CampaignService,
        worker_id: str,
        evaluators: Mapping[str, Evaluate],
        options: WorkerOptions,
        *,
        providers: Iterable[str] = (),
        campaign_ids: Iterable[str] = (),
        forever: bool = False,
        refresh_seconds: float = 5.0,
        clock: Clock = time.time,
        progress: Callable[[WorkerProgress], Any] | None = None,
        should_stop: Callable[[], bool] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> FleetWorker:
        """A fleet worker with settings already checked (``until_finished`` is implied)."""
        fleet = cls.__new__(cls)
        fleet._configure_fleet(
            campaigns,
            worker_id,
            evaluators,
            attrs.evolve(options, until_finished=True, max_cases=None),
            providers=providers,
            campaign_ids=campaign_ids,
            forever=forever,
            refresh_seconds=refresh_seconds,
            clock=clock,
            progress=progress,
            should_stop=should_stop,
            sleep=sleep,
        )
        return fleet

    def _configure_fleet(
        self,
        campaigns: CampaignService,
        worker_id: str,
        evaluators: Mapping[str, Evaluate],
        options: WorkerOptions,
        *,
        providers: Iterable[str],
        campaign_ids: Iterable[str],
        forever: bool,
        refresh_seconds: float,
        clock: Clock,
        progress: Callable[[WorkerProgress], Any] | None,
        should_stop: Callable[[], bool] | None,
        sleep: Callable[[float], Any],
    ) -> None:
        if not isinstance(evaluators, Mapping) or not evaluators:
            raise blocked(dom.DEPENDENCY_INVALID)
        if not all(isinstance(k, str) and callable(v) for k, v in evaluators.items()):
            raise blocked(dom.DEPENDENCY_INVALID)
        if not isinstance(forever, bool):
            raise blocked(dom.WORKER_SETTING_INVALID)
        first = next(iter(evaluators.values()))
        self._configure(
            campaigns,
            "fleet",
            worker_id,
            first,
            options,
            clock=clock,
            progress=progress,
            should_stop=should_stop,
            sleep=sleep,
        )
        self.evaluators = dict(evaluators)
        self.providers = tuple(providers)
        self.campaign_ids = tuple(campaign_ids)
        self.forever = forever
        self.refresh_seconds = float(dom.duration(refresh_seconds))
        self.roster = Roster()
        self._refreshed_at = float("-inf")
        self._refresh_lock = threading.Lock()
        self._skipped: set[tuple[str, str]] = set()

    # -- the roster -------------------------------------------------------------------------

    def _claim_buffer(self, lanes: LaneLimit) -> ClaimBuffer | None:
        """None: a fleet's lanes claim from many campaigns, one at a time (each lane its
        turn), and share only the committer."""
        return None

    def _driving_for(self, campaign_id: str, tally: Tally) -> DriverContext:
        context = DriverContext(
            self.campaigns,
            campaign_id,
            self.worker_id,
            self.clock,
            self.options,
            self.outage,
            self._runtime,
        )
        return self._batched(context, tally)

    def refresh(self, *, force: bool = False) -> int:
        """Look at the open campaigns again (at most every ``refresh_seconds`` unless
        ``force``); returns how many the fleet serves."""
        now = time.monotonic()
        with self._refresh_lock:
            if not force and now - self._refreshed_at < self.refresh_seconds:
                return len(self.roster)
            self._refreshed_at = now
            listed = self.outage.call(
                "campaign list",
                lambda: self.campaigns.open_campaigns(
                    providers=self.providers, campaign_ids=self.campaign_ids
                ),
            )
            seats = []
            for campaign in listed:
                evaluate = self.evaluators.get(campaign.evaluator)
                if evaluate is None:
                    skipped = (campaign.campaign_id, campaign.evaluator)
                    if skipped not in self._skipped:
                        self._skipped.add(skipped)
                        log.warning(
                            "campaign %s names evaluator %r, which this fleet was not "
                            "started with: skipped",
                            campaign.campaign_id[:21],
                            campaign.evaluator,
                            extra={"campaign": campaign.campaign_id},
                        )
                    continue
                seats.append(_Seat(campaign, evaluate, campaign.next_due_at))
            self.roster.replace(seats)
            return len(seats)

    # -- Worker's loop, over many campaigns --------------------------------------------------

    def _next_case(self, tally: Tally) -> bool:
        """One turn over the roster: the first due campaign that hands out a case runs it
        (or its report, once complete); whether anything ran."""
        self.refresh()
        now = dom.timestamp(self.clock())
        for seat in self.roster.take(now):
            ran = self._serve(tally, seat)
            if ran:
                return True
            # Nothing handed out (nothing due, or its caps or its group's): rest, yield.
            self.roster.rest(seat, now + min(self.poll_seconds, REST_SECONDS))
        return False

    def _serve(self, tally: Tally, seat: _Seat) -> bool:
        """A turn of one campaign: its next case, or its report once complete."""
        context = self._driving_for(seat.campaign.campaign_id, tally)
        if seat.campaign.complete:
            if self._finalize(tally, context) is None:
                return False
            self._refreshed_at = float("-inf")  # it may be finished: look again
            return True
        try:
            return self._case(tally, context, seat.evaluate)
        except CampaignBlocked as error:
            if error.code != dom.VALIDITY_EXPIRED:
                raise
            log.warning(
                "campaign %s: its policy expired, no case can be claimed: set aside",
                seat.campaign.campaign_id[:21],
                extra={"campaign": seat.campaign.campaign_id, "code": error.code},
            )
            self.roster.rest(seat, float("inf"))
            return False

    def _wakes_me(self, notified: set[str]) -> bool:
        """Any campaign's new work concerns a fleet: look at the campaigns again now."""
        self._refreshed_at = float("-inf")
        return True

    def _watch(self, tally: Tally, looked_at: float) -> bool:
        """The watching lane: look at the campaigns again, end when none has work left
        (unless ``forever``), else wait until the first is due (at most ``poll_seconds``)."""
        self.refresh(force=True)
        if self.roster.servable() == 0 and not self.forever:
            tally.finished = True
            if tally.work is not None:
                tally.work.pulse()
            return False
        earliest = self.roster.earliest()
        now = dom.timestamp(self.clock())
        if earliest is not None and earliest <= now:
            return True  # due now (a report that just fell due, say): serve it, no wait
        if earliest is None or earliest == float("inf"):
            earliest = looked_at  # nothing due here: look again after poll_seconds
        self._wait(earliest, looked_at)
        return True

    def _finish(self, tally: Tally, stopped: bool) -> WorkerSummary:
        return WorkerSummary(
            tally.cases,
            tally.succeeded,
            tally.retrying,
            tally.failed,
            None,
            tally.lost,
            stopped,
            tally.lost_reports,
            tally.throttled,
        )
