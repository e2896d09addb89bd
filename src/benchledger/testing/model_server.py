"""A small HTTP model server that throttles, fails and times out on purpose.

Most evaluators call a model served elsewhere over HTTP, and such a model
answers 429 with ``Retry-After`` when a key exceeds its quota, 500 now and then,
and sometimes nothing until the client gives up. :class:`ModelServer` is a real
server (stdlib only: a ``ThreadingHTTPServer`` in a background thread) that does
all of that on demand, so a test can prove how its client behaves against it:

    with ModelServer(per_minute=600, max_concurrent=20, latency_seconds=0.05) as server:
        with httpx.Client(base_url=server.url) as client:
            reply = client.post("/v1/complete", json={"prompt": "2+2?"},
                                headers={"Authorization": "Bearer team-a"})
        assert reply.status_code == 200 and reply.json()["output"] == "echo: 2+2?"
        assert server.stats().over_quota_admitted == 0

The protocol: ``POST /v1/complete`` with JSON ``{"prompt": str, "model": str}``
(``model`` optional) and the key in ``Authorization: Bearer KEY`` or
``X-Api-Key: KEY`` (no key is the key ``"anonymous"``). Answers, in the order
they are decided:

- 400 ``{"error": "bad_request", ...}`` for a body that is not that JSON object
  (it uses no quota);
- 429 ``{"error": "rate_limited", "retry_after": N}`` with ``Retry-After: N``
  when the key already had ``per_minute`` requests admitted in the last
  ``window_seconds`` (60): N is when the oldest of them leaves the window, whole
  seconds rounded up, at least 1;
- 429 with ``Retry-After: 1`` when the key already has ``max_concurrent``
  requests being served;
- otherwise the request is admitted (it counts against the quota) and, by one
  draw from ``random.Random(seed)``, answers 500 ``{"error": "internal"}``
  (``error_rate``), or is held ``timeout_seconds`` and answered 504
  ``{"error": "timeout"}`` (``timeout_rate``), or answers 200
  ``{"output": "echo: PROMPT", "tokens": len(PROMPT) // 4 + 1, "model": MODEL}``;
  200s and 500s come after ``latency_seconds`` plus a uniform draw from
  ``[0, latency_jitter]``.

``GET /v1/stats`` answers :meth:`ModelServer.stats` as JSON
(:meth:`ModelServerStats.from_json` reads it back), so a process other than the
one that started the server can check it; ``GET /healthz`` answers 200. Run one
in the foreground with ``python -m benchledger.testing.model_server --port 8080
--per-minute 600 --latency 0.1 --error-rate 0.01`` (it prints its URL, then
serves until Ctrl-C).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, MappingProxyType, TracebackType
from typing import Any, cast

__all__ = ["KeyStats", "ModelServer", "ModelServerStats"]

ANONYMOUS = "anonymous"
DEFAULT_MODEL = "echo-1"
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class KeyStats:
    """The counters of one API key (see :class:`ModelServerStats`)."""

    requests: int = 0
    answered: int = 0
    throttled: int = 0
    max_in_flight: int = 0


@dataclass(frozen=True)
class ModelServerStats:
    """A snapshot of a :class:`ModelServer`'s counters since it started or was reset.

    ``requests`` counts every ``POST /v1/complete`` (whatever it was answered);
    ``answered`` the 200s, ``throttled`` the 429s, ``errors`` the 500s,
    ``timeouts`` the requests held ``timeout_seconds`` and answered 504, and
    ``bad_requests`` the bodies refused (400, 411, 413). ``max_in_flight`` is the most admitted
    requests being served at one instant over all keys (a request stops being in
    flight just before its answer is written, so a client that waits for an
    answer before sending its next request never appears to overlap itself);
    a client-side cap of C shows as ``max_in_flight <= C``.
    ``over_quota_admitted`` is the limiter's self-check: the 200s answered to a
    request whose admission left more than ``per_minute`` admissions in its key's
    window. It must stay 0.
    """

    requests: int = 0
    answered: int = 0
    throttled: int = 0
    errors: int = 0
    timeouts: int = 0
    max_in_flight: int = 0
    over_quota_admitted: int = 0
    bad_requests: int = 0
    per_key: Mapping[str, KeyStats] = field(default_factory=lambda: MappingProxyType({}))

    def to_json(self) -> dict[str, Any]:
        """This snapshot as plain JSON values (what ``GET /v1/stats`` answers)."""
        return {
            "requests": self.requests,
            "answered": self.answered,
            "throttled": self.throttled,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "max_in_flight": self.max_in_flight,
            "over_quota_admitted": self.over_quota_admitted,
            "bad_requests": self.bad_requests,
            "per_key": {
                key: {
                    "requests": s.requests,
                    "answered": s.answered,
                    "throttled": s.throttled,
                    "max_in_flight": s.max_in_flight,
                }
                for key, s in sorted(self.per_key.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelServerStats:
        """The snapshot :meth:`to_json` (or ``GET /v1/stats``) wrote."""
        per_key = {key: KeyStats(**counters) for key, counters in data["per_key"].items()}
        return cls(
            **{name: int(value) for name, value in data.items() if name != "per_key"},
            per_key=MappingProxyType(per_key),
        )


class _Counters:
    """The mutable counters behind a snapshot; guarded by the server's lock."""

    def __init__(self, in_flight: int) -> None:
        self.requests = 0
        self.answered = 0
        self.throttled = 0
        self.errors = 0
        self.timeouts = 0
        self.bad_requests = 0
        self.over_quota_admitted = 0
        self.max_in_flight = in_flight
        self.per_key: dict[str, _KeyCounters] = {}


