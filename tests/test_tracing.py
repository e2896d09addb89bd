"""OpenTelemetry traces: the span tree of a case, a report and a study write.

The spans go to the SDK's in-memory exporter through a ``TracerProvider`` set
once for the process (``trace.set_tracer_provider`` takes only the first one),
behind a sampler this module switches on for its own tests and off after them,
so the rest of a session records nothing. Workers run in-process, on both
backends; the evaluators start spans of their own, as an instrumented HTTP
client would, and those must nest under ``benchledger.evaluate``.

Two subprocesses check what happens without a recording tracer: with
``opentelemetry`` unimportable (a ``sys.meta_path`` hook refuses it) nothing
of it is imported and a worker runs as before; with the API but no provider,
every span is the no-op one.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import StatusCode

from benchledger import tracing
from benchledger.aio import AsyncCampaignService, AsyncDatabase, AsyncWorker
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.errors import DependencyFailed, LedgerError
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.drivers import run_next_case
from benchledger.workers.loop import Worker
from benchledger.workpool import pool_size_for
from campaign.helpers import complete_all, make_plan, result_for
from study.helpers import OWNER, Kit

Heartbeat = Callable[[], None]
#: The tracer of the evaluators: an instrumented HTTP client's spans, say.
EVALUATOR_SPAN = "model.call"
CASE_CHILDREN = [tracing.CLAIM, tracing.EVALUATE, tracing.RECORD]


class _Switch(Sampler):
    """Records everything while on; nothing (non-recording spans) while off."""

    on = False

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return (ALWAYS_ON if self.on else ALWAYS_OFF).should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "test_tracing switch"


#: The one provider of the process and what it records into: pytest may set the module
#: fixture up more than once (once per backend), and a second ``set_tracer_provider``
#: is ignored, so every set-up reuses these.
_SWITCH = _Switch()
_MEMORY = InMemorySpanExporter()


def _installed_provider() -> TracerProvider:
    installed = trace.get_tracer_provider()
    if not isinstance(installed, TracerProvider):
        provider = TracerProvider(sampler=_SWITCH)
        provider.add_span_processor(SimpleSpanProcessor(_MEMORY))
        trace.set_tracer_provider(provider)
        installed = trace.get_tracer_provider()
    assert isinstance(installed, TracerProvider), installed
    assert installed.sampler is _SWITCH, "another provider was set before this module"
    return installed


@pytest.fixture(scope="module")
def _exporter() -> Iterator[InMemorySpanExporter]:
    _installed_provider()
    _SWITCH.on = True
    try:
        yield _MEMORY
    finally:
        _SWITCH.on = False  # later tests of the session record nothing
        _MEMORY.clear()


@pytest.fixture
def spans(_exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    """The exporter, emptied for this test."""
    _exporter.clear()
    return _exporter


# -- reading the tree ----------------------------------------------------------------


def named(finished: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in finished if span.name == name]


def children(finished: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """``parent``'s children, in the order they started."""
    assert parent.context is not None
    kids = [
        span
        for span in finished
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    ]
    return sorted(kids, key=lambda span: span.start_time or 0)


