"""An evaluator that calls a model over HTTP: throttling, errors and cost, the right way.

It asks the model at ``BENCHLEDGER_MODEL_URL`` (``POST /v1/complete``, the API
of :class:`benchledger.testing.ModelServer`) to translate each case, and maps
the answers the way docs/evaluating-model-apis.md explains:

- 429 -> :class:`~benchledger.errors.Throttled` with the server's
  ``Retry-After``: the item goes back to the queue, due after it, and no
  attempt is spent;
- 5xx, timeouts, refused connections -> a retryable
  :class:`~benchledger.errors.DependencyFailed` (``api.http_500``,
  ``api.timeout``, ``api.unreachable``): an attempt is spent, retried with backoff;
- other 4xx -> a non-retryable ``DependencyFailed`` (``api.http_4xx``);
- 200 -> the result, returned as an :class:`~benchledger.Outcome` with the
  tokens the model reports as ``cost_units`` (a limit group's cost budget
  counts them).

``evaluate`` is a plain ``def`` (run on a worker's thread lanes);
``evaluate_async`` the same with ``httpx.AsyncClient`` (for ``AsyncWorker``).
Needs httpx (``pip install httpx``). ``BENCHLEDGER_MODEL_KEY`` is the API key
sent (default ``benchledger``).
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from benchledger.domain.campaign_results import ClaimedCase, Outcome
from benchledger.errors import DependencyFailed, Throttled

URL_ENV = "BENCHLEDGER_MODEL_URL"
KEY_ENV = "BENCHLEDGER_MODEL_KEY"
TIMEOUT_SECONDS = 30.0

_clients: dict[str, httpx.Client] = {}
_clients_lock = threading.Lock()


def _endpoint() -> tuple[str, dict[str, str]]:
    base = os.environ.get(URL_ENV)
    if not base:
        raise DependencyFailed("api.not_configured", retryable=False, message=f"set {URL_ENV}")
    key = os.environ.get(KEY_ENV, "benchledger")
    return base.rstrip("/") + "/v1/complete", {"authorization": f"Bearer {key}"}


def _client(base: str) -> httpx.Client:
    """One connection pool per process (httpx clients are thread-safe)."""
    with _clients_lock:
        client = _clients.get(base)
        if client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            client = _clients[base] = httpx.Client(timeout=TIMEOUT_SECONDS, limits=limits)
        return client


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` of a response, in seconds (``None``: absent or a date)."""
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _request(claim: ClaimedCase) -> dict[str, Any]:
    job = claim.job_payload
    return {"prompt": str(job["source"]["text"]), "model": str(job["candidate"]["model_id"])}


def _answer(claim: ClaimedCase, response: httpx.Response) -> Outcome:
    """The evaluator's outcome of one HTTP answer (or the exception it raises)."""
    status = response.status_code
    if status == 429:
        raise Throttled(retry_after(response), code="api.http_429")
    if status >= 500:
        raise DependencyFailed(f"api.http_{status}", retryable=True)
    if status != 200:
        raise DependencyFailed(f"api.http_{status}", retryable=False)
    body = response.json()
    output = str(body.get("output", ""))
    job = claim.job_payload
    digest = hashlib.sha256(output.encode("utf-8")).hexdigest()
    score = round(int(digest[:8], 16) / 0xFFFFFFFF, 4)
    result = {
        "target_locale": claim.target_locale,
        "suite": {"case_key": claim.suite_case_key, "suite_sha256": job["suite_sha256"]},
        "output_sha256": digest,
        "score": score,
    }
    return Outcome(result, cost_units=int(body.get("tokens", 0)))


def evaluate(claim: ClaimedCase, heartbeat: Callable[[], None]) -> Outcome:
    """One case: one call to the model (see the module for how answers are mapped)."""
    url, headers = _endpoint()
    try:
        response = _client(url).post(url, json=_request(claim), headers=headers)
    except httpx.TimeoutException:
        raise DependencyFailed("api.timeout", retryable=True) from None
    except httpx.TransportError:
        raise DependencyFailed("api.unreachable", retryable=True) from None
    return _answer(claim, response)


async def evaluate_async(claim: ClaimedCase, heartbeat: Callable[[], Awaitable[None]]) -> Outcome:
    """``evaluate`` with ``httpx.AsyncClient`` (one client per call keeps it loop-safe)."""
    url, headers = _endpoint()
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS) as client:
            response = await client.post(url, json=_request(claim), headers=headers)
    except httpx.TimeoutException:
        raise DependencyFailed("api.timeout", retryable=True) from None
    except httpx.TransportError:
        raise DependencyFailed("api.unreachable", retryable=True) from None
    return _answer(claim, response)
