"""What a campaign's reads return: :class:`CampaignStatus`, :class:`CampaignSummary`,
:class:`CampaignList` and :class:`CampaignHealth` (with the integrity audit it
may carry), and their validators. Pure: no SQL, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from benchledger.domain.campaign import (
    HEALTH_REASON,
    HEALTH_SCHEMA,
    STATUSES,
    HealthStatus,
    blocked,
    blocks_with,
    is_attempts,
    is_campaign_id,
    is_error_code,
    is_float,
    is_int,
    is_optional_code,
    is_report_status,
    is_status,
)
from benchledger.domain.campaign_codes import STATE_INVALID
from benchledger.domain.campaign_labels import Candidate
from benchledger.domain.canonical import is_sha256
from benchledger.domain.integrity import IntegrityReport

_state_check = blocks_with(STATE_INVALID)


def _is_count(value: Any) -> bool:
    return is_int(value) and value >= 0


def _is_counts(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and set(value) == set(STATUSES)
        and all(_is_count(count) for count in value.values())
    )


def _is_error_counts(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        is_error_code(code) and _is_count(count) for code, count in value.items()
    )


_REPORT_FINALIZATION_KEYS = frozenset(
    {"status", "attempt", "max_attempts", "next_attempt_at", "error_code"}
)


def _is_report_finalization(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and set(value) == _REPORT_FINALIZATION_KEYS
        and is_report_status(value["status"])
        and _is_count(value["attempt"])
        and is_attempts(value["max_attempts"])
        and is_float(value["next_attempt_at"])
        and is_optional_code(value["error_code"])
    )


def _read_only(value: Any) -> Mapping[str, Any]:
    """A read-only copy, so a frozen value object cannot be changed through its mappings."""
    if not isinstance(value, Mapping):
        raise blocked(STATE_INVALID)
    return MappingProxyType(dict(value))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_optional_time(value: Any) -> bool:
    return value is None or is_float(value)


def _is_optional_count(value: Any) -> bool:
    return value is None or _is_count(value)


def _is_optional_bool(value: Any) -> bool:
    return value is None or _is_bool(value)


def _audit_payload(
    verified_at: float | None,
    verified_ok: bool | None,
    verified_current: bool | None,
    changes_since_verified: int | None,
) -> dict[str, Any]:
    """The last integrity audit, once there was one: when, what it found, and whether
    anything changed since (``changes_since_verified`` item outcomes, counted up to
    ``CHANGES_COUNTED``: at least that many when equal)."""
    if verified_at is None:
        return {}
    return {
        "verified_at": verified_at,
        "verified_ok": verified_ok,
        "verified_current": verified_current,
        "changes_since_verified": changes_since_verified,
    }


@attrs.frozen
class CampaignStatus:
    """Operational counters of one campaign (what ``status()`` returns).

    ``counts``, ``error_counts`` and ``report_finalization`` are read-only mappings.

    ``next_due_at`` is the earliest time a claim may find
    something to do without anyone else acting: the earliest
    ``next_attempt_at`` of a pending or retry_wait item, or the earliest
    expiry of a leased item's lease (held here or on another machine), or,
    once every item has succeeded, the report's ``next_attempt_at`` (pending,
    retry_wait) or its lease expiry (leased). It may be in the past: then
    something is due now. It is ``None`` when nothing will ever be due again:
    the report is finalized or failed for good, or every item is final and
    some failed (the campaign is blocked for good). Holders of leases can make
    work due sooner (a failed attempt's retry, the last success making the
    report due), so a waiting worker still looks again now and then.
    """

    campaign_id: str = attrs.field(validator=_state_check(is_campaign_id))
    policy_sha256: str = attrs.field(validator=_state_check(is_sha256))
    suite_sha256: str = attrs.field(validator=_state_check(is_sha256))
    valid_until: float = attrs.field(validator=_state_check(is_float))
    work_count: int = attrs.field(validator=_state_check(lambda v: is_int(v) and v > 0))
    counts: Mapping[str, int] = attrs.field(
        converter=_read_only, validator=_state_check(_is_counts), hash=False
    )
    error_counts: Mapping[str, int] = attrs.field(
        converter=_read_only, validator=_state_check(_is_error_counts), hash=False
    )
    complete: bool = attrs.field(validator=_state_check(_is_bool))
    blocked: bool = attrs.field(validator=_state_check(_is_bool))
    report_finalization: Mapping[str, Any] = attrs.field(
        converter=_read_only, validator=_state_check(_is_report_finalization), hash=False
    )
    created_at: float = attrs.field(validator=_state_check(is_float))
    updated_at: float = attrs.field(validator=_state_check(is_float))
    next_due_at: float | None = attrs.field(validator=_state_check(_is_optional_time))
    # The last integrity audit (verify()): when, and whether it found nothing (None: never).
    verified_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))
    verified_ok: bool | None = attrs.field(
        default=None, validator=_state_check(lambda v: v is None or _is_bool(v))
    )
    # Whether the last audit still describes the campaign (None: never audited): no item
    # outcome, report state or campaign row written since; and how many item outcomes
    # were recorded since (index-bounded: counted up to CHANGES_COUNTED).
    verified_current: bool | None = attrs.field(
        default=None, validator=_state_check(_is_optional_bool)
    )
    changes_since_verified: int | None = attrs.field(
        default=None, validator=_state_check(_is_optional_count)
    )
    # An operator cancelled it (CampaignService.cancel): claims hand out none of its work.
    cancelled: bool = attrs.field(default=False, validator=_state_check(_is_bool))
    # What tells it apart: its optional name and the candidate its policy measures.
    name: str | None = None
    candidate: Candidate = attrs.field(factory=Candidate)
    # Items waiting after a throttle (part of counts["retry_wait"]) and when the first is due.
    throttled: int = attrs.field(default=0, validator=_state_check(_is_optional_count))
    throttled_due_at: float | None = attrs.field(
        default=None, validator=_state_check(_is_optional_time)
    )
    # The limit group whose caps its claims share (None: none), and whether the group's
    # caps hold its claims back right now (its live leases or last minute at a cap).
    limit_group: str | None = None
    waiting_on_group: bool = attrs.field(default=False, validator=_state_check(_is_bool))
    # The evaluator's name a fleet runs it with (None: none named at create).
    evaluator: str | None = None
    # When its items were archived (dropped; CampaignService.archive; None: never).
    archived_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "name": self.name,
            "candidate": self.candidate.as_payload(),
            "limit_group": self.limit_group,
            "waiting_on_group": self.waiting_on_group,
            "evaluator": self.evaluator,
            "throttled": self.throttled,
            "throttled_due_at": self.throttled_due_at,
            "policy_sha256": self.policy_sha256,
            "suite_sha256": self.suite_sha256,
            "valid_until": self.valid_until,
            "work_count": self.work_count,
            "counts": dict(self.counts),
            "error_counts": dict(self.error_counts),
            "complete": self.complete,
            "blocked": self.blocked,
            "report_finalization": dict(self.report_finalization),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "next_due_at": self.next_due_at,
            # the last integrity audit, once there was one, and whether it is still current
            **_audit_payload(
                self.verified_at,
                self.verified_ok,
                self.verified_current,
                self.changes_since_verified,
            ),
            # an operator's cancel, while it lasts
            **({"cancelled": True} if self.cancelled else {}),
            # the archive, once its items were dropped
            **({"archived_at": self.archived_at} if self.archived_at is not None else {}),
        }


@attrs.frozen
class OpenCampaign:
    """A campaign a fleet may serve: open, with its evaluator's name and what is due."""

    campaign_id: str
    evaluator: str
    limit_group: str | None
    provider: str | None
    next_due_at: float  # as CampaignStatus.next_due_at (may be in the past: due now)
    complete: bool  # every item succeeded: its report is what is left


