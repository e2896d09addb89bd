# mypy: disable-error-code="no-untyped-call"
"""Factories for benchmark campaigns: value objects, and rows consistent with them.

Value-object factories (``factory.Factory``) return the real attrs objects,
so every hash and id is computed by the domain code itself:
``SuiteFactory().sha256`` *is* ``Suite.sha256``; a policy's ``suite_sha256``
is its suite's; a plan's ``campaign_id`` and work ids are ``CampaignPlan``'s.
"""

from __future__ import annotations

from typing import Any

from factory.base import Factory
from factory.declarations import (
    LazyAttribute,
    LazyFunction,
    Maybe,
    RelatedFactory,
    SelfAttribute,
    Sequence,
    SubFactory,
)

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.domain.campaign import (
    ReportStatus,
    WorkStatus,
    dependency_code,
    results_sha256,
    work_id_for,
)
from benchledger.domain.campaign_plan import CampaignPlan, CampaignPolicy, Suite, SuiteCase
from benchledger.domain.campaign_results import encode_result
from benchledger.domain.canonical import canonical_json, sha256_text
from benchledger.domain.integrity import result_seal
from benchledger.models.campaign import (
    AttemptRow,
    CampaignRow,
    ClaimLogRow,
    LimitGroupRow,
    LimitGroupUsageRow,
    ReportRow,
    ReportStateRow,
    StoredPolicyRow,
    StoredSuiteRow,
    WorkRow,
)
from benchledger.testing.factories._binding import LedgerModelFactory, factory_now

#: 2100-01-01T00:00:00Z: policies stay valid for any test clock unless told otherwise.
FAR_FUTURE = 4_102_444_800.0


class SuiteCaseFactory(Factory[SuiteCase]):
    """A :class:`SuiteCase` with a unique key (``case-0001``, ...)."""

    class Meta:
        model = SuiteCase

    key = Sequence(lambda n: f"case-{n:04d}")
    source_id = Sequence(lambda n: f"source-{n:04d}")
    source_revision = "rev-1"
    source_text = Sequence(lambda n: f"Save your changes before leaving page {n}.")
    source_locale = "en-US"
    content_type = "text/plain"


class SuiteFactory(Factory[Suite]):
    """A :class:`Suite` of ``case_count`` (default 2) fresh cases, or the ``cases`` given."""

    class Meta:
        model = Suite

    class Params:
        case_count = 2

    cases = LazyAttribute(lambda o: tuple(SuiteCaseFactory.build_batch(o.case_count)))


class CampaignPolicyFactory(Factory[CampaignPolicy]):
    """A :class:`CampaignPolicy` bound to ``suite`` (a new :class:`SuiteFactory` suite).

    Pass ``suite=`` to bind a suite of your own; ``suite_sha256`` follows it.
    """

    class Meta:
        model = CampaignPolicy

    class Params:
        suite = SubFactory(SuiteFactory)

    suite_sha256 = LazyAttribute(lambda o: o.suite.sha256)
    required_locales = ("de-DE", "fr-FR")
    valid_until = FAR_FUTURE
    candidate_provider_id = "test-provider"
    candidate_model_id = "test-model"
    candidate_model_version = "1.0"
    candidate_software_version = "1.0"
    candidate_glossary_version = "glossary-1"
    candidate_policy_version = "policy-1"


class CampaignPlanFactory(Factory[CampaignPlan]):
    """A consistent :class:`CampaignPlan`: a suite and a policy bound to it.

    ``CampaignPlanFactory(suite__case_count=5, policy__required_locales=["ja"])``.
    """

    class Meta:
        model = CampaignPlan

    suite = SubFactory(SuiteFactory)
    policy = SubFactory(CampaignPolicyFactory, suite=SelfAttribute("..suite"))


# -- results and reports (what a worker and the report builder produce) -------------------


def case_result(
    plan: CampaignPlan, target_locale: str, suite_case_key: str, score: float = 1.0
) -> dict[str, Any]:
    """A result the default :class:`StructuralResultVerifier` accepts for one item."""
    return {
        "target_locale": target_locale,
        "suite": {"case_key": suite_case_key, "suite_sha256": plan.suite.sha256},
        "score": score,
        "passed": score >= 0.5,
    }


def _encoded(result: dict[str, Any]) -> tuple[str, str]:
    _value, text = encode_result(result)
    return text, sha256_text(text)


def plan_results(plan: CampaignPlan, score: float = 1.0) -> list[dict[str, Any]]:
    """Every item's :func:`case_result`, in the order the service reads them back."""
    items = sorted((work.target_locale, work.suite_case_key) for work in plan.work())
    return [case_result(plan, locale, key, score) for locale, key in items]


