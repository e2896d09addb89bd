"""Traces: OpenTelemetry spans of cases, reports and study writes, when it is installed.

A tiny facade over ``opentelemetry-api`` (the ``otel`` extra). Whether the API
is importable is decided once, when this module is imported:

- absent: :func:`span` returns one shared :class:`Span` that records nothing,
  and nothing of OpenTelemetry is ever imported (a case pays one call and a
  ``with``);
- present: spans come from the tracer ``benchledger`` of the global tracer
  provider. Until an application sets one (the SDK's ``TracerProvider``, with an
  exporter), that is the API's no-op tracer: no span is asked of it, and every
  span is :data:`NOOP`. A provider named by ``OTEL_PYTHON_TRACER_PROVIDER``
  counts if the variable is set before benchledger is imported.

The drivers set their attributes only when :meth:`Span.is_recording` says so,
so an unrecorded span costs no attribute either. The span names and attribute
names are the constants below; ``docs/operations.md`` ("Traces") lists which
span carries which.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Final, Literal, TypeAlias

try:
    from opentelemetry import environment_variables as _environment
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed: every span is NOOP
    _trace = None  # type: ignore[assignment]

#: A slot of the API not found (a release that renamed it): ask the API itself.
_UNKNOWN: Final = object()

#: Whether ``opentelemetry-api`` is importable (spans are recorded once a provider is set).
AVAILABLE: Final = _trace is not None
#: The tracer (instrumentation scope) every benchledger span comes from.
TRACER_NAME: Final = "benchledger"

# The spans.
CASE: Final = "benchledger.case"
REPORT: Final = "benchledger.report"
CLAIM: Final = "benchledger.claim"
EVALUATE: Final = "benchledger.evaluate"
SUMMARIZE: Final = "benchledger.summarize"
RECORD: Final = "benchledger.record"
STUDY_WRITE: Final = "benchledger.study.write"

# Their attributes.
CAMPAIGN_ID: Final = "benchledger.campaign.id"
LOCALE: Final = "benchledger.campaign.locale"
CASE_KEY: Final = "benchledger.case.key"
ATTEMPT: Final = "benchledger.case.attempt"
OUTCOME_STATUS: Final = "benchledger.outcome.status"
OUTCOME_CODE: Final = "benchledger.outcome.code"
WORKER_ID: Final = "benchledger.worker.id"
STUDY_ID: Final = "benchledger.study.id"
STUDY_OPERATION: Final = "benchledger.study.operation"

#: An attribute's value; ``None`` is left out (OpenTelemetry takes no null).
Value: TypeAlias = str | bool | int | float | None
Status: TypeAlias = Literal["ok", "error"]

#: Time in OpenTelemetry's unit (nanoseconds since the epoch), for a span's ``start_time``.
now: Final = time.time_ns


class Span:
    """A span as benchledger's code uses it. This one records nothing: it is the span
    when OpenTelemetry is absent, and when the span is not recorded (no provider, or
    not sampled). It is also its own context manager."""

    __slots__ = ()

    def is_recording(self) -> bool:
        """Whether anything set on this span is kept (compute attributes only if so)."""
        return False

    def set_attribute(self, key: str, value: Value) -> None:
        """Set one attribute (``None``: left out)."""

    def set_attributes(self, attributes: Mapping[str, Value]) -> None:
        """Set attributes (``None`` values are left out)."""

    def set_status(self, status: Status, description: str | None = None) -> None:
        """Mark the span ``"ok"`` or ``"error"`` (with a description, for an error)."""

    def record_exception(self, exception: BaseException) -> None:
        """Add ``exception`` to the span as an event (its type, message and stack)."""

    def __enter__(self) -> Span:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        return None


#: The one span that records nothing.
NOOP: Final = Span()


def _present(attributes: Mapping[str, Value]) -> dict[str, str | bool | int | float]:
    return {key: value for key, value in attributes.items() if value is not None}


if _trace is None:

    def span(
        name: str, *, start_time: int | None = None, **attributes: Value
    ) -> AbstractContextManager[Span]:
        """A span named ``name``, current in the ``with`` block (no-op: OpenTelemetry is
        absent)."""
        return NOOP

    def finished(
        name: str, start_time: int, *, error: BaseException | None = None, **attributes: Value
    ) -> None:
        """A span that already happened (no-op: OpenTelemetry is absent)."""

else:
    _tracer = _trace.get_tracer(TRACER_NAME)
    _STATUS: Final = {"ok": _trace.StatusCode.OK, "error": _trace.StatusCode.ERROR}
    #: Providers whose tracers make only no-op spans: none set yet (the API's proxy
    #: stands in), or the API's no-op provider.
    _SILENT: Final = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)

    #: Whether a provider is named by the environment (``OTEL_PYTHON_TRACER_PROVIDER``)
    #: when this module is imported; the API loads it on first use.
    _NAMED_BY_ENVIRONMENT: Final = _environment.OTEL_PYTHON_TRACER_PROVIDER in os.environ

    def _silent() -> bool:
        """Whether no span would be recorded: then none is asked for (starting a no-op
        span still costs a case four calls into the API, each looking up the context).

        While no provider is set, nor named by the environment, that is the API's
        global slot being empty (0.04 µs), where ``get_tracer_provider()`` looks the
        variable up in ``os.environ`` (0.6 µs) at each of a case's four spans. Once a
        provider is set, the API decides."""
        if getattr(_trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _NAMED_BY_ENVIRONMENT:
            return True
        return isinstance(_trace.get_tracer_provider(), _SILENT)

    class _Recorded(Span):
        """A recording OpenTelemetry span behind the facade."""

        __slots__ = ("_span",)

        def __init__(self, otel_span: _trace.Span) -> None:
            self._span = otel_span

        def is_recording(self) -> bool:
            return self._span.is_recording()

        def set_attribute(self, key: str, value: Value) -> None:
            if value is not None:
                self._span.set_attribute(key, value)

        def set_attributes(self, attributes: Mapping[str, Value]) -> None:
            self._span.set_attributes(_present(attributes))

        def set_status(self, status: Status, description: str | None = None) -> None:
            self._span.set_status(_STATUS[status], description if status == "error" else None)

        def record_exception(self, exception: BaseException) -> None:
            self._span.record_exception(exception)

    @contextmanager
    def _current(otel_span: _trace.Span) -> Iterator[Span]:
        with _trace.use_span(otel_span, end_on_exit=True) as current:
            yield _Recorded(current) if current.is_recording() else NOOP

    def span(
        name: str, *, start_time: int | None = None, **attributes: Value
    ) -> AbstractContextManager[Span]:
        """A span named ``name``, a child of the current one and current in the ``with``
        block, so spans started inside it (an evaluator's) are its children.

        ``start_time`` (:func:`now`) dates its start back. An exception leaving the
        block is recorded on it, and marks it an error, as OpenTelemetry does.
        """
        if _silent():
            return NOOP
        otel_span = _tracer.start_span(
            name, attributes=_present(attributes) if attributes else None, start_time=start_time
        )
        if not otel_span.get_span_context().is_valid:
            # The no-op tracer's span (no provider): making it current changes nothing.
            return NOOP
        return _current(otel_span)

    def finished(
        name: str, start_time: int, *, error: BaseException | None = None, **attributes: Value
    ) -> None:
        """A span that already happened: from ``start_time`` to now, a child of the
        current span (a root where there is none); an error if ``error`` is an
        ``Exception`` (recorded on it)."""
        if _silent():
            return
        otel_span = _tracer.start_span(
            name, attributes=_present(attributes) if attributes else None, start_time=start_time
        )
        if isinstance(error, Exception) and otel_span.is_recording():
            otel_span.record_exception(error)
            otel_span.set_status(_trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
        otel_span.end()
