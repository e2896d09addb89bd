"""Test support for suites built on benchledger: a pytest plugin and factories.

The plugin loads by itself through the ``pytest11`` entry point once
benchledger is installed; its fixtures are ``ledger_db``, ``ledger_empty_db``,
``ledger_backend``, ``ledger_clock``, ``ledger_session``, ``campaign_service``
and ``study_service``. The factories live in :mod:`benchledger.testing.factories`
and need factory-boy (``pip install 'benchledger[testing]'``); nothing else here does.
:class:`ModelServer` (:mod:`benchledger.testing.model_server`, stdlib only) is an
HTTP model server that throttles, fails and times out on purpose.
"""

from typing import TYPE_CHECKING, Any

from benchledger.testing.clock import LedgerClock
from benchledger.testing.databases import DatabaseFactory, PostgresServer
from benchledger.testing.session import LedgerTestSession

if TYPE_CHECKING:
    from benchledger.testing.model_server import ModelServer, ModelServerStats

__all__ = [
    "DatabaseFactory",
    "LedgerClock",
    "LedgerTestSession",
    "ModelServer",
    "ModelServerStats",
    "PostgresServer",
    "bind_factories",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: it needs factory-boy, which the plugin must not require.
    if name == "bind_factories":
        from benchledger.testing.factories import bind_factories

        return bind_factories
    # Imported on first use too, so that `python -m benchledger.testing.model_server`
    # does not find its own module already imported by this package.
    if name in ("ModelServer", "ModelServerStats"):
        from benchledger.testing import model_server

        return getattr(model_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