@attrs.frozen
class CampaignSummary:
    """One campaign as listed: its identity and binding, without reading its work."""

    campaign_id: str = attrs.field(validator=_state_check(is_campaign_id))
    policy_sha256: str = attrs.field(validator=_state_check(is_sha256))
    suite_sha256: str = attrs.field(validator=_state_check(is_sha256))
    work_count: int = attrs.field(validator=_state_check(lambda v: is_int(v) and v > 0))
    created_at: float = attrs.field(validator=_state_check(is_float))
    updated_at: float = attrs.field(validator=_state_check(is_float))
    name: str | None = None
    candidate: Candidate = attrs.field(factory=Candidate)
    # When its items were archived (dropped; None: never).
    archived_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "name": self.name,
            "candidate": self.candidate.as_payload(),
            "policy_sha256": self.policy_sha256,
            "suite_sha256": self.suite_sha256,
            "work_count": self.work_count,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            **({"archived_at": self.archived_at} if self.archived_at is not None else {}),
        }


@attrs.frozen
class CampaignList:
    """One page of campaigns, oldest first; ``next_cursor`` continues (``None``: the last)."""

    campaigns: tuple[CampaignSummary, ...]
    limit: int
    next_cursor: str | None

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaigns": [summary.as_payload() for summary in self.campaigns],
            "limit": self.limit,
            "next_cursor": self.next_cursor,
        }