# -- rows ------------------------------------------------------------------------------

_LEASE_SECONDS = 300.0
_RETRY_SECONDS = 60.0
#: The error code factory rows in ``retry_wait`` or ``failed`` carry.
TEST_FAILURE_CODE = dependency_code("test.unavailable")


class StoredPolicyRowFactory(LedgerModelFactory):
    """A stored campaign policy (canonical JSON, keyed by its sha256); one row per digest."""

    class Meta:
        model = StoredPolicyRow
        sqlalchemy_get_or_create = ("policy_sha256",)

    class Params:
        policy = SubFactory(CampaignPolicyFactory)

    policy_sha256 = LazyAttribute(lambda o: o.policy.sha256)
    policy_json = LazyAttribute(lambda o: canonical_json(o.policy.as_payload()))
    created_at = LazyFunction(factory_now)


class StoredSuiteRowFactory(LedgerModelFactory):
    """A stored suite manifest (canonical JSON, keyed by its sha256); one row per digest."""

    class Meta:
        model = StoredSuiteRow
        sqlalchemy_get_or_create = ("suite_sha256",)

    class Params:
        suite = SubFactory(SuiteFactory)

    suite_sha256 = LazyAttribute(lambda o: o.suite.sha256)
    suite_json = LazyAttribute(lambda o: canonical_json(o.suite.manifest()))
    case_count = LazyAttribute(lambda o: len(o.suite.cases))
    created_at = LazyFunction(factory_now)


_CAMPAIGN_FACTORY = "benchledger.testing.factories.campaign.CampaignRowFactory"


def _single_item_plan() -> Any:
    return SubFactory(CampaignPlanFactory, suite__case_count=1, policy__required_locales=("de",))


class WorkRowFactory(LedgerModelFactory):
    """One work item of a campaign, in the state of ``status`` (default ``pending``).

    Given ``campaign`` (a :class:`CampaignRow`) and its ``plan``, it is that
    campaign's item for ``target_locale`` x ``suite_case_key`` (default: the
    first). Alone, it makes a one-item campaign (policy, suite, campaign row,
    report state) around itself. Every status is consistent: ``leased`` has a
    live lease, ``succeeded`` a verifiable result (``score``), ``retry_wait``
    and ``failed`` an error code (:data:`TEST_FAILURE_CODE`).
    """

    class Meta:
        model = WorkRow

    class Params:
        plan = _single_item_plan()
        campaign = SubFactory(_CAMPAIGN_FACTORY, plan=SelfAttribute("..plan"), work=None)
        now = SelfAttribute("campaign.created_at")
        score = 1.0
        result = LazyAttribute(
            lambda o: case_result(o.plan, o.target_locale, o.suite_case_key, o.score)
        )

    campaign_id = SelfAttribute("campaign.campaign_id")
    target_locale = LazyAttribute(lambda o: o.plan.policy.required_locales[0])
    suite_case_key = LazyAttribute(lambda o: o.plan.suite.cases[0].key)
    work_id = LazyAttribute(
        lambda o: work_id_for(
            o.plan.campaign_id,
            o.plan.policy.sha256,
            o.plan.suite.sha256,
            o.target_locale,
            o.suite_case_key,
        )
    )
    status = WorkStatus.PENDING
    attempts = LazyAttribute(
        lambda o: {WorkStatus.PENDING: 0, WorkStatus.FAILED: o.max_attempts}.get(o.status, 1)
    )
    max_attempts = 3
    next_attempt_at = LazyAttribute(
        lambda o: o.now + _RETRY_SECONDS if o.status == WorkStatus.RETRY_WAIT else o.now
    )
    lease_owner = LazyAttribute(lambda o: "test-worker" if o.status == WorkStatus.LEASED else None)
    lease_token = Maybe(
        LazyAttribute(lambda o: o.status == WorkStatus.LEASED),
        Sequence(lambda n: f"test-lease-{n:06d}"),
        None,
    )
    lease_expires_at = LazyAttribute(
        lambda o: o.now + _LEASE_SECONDS if o.status == WorkStatus.LEASED else None
    )
    last_error_code = LazyAttribute(
        lambda o: (
            TEST_FAILURE_CODE if o.status in (WorkStatus.RETRY_WAIT, WorkStatus.FAILED) else None
        )
    )
    last_error_detail_hash = None
    result_json = LazyAttribute(
        lambda o: _encoded(o.result)[0] if o.status == WorkStatus.SUCCEEDED else None
    )
    result_sha256 = LazyAttribute(
        lambda o: _encoded(o.result)[1] if o.status == WorkStatus.SUCCEEDED else None
    )
    # What complete() writes with a result, so the integrity audit finds the row sound.
    result_seal = LazyAttribute(
        lambda o: (
            result_seal(o.work_id, o.attempts, o.max_attempts, o.result_sha256)
            if o.status == WorkStatus.SUCCEEDED
            else None
        )
    )
    # When the (last) lease was granted: every item that was ever leased has one.
    leased_at = LazyAttribute(lambda o: None if o.status == WorkStatus.PENDING else o.now)
    # A made row has no attempt history: its history begins after the attempts it has
    # (AttemptRowFactory adds rows; give history_from=0 with them for a whole history).
    history_from = SelfAttribute("attempts")
    created_at = SelfAttribute("now")
    updated_at = SelfAttribute("now")


