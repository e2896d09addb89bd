"""Every model has a row factory; every factory is bound and flushes, never commits."""

from __future__ import annotations

import benchledger.models  # noqa: F401  (registers every model)
import benchledger.testing.factories as factories
from benchledger.models.base import Base
from benchledger.testing.factories import LedgerModelFactory


def _row_factories() -> dict[type, type]:
    found = {}
    for name in factories.__all__:
        value = getattr(factories, name)
        if isinstance(value, type) and issubclass(value, LedgerModelFactory):
            found[value._meta.model] = value
    return found


def test_every_model_has_an_exported_factory() -> None:
    models = {mapper.class_ for mapper in Base.registry.mappers}
    covered = _row_factories()
    assert sorted(m.__name__ for m in models - set(covered)) == []


def test_every_row_factory_flushes_into_the_bound_session() -> None:
    for factory in _row_factories().values():
        assert factory._meta.sqlalchemy_session_persistence == "flush"
        assert factory._meta.sqlalchemy_session_factory is None
