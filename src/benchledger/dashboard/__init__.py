"""``benchledger serve``: a read-only web dashboard over a ledger database.

Install with ``pip install 'benchledger[dashboard]'`` (Starlette, Jinja2,
uvicorn). :func:`create_app` builds the ASGI application; every asset it
serves ships in this package, so the pages work offline.
"""

from __future__ import annotations

from benchledger.dashboard.app import DashboardSettings, create_app

__all__ = ["DashboardSettings", "create_app"]
