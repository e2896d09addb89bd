"""AsyncDatabase's SQLite connections (one thread round trip per statement) are a full DBAPI:
rows past the first batch, streamed results, executemany, errors and rollbacks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchledger.aio import AsyncDatabase
from benchledger.aio._sqlite import BATCH_ROWS

ROWS = 2 * BATCH_ROWS + 7  # three batches, the last one short

COUNT = sa.text(
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :rows) "
    "SELECT i FROM n"
)


def test_rows_statements_and_errors(tmp_path: Path) -> None:
    async def main() -> None:
        database = AsyncDatabase(f"sqlite:///{tmp_path / 'driver.db'}")
        try:
            async with database.async_engine.connect() as connection:
                rows = (await connection.execute(COUNT, {"rows": ROWS})).scalars().all()
                assert rows == list(range(1, ROWS + 1))
                streamed = await connection.stream(COUNT, {"rows": ROWS})
                seen = [row async for row in streamed.scalars()]
                assert seen == rows
                partial = await connection.stream(COUNT, {"rows": ROWS})
                assert await anext(partial.scalars().partitions(3)) == [1, 2, 3]
                await partial.close()  # closed before its last batch: the cursor is closed too

                await connection.execute(sa.text("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)"))
                await connection.execute(
                    sa.text("INSERT INTO t (k, v) VALUES (:k, :v)"),
                    [{"k": k, "v": f"v{k}"} for k in range(5)],
                )
                inserted = await connection.execute(sa.text("INSERT INTO t (v) VALUES ('x')"))
                assert inserted.lastrowid == 5 and inserted.rowcount == 1
                await connection.commit()

                with pytest.raises(sa.exc.IntegrityError):
                    await connection.execute(sa.text("INSERT INTO t (k, v) VALUES (1, 'dup')"))
                await connection.rollback()
                with pytest.raises(sa.exc.OperationalError):
                    await connection.execute(sa.text("SELECT nothing FROM nowhere"))
                await connection.rollback()

                updated = await connection.execute(sa.text("UPDATE t SET v = 'y' WHERE k < 3"))
                assert updated.rowcount == 3
                await connection.rollback()  # an open transaction: really rolled back
                count = await connection.execute(sa.text("SELECT count(*) FROM t WHERE v = 'y'"))
                assert count.scalar_one() == 0
            for _ in range(2):  # BEGIN goes with the first statement: none, nothing to end
                async with database.async_engine.begin():
                    pass
            async with database.async_engine.begin() as connection:
                await connection.execute(sa.text("DELETE FROM t WHERE k = 0"))
            async with database.async_engine.connect() as connection:
                left = await connection.execute(sa.text("SELECT count(*) FROM t"))
                assert left.scalar_one() == 5
        finally:
            await database.dispose()

    asyncio.run(main())


def test_a_nested_write_in_the_same_task_does_not_wait_for_itself(tmp_path: Path) -> None:
    """On SQLite this process's writers queue on one gate, which (as a Database's RLock)
    the greenlet holding it may enter again."""
    database = AsyncDatabase(f"sqlite:///{tmp_path / 'nested.db'}")
    gate = database.sync._write_gate
    entered: list[int] = []

    def nested() -> None:
        with gate:
            with gate:
                entered.append(1)
            entered.append(2)
        with gate:
            entered.append(3)

    async def main() -> None:
        try:
            await asyncio.wait_for(
                asyncio.gather(*(database.run_sync(nested) for _ in range(3))), 5
            )
        finally:
            await database.dispose()

    asyncio.run(main())
    assert sorted(entered) == [1, 1, 1, 2, 2, 2, 3, 3, 3]
