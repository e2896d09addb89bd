"""The model server over real HTTP: answers, quotas, concurrency, faults, stats, the CLI."""

from __future__ import annotations

import math
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from benchledger.testing import ModelServer, ModelServerStats
from benchledger.testing.model_server import KeyStats, _Handler, _HTTPServer


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0, limits=httpx.Limits(max_connections=50)) as c:
        yield c


def complete(
    client: httpx.Client, server: ModelServer, prompt: str = "hi", key: str | None = "k"
) -> httpx.Response:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return client.post(f"{server.url}/v1/complete", json={"prompt": prompt}, headers=headers)


def concurrently(n: int, call: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    """``call(i)`` for i in range(n), all released at once from n threads."""
    barrier = threading.Barrier(n)
    replies: list[httpx.Response | None] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        replies[i] = call(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=15)
    assert all(r is not None for r in replies)
    return [r for r in replies if r is not None]


def test_answers_200_with_deterministic_output(client: httpx.Client) -> None:
    with ModelServer() as server:
        assert server.url.startswith("http://127.0.0.1:")
        reply = client.post(
            f"{server.url}/v1/complete",
            json={"prompt": "What is 2+2?", "model": "m-7"},
            headers={"Authorization": "Bearer team-a"},
        )
        again = complete(client, server, "What is 2+2?")
        assert client.get(f"{server.url}/healthz").status_code == 200
        stats = server.stats()
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {"output": "echo: What is 2+2?", "tokens": 4, "model": "m-7"}
    assert again.json()["output"] == "echo: What is 2+2?"
    assert again.json()["model"] == "echo-1"
    assert (stats.requests, stats.answered, stats.throttled) == (2, 2, 0)
    assert stats.per_key["team-a"] == KeyStats(requests=1, answered=1, throttled=0, max_in_flight=1)


def test_sixth_request_in_the_window_is_throttled_until_the_oldest_leaves(
    client: httpx.Client,
) -> None:
    with ModelServer(per_minute=5) as server:
        before_first = time.monotonic()
        statuses = [complete(client, server).status_code]
        after_first = time.monotonic()
        time.sleep(1.1)
        statuses += [complete(client, server).status_code for _ in range(4)]
        before_sixth = time.monotonic()
        throttled = complete(client, server)
        after_sixth = time.monotonic()
        stats = server.stats()
    assert statuses == [200] * 5
    assert throttled.status_code == 429
    retry_after = int(throttled.headers["Retry-After"])
    # The first admission leaves the window 60 s after it was made: the 6th was
    # refused between (before_sixth - after_first) and (after_sixth - before_first)
    # seconds after it, so at least 1.1 s less than a minute before the slot frees.
    assert 1 <= retry_after <= 60
    assert math.ceil(60 - (after_sixth - before_first)) <= retry_after
    assert retry_after <= math.ceil(60 - (before_sixth - after_first)) <= 59
    assert throttled.json() == {"error": "rate_limited", "retry_after": retry_after}
    assert (stats.requests, stats.answered, stats.throttled) == (6, 5, 1)
    assert stats.over_quota_admitted == 0


def test_the_quota_comes_back_when_the_window_slides(client: httpx.Client) -> None:
    with ModelServer(per_minute=2, window_seconds=0.6) as server:
        assert [complete(client, server).status_code for _ in range(3)] == [200, 200, 429]
        time.sleep(0.7)
        assert [complete(client, server).status_code for _ in range(3)] == [200, 200, 429]
        assert server.stats().over_quota_admitted == 0


def test_a_throttled_request_does_not_consume_quota(client: httpx.Client) -> None:
    with ModelServer(per_minute=2, window_seconds=1.0) as server:
        assert [complete(client, server).status_code for _ in range(2)] == [200, 200]
        time.sleep(0.5)
        # Had these counted, the window would stay full until about 1.5 s.
        assert [complete(client, server).status_code for _ in range(4)] == [429] * 4
        time.sleep(0.6)
        assert complete(client, server).status_code == 200
        stats = server.stats()
    assert (stats.answered, stats.throttled, stats.over_quota_admitted) == (3, 4, 0)


def test_reset_zeroes_the_counters_and_by_default_the_quotas(client: httpx.Client) -> None:
    with ModelServer(per_minute=2) as server:
        assert [complete(client, server).status_code for _ in range(3)] == [200, 200, 429]
        server.reset(quotas=False)
        assert server.stats() == ModelServerStats()
        assert complete(client, server).status_code == 429  # the window remembers
        assert server.stats().throttled == 1
        server.reset()
        assert server.stats() == ModelServerStats()
        assert [complete(client, server).status_code for _ in range(3)] == [200, 200, 429]
        stats = server.stats()
    assert (stats.requests, stats.answered, stats.throttled) == (3, 2, 1)


def test_max_concurrent_refuses_the_excess_with_retry_after_1(client: httpx.Client) -> None:
    with ModelServer(max_concurrent=2, latency_seconds=0.8) as server:
        replies = concurrently(6, lambda i: complete(client, server, f"p{i}"))
        stats = server.stats()
    statuses = sorted(r.status_code for r in replies)
    assert statuses == [200, 200, 429, 429, 429, 429]
    assert {r.headers["Retry-After"] for r in replies if r.status_code == 429} == {"1"}
    assert stats.max_in_flight <= 2
    assert stats.per_key["k"].max_in_flight <= 2
    assert (stats.answered, stats.throttled) == (2, 4)


def test_max_in_flight_counts_concurrent_requests(client: httpx.Client) -> None:
    with ModelServer(latency_seconds=0.3) as server:
        replies = concurrently(8, lambda i: complete(client, server, key=f"k{i % 2}"))
        stats = server.stats()
    assert [r.status_code for r in replies] == [200] * 8
    assert 2 <= stats.max_in_flight <= 8
    assert stats.per_key["k0"].max_in_flight <= 4
    assert stats.per_key["k0"].requests == stats.per_key["k1"].requests == 4


def test_a_client_side_cap_shows_as_max_in_flight(client: httpx.Client) -> None:
    cap = threading.Semaphore(3)

    def capped(i: int) -> httpx.Response:
        with cap:
            return complete(client, server, f"p{i}")

    with ModelServer(latency_seconds=0.05) as server:
        replies = concurrently(12, capped)
        stats = server.stats()
    assert [r.status_code for r in replies] == [200] * 12
    assert 2 <= stats.max_in_flight <= 3


def test_error_rate_1_answers_500_to_every_admitted_request(client: httpx.Client) -> None:
    with ModelServer(error_rate=1.0) as server:
        replies = [complete(client, server) for _ in range(5)]
        stats = server.stats()
    assert [r.status_code for r in replies] == [500] * 5
    assert replies[0].json() == {"error": "internal"}
    assert (stats.requests, stats.errors, stats.answered) == (5, 5, 0)


def test_timeout_rate_1_holds_then_answers_504(client: httpx.Client) -> None:
    with ModelServer(timeout_rate=1.0, timeout_seconds=0.2) as server:
        started = time.monotonic()
        reply = complete(client, server)
        held = time.monotonic() - started
        stats = server.stats()
    assert reply.status_code == 504
    assert reply.json() == {"error": "timeout"}
    assert held >= 0.2
    assert (stats.timeouts, stats.answered, stats.errors) == (1, 0, 0)


def test_the_same_seed_gives_the_same_sequence_of_outcomes(client: httpx.Client) -> None:
    def statuses(seed: int) -> list[int]:
        with ModelServer(error_rate=0.3, seed=seed, latency_jitter=0.001) as server:
            return [complete(client, server, f"p{i}").status_code for i in range(50)]

    first, second, other = statuses(7), statuses(7), statuses(8)
    assert first == second
    assert set(first) == {200, 500}
    assert other != first


def test_stats_endpoint_answers_what_stats_returns(client: httpx.Client) -> None:
    with ModelServer(per_minute=2) as server:
        for key in ("a", "a", "a", "b"):
            complete(client, server, key=key)
        client.post(f"{server.url}/v1/complete", content=b"{not json")
        answer = client.get(f"{server.url}/v1/stats")
        stats = server.stats()
    assert answer.status_code == 200
    assert answer.json() == stats.to_json()
    assert ModelServerStats.from_json(answer.json()) == stats
    assert stats.per_key["a"] == KeyStats(requests=3, answered=2, throttled=1, max_in_flight=1)
    assert (stats.requests, stats.bad_requests) == (5, 1)


def test_quotas_are_per_key(client: httpx.Client) -> None:
    with ModelServer(per_minute=2) as server:
        url = f"{server.url}/v1/complete"
        a = [complete(client, server, key="a").status_code for _ in range(3)]
        b = [
            client.post(url, json={"prompt": "x"}, headers={"X-Api-Key": "b"}).status_code
            for _ in range(3)
        ]
        anonymous = [complete(client, server, key=None).status_code for _ in range(3)]
        stats = server.stats()
    assert a == b == anonymous == [200, 200, 429]
    assert set(stats.per_key) == {"a", "b", "anonymous"}
    assert all(s.answered == 2 and s.throttled == 1 for s in stats.per_key.values())


def test_malformed_bodies_and_unknown_paths_are_refused_without_using_quota(
    client: httpx.Client,
) -> None:
    with ModelServer(per_minute=1) as server:
        url = f"{server.url}/v1/complete"
        not_json = client.post(url, content=b"{nope")
        no_prompt = client.post(url, json={"model": "m"})
        not_object = client.post(url, json=["hi"])
        unknown = client.post(f"{server.url}/v2/complete", json={"prompt": "hi"})
        wrong_method = client.get(url)
        admitted = complete(client, server, key=None)
    assert [not_json.status_code, no_prompt.status_code, not_object.status_code] == [400] * 3
    assert not_json.json()["error"] == "bad_request"
    assert unknown.status_code == 404 and unknown.json()["error"] == "not_found"
    assert wrong_method.status_code == 405
    assert admitted.status_code == 200


def test_python_m_serves_until_terminated(client: httpx.Client) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "benchledger.testing.model_server", "--per-minute", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=15), "no URL printed within 15 s"
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert client.get(f"{url}/healthz").status_code == 200
        assert client.post(f"{url}/v1/complete", json={"prompt": "x"}).status_code == 200
        assert client.get(f"{url}/v1/stats").json()["answered"] == 1
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0
    assert stderr == ""


def test_a_burst_of_connections_queues_while_the_server_is_busy() -> None:
    # A fleet's lanes connect at once; on a busy machine the server accepts them late.
    # The listen backlog holds them meanwhile (socketserver's default of 5 did not:
    # the kernel dropped the rest, and their attempts failed as `api.unreachable`).
    httpd = _HTTPServer(("127.0.0.1", 0), _Handler)  # listening, not yet accepting
    sockets: list[socket.socket] = []
    try:
        for _ in range(128):
            sockets.append(socket.create_connection(httpd.server_address[:2], timeout=0.5))
        assert len(sockets) == 128
    finally:
        for sock in sockets:
            sock.close()
        httpd.server_close()
