"""WorkerOptions: how a worker leases, retries, waits and keeps cases in flight, checked once.

Every worker (:class:`~benchledger.workers.loop.Worker`,
:class:`~benchledger.aio.AsyncWorker`, the drivers, the process pool behind
``campaign work``) takes its settings as one :class:`WorkerOptions` value: each
option's default and its check live here, and only here. A bad value is
refused when the value is made, with the code the workers have always used
(``duration_invalid``, ``retry_invalid``, ``worker_setting_invalid``,
``dependency_invalid``).

This module imports only the domain, so the command line can read the
defaults without loading the services or SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs

from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked

if TYPE_CHECKING:  # imported when an outage policy is given: the defaults load no SQLAlchemy
    from benchledger.faults import OutagePolicy

#: The host's check before every lease renewal: called with the lease's length.
OperationGuard = Callable[[float], Any]

#: The most cases one worker keeps in flight (``Worker(concurrency=...)``, AsyncWorker).
MAX_CONCURRENCY: Final = 1024


def _duration(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    dom.duration(value)


def _delay(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    dom.duration(value, allow_zero=True)


def _retry_max(options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    dom.duration(value, allow_zero=True)
    if float(options.retry_base_seconds) > float(value):
        raise blocked(dom.RETRY_INVALID)


def _throttle_max(options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    dom.duration(value, allow_zero=True)
    if float(options.throttle_base_seconds) > float(value):
        raise blocked(dom.RETRY_INVALID)


def _jitter(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise blocked(dom.RETRY_INVALID)


def _optional_duration(
    _options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any
) -> None:
    if value is not None:
        dom.duration(value)


def _guard(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise blocked(dom.DEPENDENCY_INVALID)


def _outage(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    from benchledger.faults import OutagePolicy

    if not isinstance(value, OutagePolicy):
        raise blocked(dom.DEPENDENCY_INVALID)


def _concurrency(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise blocked(dom.WORKER_SETTING_INVALID)


def _max_cases(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise blocked(dom.WORKER_SETTING_INVALID)


def _flag(_options: WorkerOptions, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise blocked(dom.WORKER_SETTING_INVALID)


@attrs.frozen
class WorkerOptions:
    """A worker's settings, each checked when the value is made.

    - ``lease_seconds``: how long a claim holds a case (or the report); in
      (0, 1 day] (``duration_invalid``).
    - ``retry_base_seconds``, ``retry_max_seconds``, ``retry_jitter``: a failed
      attempt is retried after ``min(retry_max, retry_base * 2**(attempt-1))``
      seconds, plus up to ``retry_jitter`` x that at random. Durations in
      [0, 1 day]; a base above the maximum, or a jitter outside [0, 1], is
      ``retry_invalid``. The report's retries use no jitter.
    - ``throttle_base_seconds``, ``throttle_max_seconds``: when an evaluator's
      ``Throttled`` gives no ``retry_after``, the item is due again after
      ``min(throttle_max, throttle_base * 2**throttles)`` seconds, plus up to
      half that at random (``retry_invalid`` as for retries). A
      ``retry_after`` is honoured as given, plus up to a tenth at random.
    - ``adaptive_concurrency``: treat ``concurrency`` as a ceiling: a throttle
      halves the lanes that may claim (never below one), a run of successes
      adds one back.
    - ``batching``: with more than one lane, the lanes share batched claims (one
      statement leases as many items as lanes are free) and group-committed
      completions (many per transaction); off: one claim and one commit a case.
    - ``heartbeat_seconds``: how often a case's lease is renewed in the
      background (``None``: a third of the lease; the report's always is).
    - ``operation_guard``: called with the lease's length before every
      renewal; raising stops the worker (``operation_guard_failed``).
    - ``outage``: how long database faults are ridden out
      (:class:`~benchledger.faults.OutagePolicy`; ``None``: five minutes).
    - ``poll_seconds``: the longest idle wait between looks at the campaign.
    - ``concurrency``: cases in flight at once, 1 to :data:`MAX_CONCURRENCY`.
    - ``max_cases``: at most this many claims in one run (``None``: no bound).
    - ``finalize_report``: whether this worker finalizes the report.
    - ``until_finished``: keep going until the campaign is finished, rather
      than stopping when nothing is due.

    The field names are the keyword arguments of ``Worker`` and ``AsyncWorker``.
    """

    lease_seconds: float = attrs.field(default=300.0, validator=_duration)
    retry_base_seconds: float = attrs.field(default=5.0, validator=_delay)
    retry_max_seconds: float = attrs.field(default=3600.0, validator=_retry_max)
    retry_jitter: float = attrs.field(default=0.0, validator=_jitter)
    throttle_base_seconds: float = attrs.field(default=1.0, validator=_delay)
    throttle_max_seconds: float = attrs.field(default=60.0, validator=_throttle_max)
    adaptive_concurrency: bool = attrs.field(default=True, validator=_flag)
    batching: bool = attrs.field(default=True, validator=_flag)
    heartbeat_seconds: float | None = attrs.field(default=None, validator=_optional_duration)
    operation_guard: OperationGuard | None = attrs.field(default=None, validator=_guard)
    outage: OutagePolicy | None = attrs.field(default=None, validator=_outage)
    poll_seconds: float = attrs.field(default=1.0, validator=_duration)
    concurrency: int = attrs.field(default=1, validator=_concurrency)
    max_cases: int | None = attrs.field(default=None, validator=_max_cases)
    finalize_report: bool = attrs.field(default=True, validator=_flag)
    until_finished: bool = attrs.field(default=False, validator=_flag)

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between a case's background renewals."""
        if self.heartbeat_seconds is None:
            return float(self.lease_seconds) / 3
        return float(self.heartbeat_seconds)


#: Every option's default (the defaults of ``Worker``, ``AsyncWorker`` and ``campaign work``).
DEFAULTS: Final = WorkerOptions()
