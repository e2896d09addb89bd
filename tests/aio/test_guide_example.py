"""docs/evaluating-model-apis.md's httpx evaluator, run as written against a local model API.

The guide's code block is taken from the doc and executed unchanged; the test
only points its ``API`` constant at an HTTP server started here (standing in
for a hosted model) and supplies the metric the guide leaves to the reader
(``score``). The server answers one request with a 503 first, which the
example maps to a retryable ``DependencyFailed``.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker
from benchledger.db import Database
from benchledger.services.campaigns import CampaignService
from campaign.helpers import make_plan

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "evaluating-model-apis.md"


def guide_example() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(
        r"^## An async evaluator with httpx\n.*?```python\n(.*?)```", text, re.M | re.S
    )
    assert match is not None, "the guide lost its httpx evaluator example"
    return match.group(1)


class ModelAPI:
    """A model API on 127.0.0.1: answers every translation, the first one with a 503."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = (body["text"], body["target_locale"])
                with api.lock:
                    api.requests[key] += 1
                    first = sum(api.requests.values()) == 1
                status, answer = (503, {}) if first else (200, {"translation": "ok", "score": 0.5})
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/translate"

    def __enter__(self) -> ModelAPI:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def model_api() -> Iterator[ModelAPI]:
    with ModelAPI() as api:
        yield api


def test_the_guides_httpx_evaluator_completes_every_item_once(
    ledger_db: Database, model_api: ModelAPI
) -> None:
    plan = make_plan(cases=6, locales=("de-DE", "fr-FR"))  # 12 items
    cid = CampaignService(ledger_db).create(plan.policy, plan.suite)
    example: dict[str, Any] = {"__name__": "mybench"}
    exec(compile(guide_example(), str(GUIDE), "exec"), example)
    example["API"] = model_api.url
    example["score"] = lambda answer, job: answer["score"]

    async def main() -> Any:
        database = AsyncDatabase(ledger_db.url)
        try:
            worker = AsyncWorker(
                AsyncCampaignService(database),
                cid,
                "w-guide",
                example["evaluate"],
                concurrency=8,
                retry_base_seconds=0,
                until_finished=True,
                poll_seconds=0.05,
            )
            return await worker.run()
        finally:
            if example["_client"] is not None:
                await example["_client"].aclose()
            await database.dispose()

    summary = asyncio.run(main())
    assert (summary.succeeded, summary.retrying, summary.failed, summary.lost) == (12, 1, 0, 0)
    assert summary.report is not None and summary.report.status == "succeeded"
    assert len(model_api.requests) == 12 and sum(model_api.requests.values()) == 13
    with ledger_db.engine.connect() as connection:
        work = connection.execute(
            sa.text(
                "SELECT status, attempts, last_error_code FROM benchmark_campaign_work "
                "WHERE campaign_id = :c"
            ),
            {"c": cid},
        ).all()
    assert Counter(row.status for row in work) == {"succeeded": 12}
    assert sorted(row.attempts for row in work) == [1] * 11 + [2]