def parent_of(finished: Sequence[ReadableSpan], span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None
    (found,) = [
        other
        for other in finished
        if other.context is not None and other.context.span_id == span.parent.span_id
    ]
    return found


def check_case_tree(finished: Sequence[ReadableSpan], case: ReadableSpan) -> None:
    """``case`` is a root with claim, evaluate and record children; the evaluator's own
    span (which names its case) nests under evaluate; one trace; claim dates the case."""
    assert case.parent is None and case.context is not None
    kids = children(finished, case)
    assert [kid.name for kid in kids] == CASE_CHILDREN
    claim, evaluated, recorded = kids
    assert claim.start_time == case.start_time
    assert claim.end_time is not None and evaluated.start_time is not None
    assert claim.end_time <= evaluated.start_time
    assert evaluated.end_time is not None and recorded.start_time is not None
    assert evaluated.end_time <= recorded.start_time
    assert recorded.end_time is not None and case.end_time is not None
    assert recorded.end_time <= case.end_time
    (model,) = children(finished, evaluated)
    assert model.name == EVALUATOR_SPAN
    assert model.attributes is not None and case.attributes is not None
    assert model.attributes["case"] == case.attributes[tracing.CASE_KEY]
    assert model.attributes["locale"] == case.attributes[tracing.LOCALE]
    for span in (*kids, model):
        assert span.context is not None and span.context.trace_id == case.context.trace_id


def traced_ok(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
    """A result, computed inside a span of the evaluator's own."""
    tracer = trace.get_tracer("test.evaluator")
    attributes = {"case": claim.suite_case_key, "locale": claim.target_locale}
    with tracer.start_as_current_span(EVALUATOR_SPAN, attributes=attributes):
        return result_for(claim)


# -- one case ------------------------------------------------------------------------


def test_a_case_is_one_span_with_claim_evaluate_and_record_children(
    campaign_service: CampaignService, ledger_clock: LedgerClock, spans: InMemorySpanExporter
) -> None:
    plan = make_plan()
    cid = campaign_service.create(plan.policy, plan.suite)
    outcome = run_next_case(campaign_service, cid, "w-1", traced_ok, ledger_clock)
    assert outcome is not None and outcome.status == "succeeded"
    finished = spans.get_finished_spans()
    assert sorted(span.name for span in finished) == sorted(
        [tracing.CASE, *CASE_CHILDREN, EVALUATOR_SPAN]
    )
    (case,) = named(finished, tracing.CASE)
    check_case_tree(finished, case)
    assert dict(case.attributes or {}) == {
        tracing.CAMPAIGN_ID: cid,
        tracing.LOCALE: outcome.target_locale,
        tracing.CASE_KEY: outcome.suite_case_key,
        tracing.ATTEMPT: 1,
        tracing.WORKER_ID: "w-1",
        tracing.OUTCOME_STATUS: "succeeded",
    }
    assert case.instrumentation_scope is not None
    assert case.instrumentation_scope.name == tracing.TRACER_NAME
    assert all(span.status.status_code is StatusCode.UNSET for span in finished)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (
            DependencyFailed("store.gone", retryable=False),
            "failed",
            "benchmark.campaign.dependency.store.gone",
        ),
        (LedgerError("judge.refused"), "failed", "judge.refused"),
        (RuntimeError("boom"), "retry_wait", dom.UNEXPECTED),
    ],
)
def test_a_failed_case_carries_its_status_and_code(
    campaign_service: CampaignService,
    ledger_clock: LedgerClock,
    spans: InMemorySpanExporter,
    error: Exception,
    status: str,
    code: str,
) -> None:
    plan = make_plan()
    cid = campaign_service.create(plan.policy, plan.suite)

    def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        raise error

    outcome = run_next_case(campaign_service, cid, "w-1", evaluate, ledger_clock)
    assert outcome is not None and (outcome.status, outcome.error_code) == (status, code)
    finished = spans.get_finished_spans()
    (case,) = named(finished, tracing.CASE)
    assert [kid.name for kid in children(finished, case)] == CASE_CHILDREN
    assert case.attributes is not None
    assert case.attributes[tracing.OUTCOME_STATUS] == status
    assert case.attributes[tracing.OUTCOME_CODE] == code
    assert case.status.status_code is StatusCode.ERROR and case.status.description == code
    (evaluated,) = named(finished, tracing.EVALUATE)
    assert evaluated.status.status_code is StatusCode.ERROR
    (event,) = evaluated.events
    assert event.name == "exception" and event.attributes is not None
    assert str(event.attributes["exception.type"]).endswith(type(error).__name__)
    (recorded,) = named(finished, tracing.RECORD)
    assert recorded.status.status_code is StatusCode.UNSET