def _is_health_status(value: Any) -> bool:
    return value in tuple(HealthStatus)


def _is_reasons(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and all(isinstance(r, str) and HEALTH_REASON.fullmatch(r) for r in value)
        and list(value) == sorted(set(value))
    )


def _is_health_counts(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and all(
            isinstance(pair, tuple) and len(pair) == 2 and is_status(pair[0]) and _is_count(pair[1])
            for pair in value
        )
        and [pair[0] for pair in value] == sorted({pair[0] for pair in value})
    )


@attrs.frozen
class CampaignHealth:
    """A read-only, text-free snapshot: healthy, degraded or blocked, with reasons."""

    campaign_id: str = attrs.field(validator=_state_check(lambda v: isinstance(v, str) and v))
    status: str = attrs.field(validator=_state_check(_is_health_status))
    reasons: tuple[str, ...] = attrs.field(validator=_state_check(_is_reasons))
    counts: tuple[tuple[str, int], ...] = attrs.field(validator=_state_check(_is_health_counts))
    work_count: int = attrs.field(validator=_state_check(_is_count))
    report_ready: bool = attrs.field(validator=_state_check(_is_bool))
    last_progress_at: float | None = attrs.field(validator=_state_check(_is_optional_time))
    # The last integrity audit (verify()): when, and whether it found nothing (None: never);
    # ``integrity`` is the audit itself when health ran one (health(..., verify=True)).
    verified_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))
    verified_ok: bool | None = attrs.field(
        default=None, validator=_state_check(lambda v: v is None or _is_bool(v))
    )
    integrity: IntegrityReport | None = attrs.field(default=None)
    # As CampaignStatus's: whether the last audit is still current, and the item
    # outcomes recorded since it (counted up to CHANGES_COUNTED).
    verified_current: bool | None = attrs.field(
        default=None, validator=_state_check(_is_optional_bool)
    )
    changes_since_verified: int | None = attrs.field(
        default=None, validator=_state_check(_is_optional_count)
    )

    # Items waiting on a provider's Retry-After (throttled), and when the first is due.
    throttled: int = attrs.field(default=0, validator=_state_check(_is_optional_count))
    throttled_due_at: float | None = attrs.field(
        default=None, validator=_state_check(_is_optional_time)
    )
    # When its items were archived (dropped; None: never).
    archived_at: float | None = attrs.field(default=None, validator=_state_check(_is_optional_time))

    def as_payload(self) -> dict[str, Any]:
        """The v1 health payload; plus the last integrity audit, once there was one."""
        payload: dict[str, Any] = {
            "schema": HEALTH_SCHEMA,
            "campaign_id": self.campaign_id,
            "status": self.status,
            "reasons": list(self.reasons),
            "counts": dict(self.counts),
            "work_count": self.work_count,
            "report_ready": self.report_ready,
            "last_progress_at": self.last_progress_at,
        }
        payload.update(
            _audit_payload(
                self.verified_at,
                self.verified_ok,
                self.verified_current,
                self.changes_since_verified,
            )
        )
        if self.throttled:  # only then: the v1 schema's keys stay as they were
            payload["throttled"] = self.throttled
            payload["throttled_due_at"] = self.throttled_due_at
        if self.archived_at is not None:  # only then, as throttled
            payload["archived_at"] = self.archived_at
        if self.integrity is not None:
            payload["integrity"] = self.integrity.as_payload()
        return payload
