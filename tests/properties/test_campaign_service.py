"""Hostile arguments to every public CampaignService method: refused with a documented
code and the database unchanged, or accepted; never a raw Python exception.

Arguments are chosen per parameter name: a valid value of the campaigns the
test set up (a live claim, a live report claim, ...) or a hostile one (wrong
type, surrogate, control or format characters, huge or non-finite numbers,
deep nesting, huge text). Every parameter of every method meets every value of
``FOCUSED`` (the others valid), then hypothesis mixes hostile values. A public
method added later is covered through its signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings

from benchledger.db import Database
from benchledger.domain.campaign_results import ClaimedCase, ClaimedReport, Completion
from benchledger.services.campaigns import CampaignService
from benchledger.testing.clock import LedgerClock
from benchledger.testing.factories import CampaignPolicyFactory, SuiteCaseFactory, SuiteFactory

from .helpers import Prober, probe_every_parameter, refused_by
from .hostile import FOCUSED_NAMES, Valid, call_of

EXAMPLES = 150
#: Items of the open campaign: enough that accepted claims never run out.
CASES = 60
METHODS = {
    name: function
    for name, function in inspect.getmembers(CampaignService, inspect.isfunction)
    if not name.startswith("_")
}


#: The focused hostile values a parameter accepts (``method[parameter]``): every other
#: one it must refuse, alone (the focused sweep) or among other hostile arguments (the
#: mixed probes). Optional parameters take ``None``; flags take ``True``.
#: A parameter whose default is None takes None (``now=None``: the service's clock).
_OPTIONAL: dict[str, tuple[str, ...]] = {
    f"{method}[{name}]": ("None",)
    for method, function in METHODS.items()
    for name, parameter in inspect.signature(function).parameters.items()
    if parameter.default is None
}
_NAMED: dict[str, tuple[str, ...]] = {
    "list[where]": ("None",),
    "delete[force]": ("True",),
    "fail_report[retryable]": ("True",),
    "fail[retryable]": ("True",),
    # A failure's detail is kept only as its sha256: any NFC text without NUL.
    "fail[detail]": ("bidi", "zero-width", "newline", "huge-text"),
    "fail_report[detail]": ("bidi", "zero-width", "newline", "huge-text"),
    "health[verify]": ("True",),
    "health[progress]": ("function",),  # any callable
    "verify[progress]": ("function",),
    # health() and verify() report what they find, never refuse: an id that names no
    # campaign is the reason / problem not_found (docs/operations.md).
    "health[campaign_id]": FOCUSED_NAMES,
    "verify[campaign_id]": FOCUSED_NAMES,
    "compare[seed]": ("2**63",),  # a PCG64 seed: any integer below 2**128
    "load_report[provisional]": ("True",),
    "rename[name]": ("None",),  # clears the name
}
ACCEPTS: dict[str, frozenset[str]] = {
    label: frozenset(_OPTIONAL.get(label, ())) | frozenset(_NAMED.get(label, ()))
    for label in {*_OPTIONAL, *_NAMED}
}


def _result(claim: ClaimedCase) -> dict[str, Any]:
    suite = {"case_key": claim.suite_case_key, "suite_sha256": claim.job_payload["suite_sha256"]}
    return {"target_locale": claim.target_locale, "suite": suite, "score": 0.5}


class World:
    """Two campaigns: one with an item claimed, one finished with its report claimed."""

    def __init__(self, service: CampaignService) -> None:
        self.service = service
        suites = [
            SuiteFactory(cases=[SuiteCaseFactory(key=f"{tag}-{i}") for i in range(count)])
            for tag, count in (("open", CASES), ("done", 2))
        ]
        self.policies = [
            CampaignPolicyFactory(suite=s, required_locales=("de-DE",)) for s in suites
        ]
        self.suite = suites[0]
        self.open_id = service.create(self.policies[0], suites[0], max_attempts=20)
        self.done_id = service.create(self.policies[1], suites[1])
        while (claim := service.claim(self.done_id, "w-done")) is not None:
            service.complete(claim, _result(claim))
        report = service.claim_report(self.done_id, "w-report")
        assert report is not None
        self.report: ClaimedReport = report
        self.claim = self.fresh_claim()

    def fresh_claim(self) -> ClaimedCase:
        claim = self.service.claim(self.open_id, "w-open")
        assert claim is not None
        return claim

    def after(self, name: str) -> None:
        """Keep a live claim when there is one to take: a call that succeeded may have
        completed or failed it (or cancelled, paused or deleted the campaign: then the
        old claim stays, and calls with it are refused as they should be)."""
        if name in (
            "complete",
            "complete_batch",
            "complete_and_claim",
            "fail",
            "claim",
            "claim_batch",
            "throttle",
        ):
            self.claim = self.service.claim(self.open_id, "w-open") or self.claim

    def valid(self, method: str) -> dict[str, Valid]:
        report = method.endswith("_report") and method != "load_report"
        return {
            "campaign_id": lambda: self.done_id if report else self.open_id,
            "campaign_a": lambda: self.open_id,
            "campaign_b": lambda: self.open_id,
            "worker_id": lambda: "w-1",
            "now": lambda: None,
            "lease_seconds": lambda: 300,
            "claim": lambda: self.report if report else self.claim,
            "result": lambda: _result(self.claim),
            "code": lambda: "example.failure",
            "retryable": lambda: True,
            "delay_seconds": lambda: 0,
            "detail": lambda: None,
            "cursor": lambda: None,
            "limit": lambda: 10,
            "stale_after_seconds": lambda: 3600,
            "operation_guard": lambda: None,
            "policy": lambda: self.policies[0],
            "suite": lambda: self.suite,
            "max_attempts": lambda: 20,
            "name": lambda: "a campaign",
            "max_throttles": lambda: 100,
            "limit_group": lambda: None,
            "evaluator": lambda: None,
            "cost_units": lambda: 0,
            "retry_after": lambda: 1,
            "group": lambda: "test-provider",
            "providers": lambda: (),
            "campaign_ids": lambda: (),
            "n": lambda: 2,
            "completions": lambda: [Completion(self.claim, _result(self.claim))],
        }


def _call(world: World, name: str) -> Any:
    def call(**arguments: Any) -> None:
        value = getattr(world.service, name)(**arguments)
        if isinstance(value, Iterator):
            list(value)  # a lazy method (iter_results) checks when it is read
        world.after(name)

    return call


def test_every_parameter_refuses_every_hostile_value(
    ledger_db: Database, ledger_clock: LedgerClock, ledger_backend: str, prober: Prober
) -> None:
    world = World(CampaignService(ledger_db, clock=ledger_clock))
    probe_every_parameter(
        prober, METHODS, world.valid, lambda name: _call(world, name), ledger_backend, ACCEPTS
    )
    assert prober.refusals  # the probes reached the checks


def test_mixed_hostile_arguments_are_refused_with_a_code(
    ledger_db: Database, ledger_clock: LedgerClock, prober: Prober
) -> None:
    world = World(CampaignService(ledger_db, clock=ledger_clock))

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(call=call_of(METHODS, world.valid, refused_by(ACCEPTS)))
    def run(call: tuple[str, dict[str, Any]]) -> None:
        name, arguments = call
        # One argument is a value its parameter must refuse: so must the call.
        assert not prober.probe(_call(world, name), name, **arguments), f"{name} accepted"

    run()
