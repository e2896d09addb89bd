"""Campaign error codes and health reasons: stable, public, machine-readable strings.

Every code is ``benchmark.campaign.<name>``; the names are a public contract
(docs/errors.md lists each one). :mod:`benchledger.domain.campaign` re-exports
them all, so ``benchledger.domain.campaign.LEASE_LOST`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: The prefix of every campaign code.
CODE_PREFIX: Final = "benchmark.campaign."
#: Deprecated alias of :data:`CODE_PREFIX`, its historical one-letter name: kept only so
#: code that imported it keeps working; benchledger itself uses ``CODE_PREFIX``.
C: Final = CODE_PREFIX

# -- codes a campaign operation refuses with ------------------------------------------

ATTEMPTS_INVALID: Final = CODE_PREFIX + "attempts_invalid"
ATTEMPTS_MISMATCH: Final = CODE_PREFIX + "attempts_mismatch"
CLAIM_INVALID: Final = CODE_PREFIX + "claim_invalid"
CLAIM_LOST: Final = CODE_PREFIX + "claim_lost"
DURATION_INVALID: Final = CODE_PREFIX + "duration_invalid"
FAILURE_INVALID: Final = CODE_PREFIX + "failure_invalid"
IDENTITY_INVALID: Final = CODE_PREFIX + "identity_invalid"
INCOMPLETE: Final = CODE_PREFIX + "incomplete"
INPUT_INVALID: Final = CODE_PREFIX + "input_invalid"
LEASE_EXPIRED: Final = CODE_PREFIX + "lease_expired"
LEASE_LOST: Final = CODE_PREFIX + "lease_lost"
#: An item (or the report) whose leases ran out unrenewed too often (its holders died).
LEASE_LOSSES_SPENT: Final = CODE_PREFIX + "lease_losses_spent"
REPORT_LEASE_LOSSES_SPENT: Final = CODE_PREFIX + "report_lease_losses_spent"
OPERATION_GUARD_FAILED: Final = CODE_PREFIX + "operation_guard_failed"
POLICY_MISMATCH: Final = CODE_PREFIX + "policy_mismatch"
REPORT_CLAIM_INVALID: Final = CODE_PREFIX + "report_claim_invalid"
REPORT_CLAIM_LOST: Final = CODE_PREFIX + "report_claim_lost"
REPORT_DEPENDENCY_INVALID: Final = CODE_PREFIX + "report_dependency_invalid"
REPORT_FAILURE_INVALID: Final = CODE_PREFIX + "report_failure_invalid"
REPORT_INVALID: Final = CODE_PREFIX + "report_invalid"
REPORT_LEASE_EXPIRED: Final = CODE_PREFIX + "report_lease_expired"
REPORT_LEASE_LOST: Final = CODE_PREFIX + "report_lease_lost"
REPORT_MISSING: Final = CODE_PREFIX + "report_missing"
REPORT_RETRY_INVALID: Final = CODE_PREFIX + "report_retry_invalid"
REPORT_STATE_INVALID: Final = CODE_PREFIX + "report_state_invalid"
REPORT_UNEXPECTED: Final = CODE_PREFIX + "report_unexpected"
#: A stored report of a campaign whose policy or suite is not stored (adopted from the
#: legacy store): nothing to verify it against until ``register``; not an invalid one.
REPORT_UNVERIFIABLE: Final = CODE_PREFIX + "report_unverifiable"
RESULT_INVALID: Final = CODE_PREFIX + "result_invalid"
RESULT_MISMATCH: Final = CODE_PREFIX + "result_mismatch"
RETRY_INVALID: Final = CODE_PREFIX + "retry_invalid"
STALE_THRESHOLD_INVALID: Final = CODE_PREFIX + "stale_threshold_invalid"
STATE_INVALID: Final = CODE_PREFIX + "state_invalid"
TIME_INVALID: Final = CODE_PREFIX + "time_invalid"
UNEXPECTED: Final = CODE_PREFIX + "unexpected"
VALIDITY_EXPIRED: Final = CODE_PREFIX + "validity_expired"
DEPENDENCY_PREFIX: Final = CODE_PREFIX + "dependency."
DEPENDENCY_FAILED: Final = CODE_PREFIX + "dependency_failed"
#: A throttled attempt (the model's provider said "too many requests"): handed back
#: without spending an attempt, recorded as ``throttled.<the evaluator's code>``.
THROTTLED_PREFIX: Final = CODE_PREFIX + "throttled."
THROTTLED: Final = CODE_PREFIX + "throttled"
#: An item throttled ``max_throttles`` times: a throttle now counts as a failed attempt.
THROTTLES_SPENT: Final = CODE_PREFIX + "throttles_spent"
THROTTLES_INVALID: Final = CODE_PREFIX + "throttles_invalid"
#: A limit group's key, caps or an evaluator's reported cost that cannot be used.
LIMIT_GROUP_INVALID: Final = CODE_PREFIX + "limit_group_invalid"
COST_INVALID: Final = CODE_PREFIX + "cost_invalid"
#: A campaign's evaluator name that is not ``module:function``-like text.
EVALUATOR_INVALID: Final = CODE_PREFIX + "evaluator_invalid"
# Codes for inputs every call is checked against (the policy, suite, page, worker settings):
POLICY_INVALID: Final = CODE_PREFIX + "policy_invalid"
SUITE_INVALID: Final = CODE_PREFIX + "suite_invalid"
SUITE_MISMATCH: Final = CODE_PREFIX + "suite_mismatch"
NOT_FOUND: Final = CODE_PREFIX + "not_found"
POLICY_UNREGISTERED: Final = CODE_PREFIX + "policy_unregistered"
DEPENDENCY_INVALID: Final = CODE_PREFIX + "dependency_invalid"
SCHEMA_INVALID: Final = CODE_PREFIX + "schema_invalid"
#: A SQLite file whose legacy ``user_version`` benchledger does not know.
SCHEMA_UNSUPPORTED: Final = CODE_PREFIX + "schema_unsupported"
PAGE_INVALID: Final = CODE_PREFIX + "page_invalid"
WORKER_SETTING_INVALID: Final = CODE_PREFIX + "worker_setting_invalid"
# Codes operators' actions refuse with (services/campaigns/actions.py).
ID_AMBIGUOUS: Final = CODE_PREFIX + "id_ambiguous"
NOTHING_TO_RETRY: Final = CODE_PREFIX + "nothing_to_retry"
WORK_NOT_FOUND: Final = CODE_PREFIX + "work_not_found"
LEASES_LIVE: Final = CODE_PREFIX + "leases_live"
#: Also the health reason of a cancelled campaign.
CANCELLED: Final = CODE_PREFIX + "cancelled"
NOT_CANCELLED: Final = CODE_PREFIX + "not_cancelled"
FINISHED: Final = CODE_PREFIX + "finished"
LIMIT_INVALID: Final = CODE_PREFIX + "limit_invalid"
# Codes of the results reads, campaign names and the attempt history.
FILTER_INVALID: Final = CODE_PREFIX + "filter_invalid"
NAME_INVALID: Final = CODE_PREFIX + "name_invalid"
HISTORY_INVALID: Final = CODE_PREFIX + "history_invalid"
SUITE_DIFFERS: Final = CODE_PREFIX + "compare.suite_differs"
# Codes of a finished campaign's archive (services/campaigns/archive.py).
#: The campaign was archived: its items, results and attempt history are gone, so what
#: reads them (results, attempts, compare, exports, summarize) refuses; so does archive.
ARCHIVED: Final = CODE_PREFIX + "archived"
#: An archived campaign's recorded facts disagree with one another or with its report.
ARCHIVE_INVALID: Final = CODE_PREFIX + "archive_invalid"
#: archive's export took fewer items than the campaign has: nothing was dropped.
EXPORT_INCOMPLETE: Final = CODE_PREFIX + "export_incomplete"
# Codes comparing two campaigns' paired results refuses with (domain/comparison.py).
COMPARE_NO_PAIRS: Final = CODE_PREFIX + "compare.no_pairs"
COMPARE_PAIR_INVALID: Final = CODE_PREFIX + "compare.pair_invalid"
COMPARE_PAIR_DUPLICATE: Final = CODE_PREFIX + "compare.pair_duplicate"
COMPARE_SETTING_INVALID: Final = CODE_PREFIX + "compare.setting_invalid"
COMPARE_PVALUE_INVALID: Final = CODE_PREFIX + "compare.pvalue_invalid"
# Health reasons.
#: A campaign whose flow-control cap of 0 stops every claim.
PAUSED: Final = CODE_PREFIX + "paused"
REASON_FAILED: Final = CODE_PREFIX + "failed"
REASON_STALLED: Final = CODE_PREFIX + "stalled"
REASON_REPORT_FAILED: Final = CODE_PREFIX + "report_failed"
REASON_CLOCK_SKEW: Final = CODE_PREFIX + "clock_skew"
REASON_ERROR_PREFIX: Final = CODE_PREFIX + "error."
REASON_REPORT_ERROR_PREFIX: Final = CODE_PREFIX + "report_error."
#: A campaign whose last integrity audit found problems.
REASON_INTEGRITY_FAILED: Final = CODE_PREFIX + "integrity_failed"
#: The same code as a refusal: archive's integrity audit found a problem.
INTEGRITY_FAILED: Final = REASON_INTEGRITY_FAILED


def _known_codes() -> frozenset[str]:
    return frozenset(
        value
        for name, value in globals().items()
        if name.isupper() and isinstance(value, str) and value.startswith(CODE_PREFIX)
    )


def error_reason(code: str) -> str:
    """The health reason of items whose last error is ``code``: ``benchmark.campaign.error.``
    and the code without its own ``benchmark.campaign.`` (the namespace said once)."""
    return REASON_ERROR_PREFIX + code.removeprefix(CODE_PREFIX)


def report_error_reason(code: str) -> str:
    """The health reason of a report finalization whose last error is ``code``."""
    return REASON_REPORT_ERROR_PREFIX + code.removeprefix(CODE_PREFIX)


def code_of_reason(reason: str) -> str | None:
    """The full error code an ``error.`` / ``report_error.`` reason names (None: neither).

    A code in the campaign namespace (the evaluator's ``dependency.*`` ones, the
    ledger's own) gets its ``benchmark.campaign.`` back; any other is as recorded.
    """
    for prefix in (REASON_ERROR_PREFIX, REASON_REPORT_ERROR_PREFIX):
        if reason.startswith(prefix):
            rest = reason.removeprefix(prefix)
            full = CODE_PREFIX + rest
            if rest.startswith("dependency.") or full in _known_codes():
                return full
            return rest
    return None


def codes_matching(given: str, known: Iterable[str]) -> set[str]:
    """The codes of ``known`` that ``given`` names: itself, else every code it is a dotted
    suffix of (``tiny.bad_case`` names ``benchmark.campaign.dependency.tiny.bad_case``)."""
    known = set(known)
    if given in known:
        return {given}
    return {code for code in known if code.endswith("." + given)}


BLOCKING_REASONS: Final = frozenset(
    {REASON_REPORT_FAILED, REPORT_INVALID, REPORT_STATE_INVALID, VALIDITY_EXPIRED}
)
# Report-finalization failures that retrying cannot fix.
TERMINAL_REPORT_CODES: Final = frozenset(
    {POLICY_MISMATCH, REPORT_INVALID, REPORT_STATE_INVALID, STATE_INVALID, VALIDITY_EXPIRED}
)


__all__ = [
    "ARCHIVED",
    "ARCHIVE_INVALID",
    "ATTEMPTS_INVALID",
    "ATTEMPTS_MISMATCH",
    "BLOCKING_REASONS",
    "CANCELLED",
    "CLAIM_INVALID",
    "CLAIM_LOST",
    "CODE_PREFIX",
    "COMPARE_NO_PAIRS",
    "COMPARE_PAIR_DUPLICATE",
    "COMPARE_PAIR_INVALID",
    "COMPARE_PVALUE_INVALID",
    "COMPARE_SETTING_INVALID",
    "COST_INVALID",
    "DEPENDENCY_FAILED",
    "DEPENDENCY_INVALID",
    "DEPENDENCY_PREFIX",
    "DURATION_INVALID",
    "EVALUATOR_INVALID",
    "EXPORT_INCOMPLETE",
    "FAILURE_INVALID",
    "FILTER_INVALID",
    "FINISHED",
    "HISTORY_INVALID",
    "IDENTITY_INVALID",
    "ID_AMBIGUOUS",
    "INCOMPLETE",
    "INPUT_INVALID",
    "INTEGRITY_FAILED",
    "LEASES_LIVE",
    "LEASE_EXPIRED",
    "LEASE_LOSSES_SPENT",
    "LEASE_LOST",
    "LIMIT_GROUP_INVALID",
    "LIMIT_INVALID",
    "NAME_INVALID",
    "NOTHING_TO_RETRY",
    "NOT_CANCELLED",
    "NOT_FOUND",
    "OPERATION_GUARD_FAILED",
    "PAGE_INVALID",
    "PAUSED",
    "POLICY_INVALID",
    "POLICY_MISMATCH",
    "POLICY_UNREGISTERED",
    "REASON_CLOCK_SKEW",
    "REASON_ERROR_PREFIX",
    "REASON_FAILED",
    "REASON_INTEGRITY_FAILED",
    "REASON_REPORT_ERROR_PREFIX",
    "REASON_REPORT_FAILED",
    "REASON_STALLED",
    "REPORT_CLAIM_INVALID",
    "REPORT_CLAIM_LOST",
    "REPORT_DEPENDENCY_INVALID",
    "REPORT_FAILURE_INVALID",
    "REPORT_INVALID",
    "REPORT_LEASE_EXPIRED",
    "REPORT_LEASE_LOSSES_SPENT",
    "REPORT_LEASE_LOST",
    "REPORT_MISSING",
    "REPORT_RETRY_INVALID",
    "REPORT_STATE_INVALID",
    "REPORT_UNEXPECTED",
    "REPORT_UNVERIFIABLE",
    "RESULT_INVALID",
    "RESULT_MISMATCH",
    "RETRY_INVALID",
    "SCHEMA_INVALID",
    "SCHEMA_UNSUPPORTED",
    "STALE_THRESHOLD_INVALID",
    "STATE_INVALID",
    "SUITE_DIFFERS",
    "SUITE_INVALID",
    "SUITE_MISMATCH",
    "TERMINAL_REPORT_CODES",
    "THROTTLED",
    "THROTTLED_PREFIX",
    "THROTTLES_INVALID",
    "THROTTLES_SPENT",
    "TIME_INVALID",
    "UNEXPECTED",
    "VALIDITY_EXPIRED",
    "WORKER_SETTING_INVALID",
    "WORK_NOT_FOUND",
    "C",
    "code_of_reason",
    "codes_matching",
    "error_reason",
    "report_error_reason",
]
