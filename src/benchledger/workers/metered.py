"""The evaluator ``campaign work --metrics-port`` hands its worker processes: the user's
evaluator, measured by a :class:`~benchledger.workers.metrics.WorkerMetrics` that
each worker process serves on a port of its own.

``campaign work`` names :data:`EVALUATOR` as the pool's evaluator and puts the
user's evaluator (``module:function``), the first port and the address in the
environment (:data:`EVALUATOR_ENV`, :data:`PORT_ENV`, :data:`HOST_ENV`), which the
worker processes inherit. Looking ``evaluate`` up here (as the pool does, by
name) imports the user's evaluator and wraps it (``async def`` stays ``async
def``). In worker process ``i`` of the pool (named ``benchledger-worker-<i>``)
it also serves the metrics on port + ``i`` and counts the outage retries; in
any other process (the pool's parent checks the evaluator) it serves nothing.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import threading
from typing import Any, Final

from benchledger.workers.metrics import WorkerMetrics, serve_worker_metrics

#: The name ``campaign work`` gives the pool instead of the user's evaluator.
EVALUATOR: Final = "benchledger.workers.metered:evaluate"
EVALUATOR_ENV: Final = "BENCHLEDGER_METERED_EVALUATOR"
PORT_ENV: Final = "BENCHLEDGER_WORKER_METRICS_PORT"
HOST_ENV: Final = "BENCHLEDGER_WORKER_METRICS_HOST"
#: The pool's worker processes' names (``workpool.run_pool``): the index is the port's offset.
_WORKER_NAME: Final = re.compile(r"benchledger-worker-(\d+)")

_lock = threading.Lock()
_evaluate: Any = None


def _target(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def worker_index() -> int | None:
    """This process's index in the pool, or ``None`` outside a pool's worker."""
    found = _WORKER_NAME.fullmatch(multiprocessing.current_process().name)
    return None if found is None else int(found.group(1))


def _metered() -> Any:
    metrics = WorkerMetrics()
    evaluate = metrics.metered(_target(os.environ[EVALUATOR_ENV]))
    index = worker_index()
    if index is not None:
        serve_worker_metrics(
            int(os.environ[PORT_ENV]) + index,
            metrics,
            host=os.environ.get(HOST_ENV, "127.0.0.1"),
        )
        metrics.count_outage_retries()
    return evaluate


def __getattr__(name: str) -> Any:
    """``evaluate``: the user's evaluator, measured (made once per process)."""
    global _evaluate
    if name != "evaluate":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        if _evaluate is None:
            _evaluate = _metered()
        return _evaluate