class _KeyCounters:
    def __init__(self, in_flight: int) -> None:
        self.requests = 0
        self.answered = 0
        self.throttled = 0
        self.max_in_flight = in_flight


@dataclass(frozen=True)
class _Reply:
    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Admission:
    """What the lock decided for one request: an answer now, or a hold then an outcome."""

    generation: int
    reply: _Reply | None = None
    outcome: str = ""  # "ok", "error" or "timeout" when admitted
    hold_seconds: float = 0.0
    over_quota: bool = False


class ModelServer:
    """A throttling, failing, slow HTTP model server for tests (see the module docstring).

    ``per_minute`` (per key, sliding window of ``window_seconds``) and
    ``max_concurrent`` (per key) are off when None. ``error_rate`` and
    ``timeout_rate`` are fractions of the admitted requests (their sum at most
    1). ``seed`` makes the sequence of outcomes reproducible (the latency jitter
    is drawn from a second generator, so it does not shift that sequence).
    ``port=0`` takes a free port; :attr:`url` says which once started.
    """

    def __init__(
        self,
        *,
        per_minute: int | None = None,
        max_concurrent: int | None = None,
        latency_seconds: float = 0.0,
        latency_jitter: float = 0.0,
        error_rate: float = 0.0,
        timeout_rate: float = 0.0,
        timeout_seconds: float = 5.0,
        seed: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        window_seconds: float = 60.0,
    ) -> None:
        if per_minute is not None and per_minute < 1:
            raise ValueError(f"per_minute must be at least 1 (or None), not {per_minute}")
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1 (or None), not {max_concurrent}")
        if latency_seconds < 0 or latency_jitter < 0 or timeout_seconds < 0:
            raise ValueError("latency_seconds, latency_jitter and timeout_seconds must be >= 0")
        if not (0.0 <= error_rate <= 1.0 and 0.0 <= timeout_rate <= 1.0):
            raise ValueError("error_rate and timeout_rate must be within [0, 1]")
        if error_rate + timeout_rate > 1.0:
            raise ValueError("error_rate + timeout_rate must be at most 1")
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be positive, not {window_seconds}")
        self.per_minute = per_minute
        self.max_concurrent = max_concurrent
        self.latency_seconds = latency_seconds
        self.latency_jitter = latency_jitter
        self.error_rate = error_rate
        self.timeout_rate = timeout_rate
        self.timeout_seconds = timeout_seconds
        self.seed = seed
        self.host = host
        self.port = port
        self.window_seconds = window_seconds

        self._lock = threading.Lock()
        self._outcomes = random.Random(seed)
        self._jitter = random.Random(None if seed is None else f"{seed}/jitter")
        self._windows: dict[str, collections.deque[float]] = {}
        self._in_flight: dict[str, int] = {}
        self._in_flight_total = 0
        self._generation = 0
        self._counters = _Counters(0)
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        if self._httpd is None:
            raise RuntimeError("the model server is not started")
        host, port = self._httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self) -> ModelServer:
        """Bind and serve in a background (daemon) thread; returns self."""
        if self._httpd is not None or self._stopping.is_set():
            raise RuntimeError("a ModelServer starts once")
        httpd = _HTTPServer((self.host, self.port), _Handler)
        httpd.model = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"model-server-{self.url}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Held requests wake and answer 503."""
        self._stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ModelServer:
        return self.start() if self._httpd is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- counters ----------------------------------------------------------------

    def stats(self) -> ModelServerStats:
        """A snapshot of the counters."""
        with self._lock:
            c = self._counters
            per_key = {
                key: KeyStats(k.requests, k.answered, k.throttled, k.max_in_flight)
                for key, k in c.per_key.items()
            }
            return ModelServerStats(
                requests=c.requests,
                answered=c.answered,
                throttled=c.throttled,
                errors=c.errors,
                timeouts=c.timeouts,
                max_in_flight=c.max_in_flight,
                over_quota_admitted=c.over_quota_admitted,
                bad_requests=c.bad_requests,
                per_key=MappingProxyType(per_key),
            )

    def reset(self, *, quotas: bool = True) -> None:
        """Zero the counters; with ``quotas`` (the default) also empty every key's
        window, so the server behaves as if just started (``quotas=False`` keeps
        them, to measure one phase of a test against quotas already used).

        Requests in flight keep counting as in flight (``max_in_flight`` restarts
        from how many there are), but their outcomes are no longer counted.
        """
        with self._lock:
            self._generation += 1
            self._counters = _Counters(self._in_flight_total)
            if quotas:
                self._windows.clear()

    # -- the decisions (called by the handler threads) ---------------------------

    def _key_counters(self, key: str) -> _KeyCounters:
        counters = self._counters.per_key.get(key)
        if counters is None:
            counters = self._counters.per_key[key] = _KeyCounters(self._in_flight.get(key, 0))
        return counters

    def _bad_request(self, key: str) -> None:
        with self._lock:
            self._counters.requests += 1
            self._counters.bad_requests += 1
            self._key_counters(key).requests += 1

    def _admit(self, key: str) -> _Admission:
        with self._lock:
            now = time.monotonic()
            counters = self._counters
            key_counters = self._key_counters(key)
            counters.requests += 1
            key_counters.requests += 1
            window = self._windows.setdefault(key, collections.deque())
            while window and window[0] <= now - self.window_seconds:
                window.popleft()
            retry_after: int | None = None
            if self.per_minute is not None and len(window) >= self.per_minute:
                retry_after = max(1, math.ceil(window[0] + self.window_seconds - now))
            elif (
                self.max_concurrent is not None
                and self._in_flight.get(key, 0) >= self.max_concurrent
            ):
                retry_after = 1
            if retry_after is not None:
                counters.throttled += 1
                key_counters.throttled += 1
                reply = _Reply(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    {"error": "rate_limited", "retry_after": retry_after},
                    (("Retry-After", str(retry_after)),),
                )
                return _Admission(self._generation, reply=reply)

            window.append(now)
            over_quota = self.per_minute is not None and len(window) > self.per_minute
            self._in_flight[key] = in_flight = self._in_flight.get(key, 0) + 1
            self._in_flight_total += 1
            counters.max_in_flight = max(counters.max_in_flight, self._in_flight_total)
            key_counters.max_in_flight = max(key_counters.max_in_flight, in_flight)

            draw = self._outcomes.random()
            if draw < self.error_rate:
                outcome = "error"
            elif draw < self.error_rate + self.timeout_rate:
                outcome = "timeout"
            else:
                outcome = "ok"
            if outcome == "timeout":
                hold = self.timeout_seconds
            else:
                hold = self.latency_seconds
                if self.latency_jitter:
                    hold += self._jitter.uniform(0.0, self.latency_jitter)
            return _Admission(
                self._generation, outcome=outcome, hold_seconds=hold, over_quota=over_quota
            )

    def _finish(self, key: str, admission: _Admission, stopped: bool) -> None:
        """Leave the in-flight counts and count the outcome (before it is written)."""
        with self._lock:
            self._in_flight[key] -= 1
            if not self._in_flight[key]:
                del self._in_flight[key]
            self._in_flight_total -= 1
            if stopped or admission.generation != self._generation:
                return
            counters = self._counters
            if admission.outcome == "ok":
                counters.answered += 1
                self._key_counters(key).answered += 1
                if admission.over_quota:
                    counters.over_quota_admitted += 1
            elif admission.outcome == "error":
                counters.errors += 1
            else:
                counters.timeouts += 1

    def _complete(self, key: str, payload: Mapping[str, Any]) -> _Reply:
        admission = self._admit(key)
        if admission.reply is not None:
            return admission.reply
        stopped = admission.hold_seconds > 0 and self._stopping.wait(admission.hold_seconds)
        self._finish(key, admission, stopped)
        if stopped:
            return _Reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "shutting_down"})
        if admission.outcome == "error":
            return _Reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal"})
        if admission.outcome == "timeout":
            return _Reply(HTTPStatus.GATEWAY_TIMEOUT, {"error": "timeout"})
        prompt: str = payload["prompt"]
        return _Reply(
            HTTPStatus.OK,
            {
                "output": f"echo: {prompt}",
                "tokens": len(prompt) // 4 + 1,
                "model": payload.get("model", DEFAULT_MODEL),
            },
        )


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() does not wait for held requests
    # socketserver's listen backlog is 5: a fleet's lanes opening their connections
    # at once overflowed it on a busy machine, and the kernel dropped the others'
    # connection requests (the client saw `api.unreachable`, an attempt spent, where
    # a real server's backlog of hundreds would have queued them).
    request_queue_size = 1024
    model: ModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up is no news
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the servers clients really talk to
    server_version = "benchledger-model-server"
    # Headers and body are two writes: without TCP_NODELAY the body waits ~40 ms
    # for the client's delayed ACK on every keep-alive request.
    disable_nagle_algorithm = True

    @property
    def model(self) -> ModelServer:
        return cast(_HTTPServer, self.server).model

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _key(self) -> str:
        authorization = self.headers.get("Authorization", "").strip()
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        api_key = self.headers.get("X-Api-Key", "").strip()
        return api_key or ANONYMOUS

    def _send(self, reply: _Reply) -> None:
        body = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self) -> bytes | _Reply:
        """The request body, or the refusal to answer (and the connection closed,
        since the rest of the stream cannot be trusted to start a request)."""
        refusal: _Reply | None = None
        if "Transfer-Encoding" in self.headers:
            refusal = _Reply(HTTPStatus.LENGTH_REQUIRED, {"error": "length_required"})
        else:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if length < 0:
                refusal = _Reply(HTTPStatus.BAD_REQUEST, {"error": "bad_content_length"})
            elif length > MAX_BODY_BYTES:
                refusal = _Reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "too_large"})
            else:
                return self.rfile.read(length)
        self.close_connection = True
        return refusal

    def do_GET(self) -> None:
        path = self._path()
        if path == "/healthz":
            self._send(_Reply(HTTPStatus.OK, {"status": "ok"}))
        elif path == "/v1/stats":
            self._send(_Reply(HTTPStatus.OK, self.model.stats().to_json()))
        elif path == "/v1/complete":
            self._send(
                _Reply(
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    {"error": "method_not_allowed"},
                    (("Allow", "POST"),),
                )
            )
        else:
            self._send(_Reply(HTTPStatus.NOT_FOUND, {"error": "not_found", "path": path}))

    def do_POST(self) -> None:
        body = self._read_body()
        path = self._path()
        if path != "/v1/complete":
            self._send(_Reply(HTTPStatus.NOT_FOUND, {"error": "not_found", "path": path}))
            return
        key = self._key()
        if isinstance(body, _Reply):
            self.model._bad_request(key)
            self._send(body)
            return
        payload, problem = _parse(body)
        if problem:
            self.model._bad_request(key)
            self._send(_Reply(HTTPStatus.BAD_REQUEST, {"error": "bad_request", "detail": problem}))
            return
        self._send(self.model._complete(key, payload))