class _CampaignWorkFactory(Factory[list[WorkRow]]):
    """Every item of ``plan`` as a :class:`WorkRowFactory` row of ``campaign``."""

    class Meta:
        model = list

    plan = None
    campaign = None
    status = WorkStatus.PENDING
    max_attempts = 3
    score = 1.0

    @classmethod
    def _items(cls, make: Any, **kwargs: Any) -> list[WorkRow]:
        plan = kwargs.pop("plan")
        return [
            make(
                plan=plan,
                target_locale=item.target_locale,
                suite_case_key=item.suite_case_key,
                **kwargs,
            )
            for item in plan.work()
        ]

    @classmethod
    def _build(cls, model_class: Any, *args: Any, **kwargs: Any) -> list[WorkRow]:
        return cls._items(WorkRowFactory.build, **kwargs)

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> list[WorkRow]:
        return cls._items(WorkRowFactory.create, **kwargs)


class ClaimLogRowFactory(LedgerModelFactory):
    """One logged claim of a campaign with ``max_claims_per_minute`` (the flow-control log).

    Alone, it makes a campaign around itself; ``claimed_at`` defaults to the
    campaign's creation time (pass ``claimed_at`` to fill a recent minute).
    """

    class Meta:
        model = ClaimLogRow

    class Params:
        campaign = SubFactory(_CAMPAIGN_FACTORY)

    campaign_id = SelfAttribute("campaign.campaign_id")
    claimed_at = SelfAttribute("campaign.created_at")


class LimitGroupRowFactory(LedgerModelFactory):
    """A limit group's caps (``benchledger limits set``): 20 live leases, 600 claims a
    minute, no cost cap, by default; ``group_key`` defaults to the kit's provider."""

    class Meta:
        model = LimitGroupRow

    group_key = "test-provider"
    max_concurrent_leases = 20
    max_claims_per_minute = 600
    max_cost_per_minute = None
    created_at = LazyFunction(factory_now)
    updated_at = SelfAttribute("created_at")


class LimitGroupUsageRowFactory(LedgerModelFactory):
    """One claim (``claims=1``) or reported cost (``cost_units``) in a group's last minute."""

    class Meta:
        model = LimitGroupUsageRow

    group_key = "test-provider"
    used_at = LazyFunction(factory_now)
    claims = 1
    cost_units = 0


class ReportStateRowFactory(LedgerModelFactory):
    """A campaign's report-finalization state (``pending``, or ``succeeded`` with a report).

    Alone, it makes a campaign (see :class:`CampaignRowFactory`) around itself.
    """

    class Meta:
        model = ReportStateRow

    class Params:
        campaign = SubFactory(_CAMPAIGN_FACTORY, report_state=None)
        now = SelfAttribute("campaign.created_at")

    campaign_id = SelfAttribute("campaign.campaign_id")
    status = ReportStatus.PENDING
    attempts = LazyAttribute(lambda o: 1 if o.status == ReportStatus.SUCCEEDED else 0)
    max_attempts = 3
    next_attempt_at = SelfAttribute("now")
    lease_owner = None
    lease_token = None
    lease_expires_at = None
    last_error_code = None
    last_error_detail_hash = None
    created_at = SelfAttribute("now")
    updated_at = SelfAttribute("now")


