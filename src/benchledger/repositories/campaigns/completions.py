"""Many completions in one statement (PostgreSQL): a group commit's single round trip.

A group commit (``CampaignService.complete_batch``) writes many results in one
transaction. One :meth:`WorkLeases.complete` per result is one round trip each;
on PostgreSQL :data:`COMPLETE_MANY` does them all in one: the batch travels as
one JSON text (``json_to_recordset`` turns it back into typed rows: a tenth of
what binding thirteen arrays costs the client), and one ``UPDATE ... FROM`` sets
every row whose live lease matches its own entry (the same compare-and-set on
work id, campaign, locale, case, attempt, budget, holder, token and lease end as
the single completion), while a data-modifying CTE adds each completed
attempt's history row. An entry whose lease is no longer live matches nothing
and writes nothing: the others still commit.

SQLite has no round trips to save (its cost is the commit, shared already), but
each statement costs the client its own execution and result: there
:func:`completes_listed` binds up to :data:`LISTED_BATCH` entries as the rows of
a ``VALUES`` list (no JSON: a float bound as a float compares exactly) and one
``UPDATE ... FROM`` writes them. SQLite's ``RETURNING`` names only the updated
table and it has no data-modifying CTEs, so the history rows follow in one
``executemany`` (``WorkLeases.complete_many``).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Sequence
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from benchledger.db import Prebuilt
from benchledger.domain.attempts import AttemptOutcome
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.integrity import result_seal
from benchledger.models.campaign import WorkRow
from benchledger.repositories.campaigns.attempts import ATTEMPTS, ROW_COLUMNS
from benchledger.repositories.campaigns.lease_rows import RELEASED

WORK = cast(sa.Table, WorkRow.__table__)

#: One completion of a batch: the claim's live lease and what it stores.
_ENTRY: Final = (
    ("work_id", WORK.c.work_id.type),
    ("campaign_id", WORK.c.campaign_id.type),
    ("locale", WORK.c.target_locale.type),
    ("case_key", WORK.c.suite_case_key.type),
    ("attempt", WORK.c.attempts.type),
    ("max_attempts", WORK.c.max_attempts.type),
    ("owner", WORK.c.lease_owner.type),
    ("token", WORK.c.lease_token.type),
    ("expires_at", WORK.c.lease_expires_at.type),
    ("result_json", WORK.c.result_json.type),
    ("result_sha256", WORK.c.result_sha256.type),
    ("result_seal", WORK.c.result_seal.type),
    ("duration", ATTEMPTS.c.duration_seconds.type),
)


_NAMES: Final = tuple(name for name, _ in _ENTRY)

#: What a completion returns: its outcome's columns, and the campaign and lease start
#: its history row reads.
WORK_OUTCOME_COLUMNS: Final = (
    WORK.c.work_id,
    WORK.c.target_locale,
    WORK.c.suite_case_key,
    WORK.c.status,
    WORK.c.attempts,
    WORK.c.max_attempts,
    WORK.c.next_attempt_at,
    WORK.c.last_error_code,
    WORK.c.last_error_detail_hash,
    WORK.c.result_sha256,
    WORK.c.campaign_id,
    WORK.c.leased_at,
)


def _succeeded(entry: Any, now: Any) -> dict[str, Any]:
    """What a batch's completion writes from its ``entry`` (the batch's columns): the
    result, no error, no lease."""
    return {
        "status": WorkStatus.SUCCEEDED.value,
        "last_error_code": None,
        "last_error_detail_hash": None,
        "result_json": entry.result_json,
        "result_sha256": entry.result_sha256,
        "result_seal": entry.result_seal,
        "updated_at": now,
        **RELEASED,
    }


def _complete_many() -> Prebuilt:
    entries = (
        sa.func.json_to_recordset(sa.cast(sa.bindparam("batch", type_=sa.Text()), postgresql.JSON))
        .table_valued(*(sa.column(name, kind) for name, kind in _ENTRY))
        .render_derived(name="entries", with_types=True)
    )
    # LIMIT the batch's own length: the planner then expects that many entries, not a
    # set-returning function's default hundred.
    given = (
        sa.select(*entries.c).limit(sa.bindparam("entries", type_=sa.Integer())).subquery("given")
    )
    g, c = given.c, WORK.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    # Each row is found by its primary key alone; the rest of the lease is compared as
    # one row value, which no index serves. Given an indexed column to range over
    # (the lease's end, or campaign and status), the planner chose the partial leases
    # index or the ready index, and read their dead entries (every lease since the
    # last vacuum) at each commit: 0.9-4.5 ms for 16 items, growing with the drain.
    live_lease = sa.tuple_(
        c.campaign_id,
        c.target_locale,
        c.suite_case_key,
        c.status,
        c.attempts,
        c.max_attempts,
        c.lease_owner,
        c.lease_token,
        c.lease_expires_at,
    ).is_not_distinct_from(
        sa.tuple_(
            g.campaign_id,
            g.locale,
            g.case_key,
            sa.literal(WorkStatus.LEASED.value),
            g.attempt,
            g.max_attempts,
            g.owner,
            g.token,
            g.expires_at,
        )
    )
    done = (
        sa.update(WORK)
        .where(
            c.work_id == g.work_id,
            live_lease,
            g.expires_at > now,  # the lease is live (its end is the row's own, above)
        )
        .values(_succeeded(g, now))
        .returning(*WORK_OUTCOME_COLUMNS, g.owner.label("holder"), g.duration.label("duration"))
        .cte("done")
    )
    recorded = (
        sa.insert(ATTEMPTS)
        .from_select(
            ROW_COLUMNS,
            sa.select(
                done.c.campaign_id,
                done.c.work_id,
                done.c.attempts,
                done.c.holder,
                done.c.leased_at,
                now,
                sa.literal(AttemptOutcome.SUCCEEDED.value),
                sa.null(),
                done.c.duration,
            ),
        )
        .cte("recorded")
    )
    return Prebuilt(sa.select(done).add_cte(recorded))


#: Every completion of a batch whose lease is live, and their history rows (PostgreSQL).
COMPLETE_MANY = _complete_many()


#: SQLite: the most entries one :func:`completes_listed` statement binds (13 parameters
#: each: far below SQLite's limit of 32,766). A power of two: a batch is padded up to
#: the next one (:func:`_listed_size`).
LISTED_BATCH: Final = 64
#: A padding entry: a NULL work id matches no row.
_NO_ENTRY: Final = (None,) * len(_ENTRY)


def _listed_size(n: int) -> int:
    """The statement a batch of ``n`` entries runs in: the next power of two, so that a
    process compiles (and SQLite's statement cache keeps) seven forms, not sixty-four."""
    return 1 << (n - 1).bit_length()


@functools.cache
def completes_listed(n: int) -> Prebuilt:
    """:data:`COMPLETE_MANY` for SQLite, without the history rows: ``n`` entries bound as
    the rows of a ``VALUES`` list (parameters ``<name>_<i>``), each row found by its
    primary key and written only if its live lease matches the entry's, as
    :meth:`WorkLeases.complete` does for one."""
    given = (
        sa.values(*(sa.column(name, kind) for name, kind in _ENTRY), name="given")
        .data(
            [
                tuple(sa.bindparam(f"{name}_{i}", type_=kind) for name, kind in _ENTRY)
                for i in range(n)
            ]
        )
        .cte("given")
    )
    g, c = given.c, WORK.c
    now = sa.bindparam("now", type_=c.updated_at.type)
    return Prebuilt(
        sa.update(WORK)
        .where(
            c.work_id == g.work_id,
            c.campaign_id == g.campaign_id,
            c.target_locale == g.locale,
            c.suite_case_key == g.case_key,
            c.status == WorkStatus.LEASED.value,
            c.attempts == g.attempt,
            c.max_attempts == g.max_attempts,
            c.lease_owner == g.owner,
            c.lease_token == g.token,
            c.lease_expires_at == g.expires_at,
            c.lease_expires_at > now,
        )
        .values(_succeeded(g, now))
        .returning(*WORK_OUTCOME_COLUMNS)
    )


@functools.cache
def _listed_names(n: int) -> tuple[str, ...]:
    """The parameters of :func:`completes_listed`'s ``n`` entries, entry by entry."""
    return tuple(f"{name}_{i}" for i in range(n) for name in _NAMES)


def complete_many(
    connection: sa.Connection,
    entries: Sequence[tuple[Any, str, str, float | None]],
    now: float,
) -> dict[str, sa.Row[Any]]:
    """Complete each ``(claim, result_json, result_sha256, duration)`` whose lease is live
    at ``now``: the rows written, by work id (an entry missing from it wrote nothing).
    The work ids must be distinct. On PostgreSQL one statement also adds each written
    one's history row; on SQLite the caller adds them."""
    rows = entry_rows(entries)
    if connection.dialect.name != "postgresql":
        written: dict[str, sa.Row[Any]] = {}
        for start in range(0, len(rows), LISTED_BATCH):
            chunk = rows[start : start + LISTED_BATCH]
            size = _listed_size(len(chunk))
            chunk += [_NO_ENTRY] * (size - len(chunk))
            values = itertools.chain.from_iterable(chunk)
            parameters: dict[str, Any] = dict(zip(_listed_names(size), values, strict=True))
            parameters["now"] = now
            statement = completes_listed(size)
            written.update((row.work_id, row) for row in statement(connection, parameters))
        return written
    parameters = {"batch": batch_json(rows), "entries": len(rows), "now": now}
    return {row.work_id: row for row in COMPLETE_MANY(connection, parameters)}


def batch_json(rows: Sequence[tuple[Any, ...]]) -> str:
    """:data:`COMPLETE_MANY`'s batch: the :func:`entry_rows` as one JSON text."""
    return json.dumps([dict(zip(_NAMES, row, strict=True)) for row in rows], ensure_ascii=False)


def entry_rows(
    entries: Sequence[tuple[Any, str, str, float | None]],
) -> list[tuple[Any, ...]]:
    """Each ``(claim, result_json, result_sha256, duration)``'s values, in the order of
    :data:`_ENTRY` (the claim: any object with a :class:`ClaimedCase`'s lease fields)."""
    return [
        (
            claim.work_id,
            claim.campaign_id,
            claim.target_locale,
            claim.suite_case_key,
            claim.attempt,
            claim.max_attempts,
            claim.lease_owner,
            claim.lease_token,
            claim.lease_expires_at,  # a float's repr reads back as the very same float8
            result_json,
            result_sha256,
            # Binds the attempt count to the result: verify() recomputes it.
            result_seal(claim.work_id, claim.attempt, claim.max_attempts, result_sha256),
            duration,
        )
        for claim, result_json, result_sha256, duration in entries
    ]
