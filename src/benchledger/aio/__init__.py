"""benchledger for asyncio: many cases in flight in one process.

- :class:`AsyncDatabase`: the ledger database on SQLAlchemy's asyncio
  extension (aiosqlite for SQLite, psycopg's async mode for PostgreSQL).
- :class:`AsyncCampaignService`: every :class:`~benchledger.CampaignService`
  method, awaited; the same statements, rules, return values and error codes.
- :class:`AsyncWorker`: up to K cases in flight with an ``async def
  evaluate(claim, heartbeat)``.

See docs/evaluating-model-apis.md.
"""

from __future__ import annotations

from benchledger.aio.campaigns import AsyncCampaignService
from benchledger.aio.db import AsyncDatabase
from benchledger.aio.worker import AsyncEvaluate, AsyncWorker, Heartbeat

__all__ = ["AsyncCampaignService", "AsyncDatabase", "AsyncEvaluate", "AsyncWorker", "Heartbeat"]
