"""A worker process's own Prometheus metrics: cases, outcomes, durations, lanes, outages.

:class:`WorkerMetrics` keeps them on a registry of its own (never the
process-wide default one), so a process may hold several and a test reads
exactly one. It is fed from two places:

- :meth:`WorkerMetrics.metered` wraps an evaluator (a ``def`` one stays a
  ``def``, an ``async def`` one stays ``async def``): every call is one case
  run, timed into the duration histogram, counted in flight while it runs,
  and counted by how it ended (a result, or an error with its code);
- :meth:`WorkerMetrics.count_outage_retries` counts the database-fault retries
  the workers log on the ``benchledger.faults`` logger (one warning per retry,
  :class:`~benchledger.faults.Outage`).

:func:`serve_worker_metrics` serves the registry with prometheus_client's own
HTTP server on a port (``campaign work --metrics-port``: worker process ``i``
on port + ``i``, through :mod:`benchledger.workers.metered`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final
from wsgiref.simple_server import WSGIServer

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import start_http_server

from benchledger.domain import campaign as dom
from benchledger.errors import LedgerError

#: The logger whose warnings say a call met a database fault and will be retried.
FAULTS_LOGGER: Final = "benchledger.faults"
#: How those warnings begin (:meth:`benchledger.faults.Outage.failed`).
RETRY_MESSAGE: Final = "database fault during "
#: Upper bounds (seconds) of the case-duration histogram's buckets.
DURATION_BUCKETS: Final = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
#: The ``outcome`` label: the evaluator returned a result, or raised.
RESULT, ERROR = "result", "error"


def error_code(error: BaseException) -> str:
    """The code an evaluation error carries: a ledger error's own code (a
    ``DependencyFailed``'s, as the evaluator raised it), else ``benchmark.campaign.unexpected``."""
    return error.code if isinstance(error, LedgerError) else dom.UNEXPECTED


class _RetryCounter(logging.Handler):
    """Counts the outage's retry warnings into a counter."""

    def __init__(self, counter: Counter) -> None:
        super().__init__(logging.WARNING)
        self.counter = counter

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(RETRY_MESSAGE):
            self.counter.inc()


class WorkerMetrics:
    """One worker process's counters, histogram and gauge, on their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.cases = Counter(
            "benchledger_worker_cases",
            "Cases this worker process ran (the evaluator returned or raised).",
            registry=self.registry,
        )
        self.outcomes = Counter(
            "benchledger_worker_outcomes",
            "Cases by how the evaluation ended: outcome=result, or outcome=error with its code.",
            ["outcome", "code"],
            registry=self.registry,
        )
        self.outage_retries = Counter(
            "benchledger_worker_outage_retries",
            "Database calls retried after a transient fault (an outage, a restart, a lock).",
            registry=self.registry,
        )
        self.durations = Histogram(
            "benchledger_worker_case_duration_seconds",
            "Seconds each evaluation took.",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.lanes = Gauge(
            "benchledger_worker_lanes_in_flight",
            "Cases being evaluated right now (at most the worker's concurrency).",
            registry=self.registry,
        )

    def finished(self, seconds: float, error: BaseException | None) -> None:
        """Record one case run: its duration and how it ended (``None``: a result)."""
        self.cases.inc()
        self.durations.observe(max(0.0, seconds))
        if error is None:
            self.outcomes.labels(RESULT, "").inc()
        else:
            self.outcomes.labels(ERROR, error_code(error)).inc()

    @contextlib.contextmanager
    def case(self) -> Iterator[None]:
        """One case in flight: counted in the lanes while it runs, then :meth:`finished`."""
        self.lanes.inc()
        started = time.perf_counter()
        try:
            yield
        except BaseException as error:
            self.finished(time.perf_counter() - started, error)
            raise
        else:
            self.finished(time.perf_counter() - started, None)
        finally:
            self.lanes.dec()

    def metered(self, evaluate: Callable[..., Any]) -> Callable[..., Any]:
        """``evaluate``, measured case by case (``async def`` if it is)."""
        call = getattr(evaluate, "__call__", None)  # noqa: B004 - an async __call__, too
        if inspect.iscoroutinefunction(evaluate) or inspect.iscoroutinefunction(call):
            run: Callable[..., Awaitable[Any]] = evaluate

            @functools.wraps(evaluate)
            async def evaluate_async(claim: Any, heartbeat: Any) -> Any:
                with self.case():
                    return await run(claim, heartbeat)

            return evaluate_async

        @functools.wraps(evaluate)
        def evaluate_sync(claim: Any, heartbeat: Any) -> Any:
            with self.case():
                return evaluate(claim, heartbeat)

        return evaluate_sync

    def count_outage_retries(self, logger: str = FAULTS_LOGGER) -> logging.Handler:
        """Count the retry warnings of ``logger`` from now on; returns the handler (to
        remove it with ``logging.getLogger(logger).removeHandler``)."""
        handler = _RetryCounter(self.outage_retries)
        logging.getLogger(logger).addHandler(handler)
        return handler

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (what the port serves)."""
        return generate_latest(self.registry)


@attrs.frozen
class MetricsServer:
    """prometheus_client's HTTP server of one :class:`WorkerMetrics` (a daemon thread)."""

    server: WSGIServer
    thread: threading.Thread
    host: str
    port: int

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_worker_metrics(
    port: int, metrics: WorkerMetrics, *, host: str = "127.0.0.1"
) -> MetricsServer:
    """Serve ``metrics`` on ``host:port`` (``/metrics``, or any path) until the process
    ends; ``OSError`` when the port is taken."""
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsServer(server, thread, host, int(server.server_port))
