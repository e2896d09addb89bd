"""``benchledger serve`` as a user runs it: a real process, a real port, real refusals."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from benchledger.db import Database

BENCHLEDGER = str(Path(sys.executable).with_name("benchledger"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def url(tmp_path: Path) -> str:
    db = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    db.upgrade()
    db.dispose()
    return db.url


@contextmanager
def serving(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [BENCHLEDGER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_up(base: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            httpx.get(base + "/static/dashboard.css", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("benchledger serve did not start")


def test_serve_binds_loopback_and_serves_the_pages(url: str) -> None:
    port = free_port()
    env = {**os.environ, "BENCHLEDGER_DATABASE_URL": url}
    env.pop("BENCHLEDGER_DASHBOARD_TOKEN", None)
    with serving(["serve", "--port", str(port)], env) as process:
        base = f"http://127.0.0.1:{port}"
        wait_until_up(base, process)
        assert httpx.get(base + "/campaigns").status_code == 200
        assert httpx.get(base + "/api/studies").json()["studies"] == []
        assert httpx.post(base + "/api/campaigns").status_code == 405


def test_serve_elsewhere_checks_the_token_on_every_request(url: str) -> None:
    port = free_port()
    env = {**os.environ, "BENCHLEDGER_DATABASE_URL": url, "BENCHLEDGER_DASHBOARD_TOKEN": "tok-1"}
    with serving(["serve", "--host", "0.0.0.0", "--port", str(port)], env) as process:
        base = f"http://127.0.0.1:{port}"
        wait_until_up(base, process)
        assert httpx.get(base + "/campaigns").status_code == 401
        assert httpx.get(base + "/static/dashboard.js").status_code == 401
        good = {"Authorization": "Bearer tok-1"}
        assert httpx.get(base + "/campaigns", headers=good).status_code == 200


def run(args: list[str], env: dict[str, str], code: str = "") -> subprocess.CompletedProcess[str]:
    command = [BENCHLEDGER, *args] if not code else [sys.executable, "-c", code, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_serve_elsewhere_without_a_token_is_refused(url: str) -> None:
    env = {**os.environ, "BENCHLEDGER_DATABASE_URL": url}
    env.pop("BENCHLEDGER_DASHBOARD_TOKEN", None)
    result = run(["serve", "--host", "0.0.0.0", "--port", str(free_port())], env)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ledger.dashboard.token_required: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_without_the_extra_says_what_to_install(url: str) -> None:
    # The dashboard's libraries made unimportable, as in an install without the extra.
    code = (
        "import sys; sys.modules.update(dict.fromkeys(['uvicorn', 'starlette', 'jinja2'])); "
        "sys.argv[0] = 'benchledger'; from benchledger.cli import main; main()"
    )
    env = {**os.environ, "BENCHLEDGER_DATABASE_URL": url}
    result = run(["serve"], env, code)
    assert result.returncode == 1
    assert result.stderr == (
        "error: ledger.dashboard.not_installed: the dashboard is not installed: "
        "pip install 'benchledger[dashboard]'\n"
    )


def test_loopback_addresses() -> None:
    from benchledger.cli.serve import is_loopback

    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.4", "example.org"]))
