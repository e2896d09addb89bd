"""Wake-ups instead of polling: PostgreSQL's LISTEN/NOTIFY on one channel.

Writes that make work claimable now (a campaign created, items retried, a
campaign resumed, caps raised or dropped) send ``NOTIFY benchledger_work`` with
the campaign id (or ``''``: any campaign) in their own transaction, so the
notification is delivered when, and only if, they commit. An idle worker
waits on a :class:`WorkListener` (its own psycopg connection, outside every
pool) instead of sleeping its whole poll interval, and claims within
milliseconds. Polling stays: for SQLite, through a transaction-pooling
PgBouncer (``Database.supports_listen``), and as the fallback when the
listener's connection is lost. Work that falls due by time (a retry's backoff)
is found by the worker's own timer, as before.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final

import sqlalchemy as sa

CHANNEL: Final = "benchledger_work"
#: A notification's payload for "any campaign" (limit groups, several campaigns).
ANY_CAMPAIGN: Final = ""
_NOTIFY = sa.text("SELECT pg_notify('benchledger_work', :campaign_id)")

log = logging.getLogger("benchledger.db")


def notify_work(connection: sa.Connection, campaign_id: str = ANY_CAMPAIGN) -> None:
    """Tell idle workers that ``campaign_id`` has work (on commit; nothing on SQLite)."""
    if connection.dialect.name == "postgresql":
        connection.execute(_NOTIFY, {"campaign_id": campaign_id})


def _connect_args(url: str) -> dict[str, Any]:
    """The psycopg ``connect`` arguments of a SQLAlchemy PostgreSQL URL."""
    parsed = sa.make_url(url)
    args: dict[str, Any] = parsed.translate_connect_args(username="user", database="dbname")
    for key, value in parsed.query.items():
        if key.startswith("benchledger_"):
            continue  # benchledger's own options (the pooler switch), not libpq's
        args[key] = value if isinstance(value, str) else value[-1]
    return args


class WorkListener:
    """A dedicated connection that ``LISTEN``s on :data:`CHANNEL` (PostgreSQL only)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._connection: Any = psycopg.connect(**_connect_args(url), autocommit=True)
        self._connection.execute(f"LISTEN {CHANNEL}")
        self.broken = False

    def wait(self, timeout: float) -> set[str]:
        """The campaign ids notified within ``timeout`` seconds (empty: none came). A lost
        connection marks the listener ``broken``: the caller polls from then on."""
        if self.broken:
            return set()
        got: set[str] = set()
        try:
            for notify in self._connection.notifies(timeout=max(0.0, timeout), stop_after=1):
                got.add(notify.payload)
            if got:  # others that came at once
                for notify in self._connection.notifies(timeout=0.0):
                    got.add(notify.payload)
        except Exception as error:  # the server went away: poll instead
            self.broken = True
            log.warning("work listener lost its connection (%s): polling", type(error).__name__)
        return got

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already gone
            self._connection.close()


def open_listener(database: Any) -> WorkListener | None:
    """A listener on ``database`` when it supports one (else ``None``: poll)."""
    if not getattr(database, "supports_listen", False):
        return None
    try:
        return WorkListener(database.url)
    except Exception as error:  # cannot connect now: poll, as before
        log.warning("no work listener (%s): polling", type(error).__name__)
        return None