class ReportRowFactory(LedgerModelFactory):
    """A campaign's immutable report, built by the report builder from ``plan``'s results.

    Alone, it makes a finalized campaign (every item succeeded) around itself.
    """

    class Meta:
        model = ReportRow

    class Params:
        plan = SubFactory(CampaignPlanFactory)
        campaign = SubFactory(
            _CAMPAIGN_FACTORY, plan=SelfAttribute("..plan"), finalized=True, report=None
        )
        score = 1.0
        builder = LazyFunction(DefaultReportBuilder)
        report = LazyAttribute(
            lambda o: o.builder.build(o.plan.policy, o.plan.suite, plan_results(o.plan, o.score))
        )

    campaign_id = SelfAttribute("campaign.campaign_id")
    policy_sha256 = LazyAttribute(lambda o: o.plan.policy.sha256)
    results_sha256 = LazyAttribute(
        lambda o: results_sha256([_encoded(result)[1] for result in plan_results(o.plan, o.score)])
    )
    report_json = LazyAttribute(lambda o: canonical_json(o.report))
    report_sha256 = LazyAttribute(lambda o: sha256_text(canonical_json(o.report)))
    created_at = SelfAttribute("campaign.created_at")


class CampaignRowFactory(LedgerModelFactory):
    """A whole campaign, as ``CampaignService.create`` stores it, for ``plan``.

    Makes the stored policy and suite, the campaign row, one work item per
    (locale x case) in ``work_status`` (default ``pending``; see
    :class:`WorkRowFactory`) and the report state. ``finalized=True``: every
    item succeeded and the report is stored. Size it with
    ``plan__suite__case_count=5, plan__policy__required_locales=["de", "ja"]``.
    """

    class Meta:
        model = CampaignRow

    class Params:
        plan = SubFactory(CampaignPlanFactory)
        finalized = False
        work_status = LazyAttribute(
            lambda o: WorkStatus.SUCCEEDED if o.finalized else WorkStatus.PENDING
        )
        score = 1.0

    campaign_id = LazyAttribute(lambda o: o.plan.campaign_id)
    policy_sha256 = LazyAttribute(lambda o: o.plan.policy.sha256)
    suite_sha256 = LazyAttribute(lambda o: o.plan.suite.sha256)
    work_count = LazyAttribute(lambda o: o.plan.work_count)
    max_attempts = 3  # the campaign's attempt budget, and every item's and the report's
    created_at = LazyFunction(factory_now)
    updated_at = SelfAttribute("created_at")
    name = None
    candidate_provider_id = LazyAttribute(lambda o: o.plan.policy.candidate_provider_id)
    candidate_model_id = LazyAttribute(lambda o: o.plan.policy.candidate_model_id)
    candidate_model_version = LazyAttribute(lambda o: o.plan.policy.candidate_model_version)
    # The limit group it shares caps in: its provider's, as create() puts it.
    limit_group = LazyAttribute(lambda o: o.plan.policy.candidate_provider_id)
    evaluator = None

    stored_policy = RelatedFactory(
        StoredPolicyRowFactory,
        policy=SelfAttribute("..plan.policy"),
        created_at=SelfAttribute("..created_at"),
    )
    stored_suite = RelatedFactory(
        StoredSuiteRowFactory,
        suite=SelfAttribute("..plan.suite"),
        created_at=SelfAttribute("..created_at"),
    )
    work = RelatedFactory(
        _CampaignWorkFactory,
        factory_related_name="campaign",
        plan=SelfAttribute("..plan"),
        status=SelfAttribute("..work_status"),
        max_attempts=SelfAttribute("..max_attempts"),
        score=SelfAttribute("..score"),
    )
    report_state = RelatedFactory(
        ReportStateRowFactory,
        factory_related_name="campaign",
        max_attempts=SelfAttribute("..max_attempts"),
        status=LazyAttribute(
            lambda o: ReportStatus.SUCCEEDED if o.factory_parent.finalized else ReportStatus.PENDING
        ),
    )
    report = Maybe(
        "finalized",
        RelatedFactory(
            ReportRowFactory,
            factory_related_name="campaign",
            plan=SelfAttribute("..plan"),
            score=SelfAttribute("..score"),
        ),
    )


class AttemptRowFactory(LedgerModelFactory):
    """One row of the attempt history: by default the one successful attempt of ``work``
    (a :class:`WorkRow`; alone, a succeeded one-item campaign around it).

    Give ``outcome``, ``attempt`` and ``error_code`` for other endings; the row is
    what a completion or failure writes, so the audit finds it agrees with a
    matching item.
    """

    class Meta:
        model = AttemptRow

    class Params:
        work = SubFactory(WorkRowFactory, status=WorkStatus.SUCCEEDED)

    campaign_id = SelfAttribute("work.campaign_id")
    work_id = SelfAttribute("work.work_id")
    attempt = SelfAttribute("work.attempts")
    worker_id = "test-worker"
    claimed_at = SelfAttribute("work.created_at")
    finished_at = SelfAttribute("work.updated_at")
    outcome = "succeeded"
    error_code = None
    duration_seconds = 0.1