def _parse(body: bytes) -> tuple[dict[str, Any], str]:
    """The request's JSON object and "", or {} and what is wrong with it."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {}, f"the body is not JSON: {exc}"
    if not isinstance(payload, dict):
        return {}, "the body must be a JSON object"
    if not isinstance(payload.get("prompt"), str):
        return {}, '"prompt" must be a string'
    if not isinstance(payload.get("model", DEFAULT_MODEL), str):
        return {}, '"model" must be a string'
    return payload, ""


def main(argv: Sequence[str] | None = None) -> int:
    """Serve in the foreground until Ctrl-C (or SIGTERM); print the URL once."""
    parser = argparse.ArgumentParser(
        prog="python -m benchledger.testing.model_server",
        description="A small HTTP model server that throttles (429), fails (500) and "
        "times out (504) on purpose: POST /v1/complete, GET /v1/stats, GET /healthz.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (the default): a free port")
    parser.add_argument("--per-minute", type=int, default=None, help="requests per key per minute")
    parser.add_argument("--max-concurrent", type=int, default=None, help="in flight per key")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--jitter", type=float, default=0.0, help="plus up to this many seconds")
    parser.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 500")
    parser.add_argument("--timeout-rate", type=float, default=0.0, help="fraction answered 504")
    parser.add_argument("--timeout-seconds", type=float, default=5.0, help="held before a 504")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        server = ModelServer(
            per_minute=args.per_minute,
            max_concurrent=args.max_concurrent,
            latency_seconds=args.latency,
            latency_jitter=args.jitter,
            error_rate=args.error_rate,
            timeout_rate=args.timeout_rate,
            timeout_seconds=args.timeout_seconds,
            seed=args.seed,
            host=args.host,
            port=args.port,
        )
    except ValueError as exc:
        parser.error(str(exc))

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        server.start()
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
