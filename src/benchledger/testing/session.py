"""The test's own SQLAlchemy session: where factories flush, committed when needed.

Factories flush into one session per test (never a session per create). The
rows must be committed before a service (which opens its own sessions) can
see them, and on SQLite an open write transaction would make the service
wait for the lock. :class:`LedgerTestSession` therefore commits the test's
session just before any *other* connection of the same database starts a
transaction in the same thread -- a service call, ``db.read()``, your own
``db.engine.connect()`` -- and the pytest plugin also commits it once fixture
setup is over, before the test body runs. Commit it yourself
(``ledger_session.commit()``) before handing the database to other threads or
processes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from benchledger.db import Database

_OWN_OPTION = "benchledger_test_session"


class LedgerTestSession:
    """Owns a test's :class:`~sqlalchemy.orm.Session` on ``db`` and binds the factories to it.

    Use as a context manager (the ``ledger_session`` fixture does): on entry
    the model factories flush into :attr:`session` and stamp times from
    ``clock``; on exit they are unbound and whatever was not committed is
    rolled back.
    """

    def __init__(self, db: Database, clock: Callable[[], float] | None = None) -> None:
        self.db = db
        self.clock = clock
        # Writes through the write engine: on SQLite the transaction starts
        # with BEGIN IMMEDIATE, like every service write.
        bind = db.write_engine.execution_options(**{_OWN_OPTION: True})
        self.session = Session(bind=bind, expire_on_commit=False)
        self._thread = threading.get_ident()
        self._pid = os.getpid()
        self._stack = ExitStack()

    def commit(self) -> None:
        """Commit what the factories flushed, if a transaction is open and healthy."""
        transaction = self.session.get_transaction()
        if transaction is not None and transaction.is_active:
            self.session.commit()

    def _before_other_begin(self, connection: sa.Connection) -> None:
        if connection.get_execution_options().get(_OWN_OPTION):
            return
        if threading.get_ident() != self._thread or os.getpid() != self._pid:
            return
        self.commit()

    def __enter__(self) -> Session:
        # "engine_connect" fires when a session or caller takes a connection,
        # before its first BEGIN: on SQLite, the database's BEGIN IMMEDIATE hook
        # (a "begin" listener that runs first) would otherwise wait on the lock
        # this session holds. "begin" covers later transactions of that connection.
        for name in ("engine_connect", "begin"):
            event.listen(self.db.engine, name, self._before_other_begin)
            self._stack.callback(event.remove, self.db.engine, name, self._before_other_begin)
        self._stack.callback(self.session.close)
        try:  # factory-boy is optional: without it there are no factories to bind
            from benchledger.testing.factories._binding import bind_factories
        except ModuleNotFoundError as error:
            if error.name != "factory":
                raise
        else:
            self._stack.enter_context(bind_factories(self.session, self.clock))
        return self.session

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Unbind the factories, roll back anything uncommitted, close the session."""
        self._stack.close()

    def __repr__(self) -> str:
        return f"LedgerTestSession({self.db!r})"
