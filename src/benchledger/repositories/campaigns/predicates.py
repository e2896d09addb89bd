"""The work table's partial-index predicates as literal SQL, for the statements that use
them, and the items' code-point order (:func:`item_order`).

SQLite uses a partial index only when the query's WHERE contains the index's WHERE
term as written (a bound parameter would not match), so these are SQL text, built
from the domain's vocabularies as the models' index predicates are.
"""

from __future__ import annotations

from typing import Any, Final, cast

import sqlalchemy as sa

from benchledger.domain.campaign import CLAIMABLE, UNFINISHED, WorkStatus
from benchledger.models.base import one_of
from benchledger.models.campaign import WorkRow

_WORK = cast(sa.Table, WorkRow.__table__)


def _work(predicate: str) -> sa.TextClause:
    return sa.text(f"benchmark_campaign_work.{predicate}")


#: Claimable items (``benchmark_campaign_claimable``'s predicate).
CLAIMABLE_WORK: Final = _work(one_of("status", CLAIMABLE))
#: Leased items (``benchmark_campaign_leases``'s predicate).
LEASED_WORK: Final = _work(f"status = '{WorkStatus.LEASED.value}'")
#: Every status but succeeded: the ready index's (campaign_id, status) ranges of the
#: unfinished items only.
UNFINISHED_WORK: Final = _work(one_of("status", UNFINISHED))


def item_order(dialect: str) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
    """(locale, case key) in code-point order, the order results are bound in (and read
    by pages, exports, the audit and the archive).

    SQLite's BINARY collation is that order (and the unique index serves it);
    on PostgreSQL the "C" collation is, whatever the database's own collation.
    """
    if dialect == "postgresql":
        return _WORK.c.target_locale.collate("C"), _WORK.c.suite_case_key.collate("C")
    return _WORK.c.target_locale, _WORK.c.suite_case_key
