"""Helpers of the PgBouncer tests: Debian's pgbouncer, started by the test in front of a
PostgreSQL server of the test's own (one the test may stop, start and crash)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from benchledger.db.engine import POOLER_OPTION, TRANSACTION_POOLING

#: What the ledger's URL says behind a transaction-pooling PgBouncer.
SWITCH = f"{POOLER_OPTION}={TRANSACTION_POOLING}"


def pgbouncer_binary() -> Path | None:
    """Debian's pgbouncer (``/usr/sbin/pgbouncer``), or one on ``PATH``."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgBouncerUnderTest:
    """A PgBouncer of the test's own, in transaction pooling mode, routing every database
    name to the server at ``server_socket_dir``/``server_port``; ``url`` reaches its
    ``postgres`` database with the pooler switch on. The same settings as the one
    ``scripts/with-postgres.sh`` starts for the suite."""

    def __init__(self, binary: Path, server_socket_dir: Path, server_port: int) -> None:
        self.binary = binary
        self.workdir = Path(tempfile.mkdtemp(prefix="benchledger-pgbouncer-"))
        self.port = _free_port()
        self.as_postgres: list[str] = []
        (self.workdir / "userlist.txt").write_text('"postgres" ""\n', encoding="utf-8")
        self.ini = self.workdir / "pgbouncer.ini"
        self.ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={server_socket_dir} port={server_port}",
                    "",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    f"unix_socket_dir = {self.workdir}",
                    f"pidfile = {self.workdir / 'pgbouncer.pid'}",
                    f"logfile = {self.workdir / 'pgbouncer.log'}",
                    "auth_type = trust",
                    f"auth_file = {self.workdir / 'userlist.txt'}",
                    "admin_users = postgres",
                    "pool_mode = transaction",
                    "max_client_conn = 2000",
                    "default_pool_size = 20",
                    "server_login_retry = 1",
                    "query_wait_timeout = 5",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
            os.chmod(self.workdir, 0o755)
            for path in (self.workdir, *self.workdir.iterdir()):
                shutil.chown(path, "postgres")
        self.start()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres?{SWITCH}"

    @property
    def log(self) -> str:
        path = self.workdir / "pgbouncer.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def _pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.workdir / "pgbouncer.pid").read_text().strip())
        return None

    def start(self) -> None:
        """Start it (as a daemon) and wait until it accepts connections."""
        subprocess.run(
            [*self.as_postgres, str(self.binary), "-d", "-q", str(self.ini)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe, contextlib.suppress(OSError):
                probe.connect(("127.0.0.1", self.port))
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"PgBouncer did not start:\n{self.log[-2000:]}")
            time.sleep(0.05)

    def _signal(self, signum: int) -> None:
        pid = self._pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        (self.workdir / "pgbouncer.pid").unlink(missing_ok=True)

    def kill(self) -> None:
        """A crash: SIGKILL (every client connection cut, nothing handed over)."""
        self._signal(signal.SIGKILL)

    def close(self) -> None:
        self._signal(signal.SIGTERM)
        shutil.rmtree(self.workdir, ignore_errors=True)
