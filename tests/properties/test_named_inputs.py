"""The hostile inputs of the reliability report, one by one, on both backends.

Each is refused with its input's own code and changes nothing (or, for a
worker, is recorded as the rejected result it is).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_plan import CampaignPolicy, Suite, SuiteCase
from benchledger.domain.campaign_results import ClaimedCase
from benchledger.domain.study import MAX_DOCUMENT_BYTES, Budget
from benchledger.domain.study_evidence import Observation, RunEvidence
from benchledger.errors import LedgerError
from benchledger.examples import example_policy, example_suite
from benchledger.examples import study as study_example
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.testing.clock import LedgerClock
from benchledger.workers.drivers import run_next_case

from .helpers import Prober
from .hostile import deep_list

SURROGATE, BIDI, ZERO_WIDTH = "w\ud800", "w\u202eevil", "w\u200bx"


def refused(prober: Prober, expected: str, call: Callable[..., Any], **arguments: Any) -> str:
    """``call`` is refused with ``expected`` and writes nothing; returns the message."""
    messages: list[str] = []

    def capture(**kwargs: Any) -> None:
        try:
            call(**kwargs)
        except LedgerError as error:
            assert error.code == expected, error
            messages.append(str(error))
            raise

    assert not prober.probe(capture, getattr(call, "__name__", "call"), **arguments)
    return messages[0]


# -- campaigns ---------------------------------------------------------------------------


@pytest.fixture
def campaigns(ledger_db: Database, ledger_clock: LedgerClock) -> CampaignService:
    return CampaignService(ledger_db, clock=ledger_clock)


@pytest.fixture
def cid(campaigns: CampaignService) -> str:
    suite = example_suite(cases=2)
    return campaigns.create(example_policy(suite), suite)


@pytest.fixture
def claim(campaigns: CampaignService, cid: str) -> ClaimedCase:
    claimed = campaigns.claim(cid, "w-1")
    assert claimed is not None
    return claimed


def test_identifiers_refuse_surrogates_and_control_and_format_characters(
    campaigns: CampaignService, cid: str, prober: Prober
) -> None:
    for worker in (SURROGATE, BIDI, ZERO_WIDTH, "w\u2066x\u2069", "w\x85x", "w\u2028x", "w\tx"):
        refused(prober, dom.IDENTITY_INVALID, campaigns.claim, campaign_id=cid, worker_id=worker)
        refused(
            prober, dom.IDENTITY_INVALID, campaigns.claim_report, campaign_id=cid, worker_id=worker
        )
    # Letters of any script, and look-alikes, are identifiers (see docs/errors.md).
    for worker in ("wörker-1", "работник", "工作者", "w\u043erker"):  # a Cyrillic o
        assert dom.is_identifier(worker)


def test_a_surrogate_in_a_failure_detail_is_failure_invalid(
    campaigns: CampaignService, claim: ClaimedCase, prober: Prober
) -> None:
    refused(
        prober,
        dom.FAILURE_INVALID,
        campaigns.fail,
        claim=claim,
        code="example.timeout",
        detail="bad \ud800 detail",
    )


def test_policy_and_suite_fields_refuse_surrogates_and_format_characters() -> None:
    suite = example_suite(cases=1)
    payload = example_policy(suite).as_payload()
    for text in (SURROGATE, BIDI, ZERO_WIDTH):
        with pytest.raises(LedgerError) as caught:
            CampaignPolicy.from_payload({**payload, "candidate_model_id": text})
        assert caught.value.code == dom.POLICY_INVALID
        case = suite.cases[0].as_payload()
        for field in ("key", "source_id"):
            with pytest.raises(LedgerError) as caught:
                SuiteCase.from_payload({**case, field: text})
            assert caught.value.code == dom.SUITE_INVALID
    # Source text may hold line breaks and format characters, never a lone surrogate.
    case = suite.cases[0].as_payload()
    Suite([SuiteCase.from_payload({**case, "source_text": "line one\nline\u200btwo"})])
    with pytest.raises(LedgerError) as caught:
        SuiteCase.from_payload({**case, "source_text": "text \udfff"})
    assert caught.value.code == dom.SUITE_INVALID


def test_a_result_with_a_huge_integer_is_result_invalid(
    campaigns: CampaignService, claim: ClaimedCase, prober: Prober
) -> None:
    result = {
        "target_locale": claim.target_locale,
        "suite": {"case_key": claim.suite_case_key},
        "x": 10**5000,
    }
    refused(prober, dom.RESULT_INVALID, campaigns.complete, claim=claim, result=result)
    refused(prober, dom.RESULT_INVALID, campaigns.complete, claim=claim, result={"x": -(10**4300)})


def test_a_worker_records_a_huge_integer_result_as_a_rejected_result(
    campaigns: CampaignService, cid: str, ledger_clock: LedgerClock
) -> None:
    def evaluate(claim: ClaimedCase, _heartbeat: Callable[[], None]) -> dict[str, Any]:
        return {"x": 10**5000}

    outcome = run_next_case(campaigns, cid, "w-1", evaluate, ledger_clock, retry_base_seconds=0)
    assert outcome is not None
    assert outcome.status == "retry_wait" and outcome.error_code == dom.RESULT_INVALID
    assert campaigns.status(cid).counts["leased"] == 0  # not left leased until expiry


def test_summarize_refuses_an_operation_guard_that_is_not_callable(
    campaigns: CampaignService, cid: str, prober: Prober
) -> None:
    for guard in (1, "guard", object()):
        refused(
            prober,
            dom.DEPENDENCY_INVALID,
            campaigns.summarize,
            campaign_id=cid,
            operation_guard=guard,
        )


# -- studies -----------------------------------------------------------------------------

OWNER = "olivia"


@pytest.fixture
def studies(ledger_db: Database, ledger_clock: LedgerClock) -> StudyService:
    service = StudyService(ledger_db, clock=ledger_clock)
    service.bootstrap_owner(OWNER)
    return service


def test_huge_integers_in_recipes_and_observations_are_invalid(
    studies: StudyService, prober: Prober
) -> None:
    for recipe in ({"x": 10**5000}, [10**4300], {"nested": {"x": -(10**4301)}}):
        refused(
            prober,
            "invalid",
            studies.register_material,
            actor=OWNER,
            recipe=recipe,
            envelope=study_example.ENVELOPE,
            trainer_id="trainer",
        )
    for value in (10**400, 10**5000, -(10**309)):
        with pytest.raises(LedgerError) as caught:
            Observation("a" * 64, "metric", "observed", value)
        assert caught.value.code == "invalid"
    assert Observation("a" * 64, "metric", "observed", 3).value == 3.0  # stored as a float


def test_study_documents_are_bounded_to_one_mebibyte(studies: StudyService, prober: Prober) -> None:
    message = refused(
        prober,
        "invalid",
        studies.register_material,
        actor=OWNER,
        recipe={"blob": "x" * 10_000_000},
        envelope=study_example.ENVELOPE,
        trainer_id="trainer",
    )
    assert "1048576 bytes" in message
    # Just under the bound is accepted; multi-byte text counts its UTF-8 bytes.
    assert prober.probe(
        studies.register_material,
        "register_material",
        actor=OWNER,
        recipe="x" * (MAX_DOCUMENT_BYTES - 2),
        envelope=study_example.ENVELOPE,
        trainer_id="trainer",
    )
    refused(
        prober,
        "invalid",
        studies.register_material,
        actor=OWNER,
        recipe="é" * (MAX_DOCUMENT_BYTES // 2),
        envelope=study_example.ENVELOPE,
        trainer_id="trainer",
    )
    evidence = study_example.example_evidence("run-1", "a" * 64).to_document()
    evidence["coverage"]["optional"] = [f"capability {index:07d}" for index in range(60_000)]
    with pytest.raises(LedgerError) as caught:
        RunEvidence.from_document(evidence)
    assert caught.value.code == "invalid" and "exceeds" in str(caught.value)


def test_enum_arguments_never_repr_the_value(studies: StudyService, prober: Prober) -> None:
    deep = deep_list(10_000)
    message = refused(prober, "invalid", studies.grant_role, actor=OWNER, subject="erin", role=deep)
    assert "list" in message and len(message) < 200
    message = refused(
        prober, "invalid", studies.report_run, actor=OWNER, run_id="run-1", state=deep
    )
    assert len(message) < 200
    message = refused(
        prober, "invalid", studies.grant_role, actor=OWNER, subject="erin", role="x" * 100_000
    )
    assert len(message) < 200 and "..." in message
    message = refused(
        prober, "invalid", studies.grant_role, actor=OWNER, subject="erin", role="\ud800"
    )
    assert "\\ud800" in message  # quoted in ASCII


def test_study_names_refuse_surrogates_and_format_characters(
    studies: StudyService, prober: Prober
) -> None:
    for name in ("study \ud800", "study \u202e", "study\u200b", "a\nb"):
        refused(
            prober,
            "invalid",
            studies.create,
            actor=OWNER,
            name=name,
            limits=Budget(1, 1, 1, 1),
            policy=study_example.example_policy(),
            request_key="create-0001",
        )
    studies.create(
        OWNER,
        name="Étude · 研究 ✓",
        limits=Budget(1, 1, 1, 1),
        policy=study_example.example_policy(),
        request_key="create-0002",
    )


def test_a_service_refuses_ports_and_clocks_that_do_not_conform(ledger_db: Database) -> None:
    for arguments in ({"clock": 1}, {"runs": object()}, {"access": "policy"}):
        with pytest.raises(LedgerError) as caught:
            StudyService(ledger_db, **arguments)
        assert caught.value.code == "invalid"
    for db in (None, ledger_db.url, ledger_db.engine):
        with pytest.raises(LedgerError) as caught:
            StudyService(db)  # type: ignore[arg-type]
        assert caught.value.code == "invalid"
    for reading in (float("nan"), -1.0, "now", None):
        service = StudyService(ledger_db, clock=lambda value=reading: value)
        with pytest.raises(LedgerError) as caught:
            service.bootstrap_owner(OWNER)
        assert caught.value.code == "invalid"