def test_a_rejected_result_is_two_record_spans(
    campaign_service: CampaignService, ledger_clock: LedgerClock, spans: InMemorySpanExporter
) -> None:
    plan = make_plan()
    cid = campaign_service.create(plan.policy, plan.suite)

    def wrong_locale(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
        return {**result_for(claim), "target_locale": "xx-XX"}

    outcome = run_next_case(campaign_service, cid, "w-1", wrong_locale, ledger_clock)
    assert outcome is not None and outcome.error_code == dom.RESULT_INVALID
    finished = spans.get_finished_spans()
    (case,) = named(finished, tracing.CASE)
    kids = children(finished, case)
    assert [kid.name for kid in kids] == [*CASE_CHILDREN, tracing.RECORD]
    completion, failure = kids[2:]
    assert completion.status.status_code is StatusCode.ERROR  # the service refused it
    assert failure.status.status_code is StatusCode.UNSET
    assert case.status.description == dom.RESULT_INVALID


def test_a_claim_that_finds_nothing_leaves_no_span(
    campaign_service: CampaignService, ledger_clock: LedgerClock, spans: InMemorySpanExporter
) -> None:
    plan = make_plan()
    cid = campaign_service.create(plan.policy, plan.suite)
    complete_all(campaign_service, cid)
    spans.clear()
    assert run_next_case(campaign_service, cid, "w-1", traced_ok, ledger_clock) is None
    assert spans.get_finished_spans() == ()


def test_a_claim_that_raises_is_a_claim_span_of_its_own(
    campaign_service: CampaignService, ledger_clock: LedgerClock, spans: InMemorySpanExporter
) -> None:
    plan = make_plan()
    cid = campaign_service.create(plan.policy, plan.suite)
    unknown = cid[:-4] + ("0000" if not cid.endswith("0000") else "1111")
    with pytest.raises(LedgerError) as raised:
        run_next_case(campaign_service, unknown, "w-1", traced_ok, ledger_clock)
    (claim,) = spans.get_finished_spans()
    assert claim.name == tracing.CLAIM and claim.parent is None
    assert dict(claim.attributes or {}) == {tracing.CAMPAIGN_ID: unknown, tracing.WORKER_ID: "w-1"}
    assert claim.status.status_code is StatusCode.ERROR
    assert claim.events[0].attributes is not None
    assert str(claim.events[0].attributes["exception.type"]).endswith(type(raised.value).__name__)


# -- workers: thread lanes and asyncio lanes, then the report ------------------------


def check_worker_run(finished: Sequence[ReadableSpan], cid: str, items: int, worker: str) -> None:
    cases = named(finished, tracing.CASE)
    assert len(cases) == items
    for case in cases:
        check_case_tree(finished, case)
        assert case.attributes is not None
        assert case.attributes[tracing.CAMPAIGN_ID] == cid
        assert case.attributes[tracing.WORKER_ID] == worker
    keys = {(c.attributes or {})[tracing.CASE_KEY] for c in cases}
    assert len(keys) == items // 2  # two locales
    assert len({case.context.trace_id for case in cases if case.context}) == items
    (report,) = named(finished, tracing.REPORT)
    assert report.parent is None
    kids = children(finished, report)
    assert [kid.name for kid in kids] == [tracing.CLAIM, tracing.SUMMARIZE, tracing.RECORD]
    assert dict(report.attributes or {}) == {
        tracing.CAMPAIGN_ID: cid,
        tracing.ATTEMPT: 1,
        tracing.WORKER_ID: worker,
        tracing.OUTCOME_STATUS: "succeeded",
    }


def test_worker_lanes_nest_the_evaluators_spans(
    ledger_db: Database, spans: InMemorySpanExporter
) -> None:
    plan = make_plan(cases=4)  # 8 items over 3 thread lanes
    database = Database(ledger_db.url, pool_size=pool_size_for(3))
    try:
        service = CampaignService(database)
        cid = service.create(plan.policy, plan.suite)

        def evaluate(claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]:
            time.sleep(0.02)  # the lanes overlap
            return traced_ok(claim, heartbeat)

        summary = Worker(service, cid, "w-threads", evaluate, concurrency=3).run()
    finally:
        database.dispose()
    assert summary.succeeded == 8 and summary.report is not None
    check_worker_run(spans.get_finished_spans(), cid, 8, "w-threads")


def test_async_worker_lanes_nest_the_evaluators_spans(
    ledger_db: Database, spans: InMemorySpanExporter
) -> None:
    plan = make_plan(cases=4)
    cid = CampaignService(ledger_db).create(plan.policy, plan.suite)
    tracer = trace.get_tracer("test.evaluator")

    async def evaluate(claim: ClaimedCase, heartbeat: Any) -> Mapping[str, Any]:
        await asyncio.sleep(0.02)  # another lane runs meanwhile
        attributes = {"case": claim.suite_case_key, "locale": claim.target_locale}
        with tracer.start_as_current_span(EVALUATOR_SPAN, attributes=attributes):
            await asyncio.sleep(0.01)
            await heartbeat()
            return result_for(claim)

    async def main() -> Any:
        database = AsyncDatabase(ledger_db.url, pool_size=pool_size_for(3))
        try:
            service = AsyncCampaignService(database)
            return await AsyncWorker(service, cid, "w-asyncio", evaluate, concurrency=3).run()
        finally:
            await database.dispose()

    summary = asyncio.run(main())
    assert summary.succeeded == 8 and summary.report is not None
    check_worker_run(spans.get_finished_spans(), cid, 8, "w-asyncio")


# -- study writes --------------------------------------------------------------------


def test_each_study_write_is_a_span(
    ledger_db: Database,
    ledger_clock: LedgerClock,
    study_service: StudyService,
    spans: InMemorySpanExporter,
) -> None:
    kit = Kit(ledger_db, ledger_clock, study_service)  # bootstraps the owner, grants 3 roles
    writes = named(spans.get_finished_spans(), tracing.STUDY_WRITE)
    assert [dict(span.attributes or {}) for span in writes] == [
        {},  # bootstrapping the first owner authorizes no operation, on no study
        *[{tracing.STUDY_OPERATION: "access.grant_role"}] * 3,
    ]
    study = kit.study()
    material = kit.material()
    spans.clear()
    kit.member(study.id, material)
    (write,) = spans.get_finished_spans()
    assert write.name == tracing.STUDY_WRITE and write.parent is None
    assert dict(write.attributes or {}) == {
        tracing.STUDY_OPERATION: "studies.prepare_trial",
        tracing.STUDY_ID: study.id,
    }
    assert write.status.status_code is StatusCode.UNSET

    spans.clear()
    with pytest.raises(LedgerError):
        study_service.prepare_trial(
            OWNER,
            study.id,
            revision=1,  # stale: the trial moved the study on
            material=kit.material().ref,
            replicate=0,
            request_key=kit.key("trial"),
        )
    refused = named(spans.get_finished_spans(), tracing.STUDY_WRITE)[-1]
    assert refused.attributes is not None
    assert refused.attributes[tracing.STUDY_OPERATION] == "studies.prepare_trial"
    assert refused.status.status_code is StatusCode.ERROR


# -- without a recording tracer ------------------------------------------------------

_WORKER_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    class BlockOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    mode, path = sys.argv[1], sys.argv[2]
    if mode == "absent":
        sys.meta_path.insert(0, BlockOpenTelemetry())

    import benchledger as bl
    from benchledger import tracing
    from benchledger.examples import example_policy, example_suite
    from benchledger.examples.evaluator import evaluate

    asked = []  # spans asked of the API's tracer (none needed while nothing records)
    lookups = []  # the API asked for its global provider (each looks at os.environ)
    if tracing.AVAILABLE:
        from opentelemetry import trace

        start_span = tracing._tracer.start_span
        tracing._tracer.start_span = lambda *a, **k: asked.append(a[0]) or start_span(*a, **k)
        get_provider = trace.get_tracer_provider
        trace.get_tracer_provider = lambda: lookups.append(1) or get_provider()

    with tracing.span("probe", **{tracing.CASE_KEY: "k"}) as probe:
        probe.set_attribute(tracing.ATTEMPT, 1)
        probe.set_status("error", "x")
    db = bl.Database("sqlite:///" + path)
    db.upgrade()
    suite = example_suite(cases=2)
    campaigns = bl.CampaignService(db)
    cid = campaigns.create(example_policy(suite), suite)
    summary = bl.Worker(campaigns, cid, "w-1", evaluate, retry_base_seconds=0).run()
    studies = bl.StudyService(db)
    studies.bootstrap_owner("alice")
    print(json.dumps({
        "available": tracing.AVAILABLE,
        "noop": probe is tracing.NOOP and not probe.is_recording(),
        "succeeded": summary.succeeded,
        "report": summary.report.status,
        "asked": asked,
        "lookups": len(lookups),
        "otel_imported": sorted(
            name for name in sys.modules if name.split(".")[0] == "opentelemetry"
        ),
    }))
    """
)


def _run_worker_script(mode: str, tmp_path: Path, **environment: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _WORKER_SCRIPT, mode, str(tmp_path / "ledger.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if k != "OTEL_PYTHON_TRACER_PROVIDER"},
            **environment,
        },
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["succeeded"] == 8 and seen["report"] == "succeeded"
    return seen


@pytest.mark.parametrize("mode", ["absent", "no_provider"])
def test_without_a_recording_tracer_a_worker_runs_as_before(mode: str, tmp_path: Path) -> None:
    seen = _run_worker_script(mode, tmp_path)
    assert seen["noop"]
    assert seen["asked"] == []  # a span no one records is not even asked for
    # Nor is the API's provider looked up (and os.environ with it) for each span.
    assert seen["lookups"] == 0
    if mode == "absent":
        assert (seen["available"], seen["otel_imported"]) == (False, [])
    else:
        assert seen["available"] and "opentelemetry.trace" in seen["otel_imported"]


def test_a_provider_named_by_the_environment_records_the_spans(tmp_path: Path) -> None:
    """``OTEL_PYTHON_TRACER_PROVIDER`` set before benchledger is imported: the API loads
    the SDK's provider on first use, and every case's spans are asked for."""
    seen = _run_worker_script(
        "environment", tmp_path, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider"
    )
    assert not seen["noop"] and seen["lookups"] > 0
    assert "probe" in seen["asked"] and seen["asked"].count(tracing.CASE) >= 8  # each attempt


def test_the_facade_leaves_out_nulls_and_describes_only_errors(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.span("outer", **{tracing.CASE_KEY: "k", tracing.OUTCOME_CODE: None}) as outer:
        assert outer.is_recording() and outer is not tracing.NOOP
        outer.set_attribute(tracing.ATTEMPT, 2)
        outer.set_attribute(tracing.LOCALE, None)
        outer.set_status("ok", "ignored")
        with pytest.raises(ValueError), tracing.span("inner") as inner:
            inner.set_attributes({tracing.WORKER_ID: "w", tracing.STUDY_ID: None})
            raise ValueError("bad")
    inner_span, outer_span = spans.get_finished_spans()
    assert dict(outer_span.attributes or {}) == {tracing.CASE_KEY: "k", tracing.ATTEMPT: 2}
    assert outer_span.status.status_code is StatusCode.OK
    assert outer_span.status.description is None
    assert dict(inner_span.attributes or {}) == {tracing.WORKER_ID: "w"}
    assert inner_span.status.status_code is StatusCode.ERROR
    assert inner_span.parent is not None and outer_span.context is not None
    assert inner_span.parent.span_id == outer_span.context.span_id
    assert [event.name for event in inner_span.events] == ["exception"]
