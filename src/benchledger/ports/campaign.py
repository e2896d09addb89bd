"""Collaborators of the campaign service, as Protocols (defaults live in ``adapters``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_results import ClaimedCase

Heartbeat = Callable[[], None]
"""Renews the current lease now; raises ``benchmark.campaign.lease_lost`` if it is gone."""


@runtime_checkable
class ResultVerifier(Protocol):
    """Decides whether a case result may be stored (and still trusted once stored).

    Called on ``complete`` (before anything is written), and again on every
    stored result by ``summarize``, ``load_report`` and ``health``, so a result
    edited in the database after it was accepted is detected. Raise any
    exception to reject; the service maps it to ``benchmark.campaign.result_invalid``
    (on complete) or ``state_invalid`` (on stored results).
    """

    def verify_result(self, result: Mapping[str, Any], policy: CampaignPolicy) -> None: ...


@runtime_checkable
class ReportBuilder(Protocol):
    """Builds a campaign's immutable report from its results, and re-verifies it.

    ``results`` are the verified results in (locale, case key) order. ``build``
    must be deterministic: ``verify`` of a stored report may rebuild and compare.
    Raise any exception from ``verify`` to reject (``benchmark.campaign.report_invalid``).
    An exception from ``build`` reaches the caller as it is; the report driver
    records it with its ``code`` (else ``report_unexpected``) and retries it
    unless it declares ``retryable=False``.
    """

    def build(
        self, policy: CampaignPolicy, suite: Suite, results: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]: ...

    def verify(
        self,
        report: Mapping[str, Any],
        policy: CampaignPolicy,
        suite: Suite,
        results: Sequence[Mapping[str, Any]],
    ) -> None: ...


class Evaluate(Protocol):
    """Runs one claimed case and returns its result (a JSON mapping).

    ``claim.job_payload`` holds everything the case needs (source text, target
    locale, candidate identity). Call ``heartbeat()`` during long work to renew
    the lease (the worker also renews in the background). Raise
    :class:`~benchledger.errors.DependencyFailed` for a dependency failure with
    explicit retry ownership; any other exception is recorded as
    ``benchmark.campaign.unexpected`` and retried.
    """

    def __call__(self, claim: ClaimedCase, heartbeat: Heartbeat) -> Mapping[str, Any]: ...
