# mypy: disable-error-code="no-untyped-call"
"""Which session and clock the model factories use: the test's, never their own.

Model factories never open a session. :func:`bind_factories` points every
:class:`LedgerModelFactory` (and every subclass, including users' own) at one
session and one clock for the duration of a ``with`` block; the
``ledger_session`` fixture does exactly that for each test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from factory.alchemy import SQLAlchemyModelFactory
from sqlalchemy.orm import Session

Clock = Callable[[], float]

_lock = threading.RLock()
_clock: list[Clock] = []


def _options(cls: type[Any]) -> Any:
    """A factory's ``_meta`` (factory-boy types it without the SQLAlchemy options)."""
    return cls._meta


def factory_now() -> float:
    """The bound clock's time, else the wall clock's (epoch seconds)."""
    return _clock[-1]() if _clock else time.time()


class LedgerModelFactory(SQLAlchemyModelFactory):
    """Base of benchledger's model factories: flush into the bound session.

    Persistence is ``flush``: rows get their keys and are visible to the
    session at once, and the transaction belongs to whoever owns the session
    (the ``ledger_session`` fixture commits it before anything else touches
    the database). Subclass it for your own models and they are bound too.
    """

    class Meta:
        abstract = True
        sqlalchemy_session = None
        sqlalchemy_session_persistence = "flush"

    @classmethod
    def _create(cls, model_class: type[Any], *args: Any, **kwargs: Any) -> Any:
        if _options(cls).sqlalchemy_session is None:
            raise RuntimeError(
                f"{cls.__name__} has no session: use the ledger_session fixture, or "
                "`with benchledger.testing.bind_factories(session): ...`; "
                f"{cls.__name__}.build() makes an unsaved row"
            )
        return super()._create(model_class, *args, **kwargs)


def _all_factories() -> list[type[Any]]:
    found: list[type[Any]] = []
    pending: list[type[Any]] = [LedgerModelFactory]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(current.__subclasses__())
    return found


def bound_session() -> Session | None:
    """The session the factories use now, if any."""
    session = _options(LedgerModelFactory).sqlalchemy_session
    return session if isinstance(session, Session) else None


@contextmanager
def bind_factories(session: Session, clock: Clock | None = None) -> Iterator[Session]:
    """Bind every model factory to ``session`` (and timestamps to ``clock``) in a block.

    Nested bindings restore the outer one on exit. Factories defined while
    bound inherit the binding of the base class.
    """
    if not isinstance(session, Session):
        raise TypeError("bind_factories() needs a sqlalchemy.orm.Session")
    with _lock:
        saved = [(cls, _options(cls).sqlalchemy_session) for cls in _all_factories()]
        for cls, _previous in saved:
            _options(cls).sqlalchemy_session = session
        if clock is not None:
            _clock.append(clock)
    try:
        yield session
    finally:
        with _lock:
            if clock is not None:
                _clock.pop()
            for cls in _all_factories():
                _options(cls).sqlalchemy_session = None
            for cls, previous in saved:
                _options(cls).sqlalchemy_session = previous
