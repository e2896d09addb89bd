"""Operators' campaign actions: find by id prefix, retry, cancel/resume, flow-control caps,
delete, and list what needs registering.

Each action is one write transaction on the campaign's rows, fenced by the
state it applies to (only ``failed`` rows are retried; only a running
campaign is cancelled, only a cancelled one resumed; a campaign with live
leases is deleted only when forced). An action that does not apply is refused
with a stable ``benchmark.campaign.*`` code and the transaction is rolled
back: the database is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs

from benchledger.db.notify import notify_work
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_rules import cap_value
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns.actions import CampaignActionRepository
from benchledger.repositories.campaigns.store import CampaignRepository
from benchledger.repositories.campaigns.work import WorkRepository

if TYPE_CHECKING:
    from benchledger.db import Database
    from benchledger.domain.campaign_views import CampaignHealth, CampaignStatus
    from benchledger.services.campaigns.context import CampaignContext

# The actions' codes live with every other campaign code (domain/campaign_codes.py).
ID_AMBIGUOUS: Final = dom.ID_AMBIGUOUS
NOTHING_TO_RETRY: Final = dom.NOTHING_TO_RETRY
WORK_NOT_FOUND: Final = dom.WORK_NOT_FOUND
LEASES_LIVE: Final = dom.LEASES_LIVE
CANCELLED: Final = dom.CANCELLED
NOT_CANCELLED: Final = dom.NOT_CANCELLED
FINISHED: Final = dom.FINISHED
LIMIT_INVALID: Final = dom.LIMIT_INVALID
#: Health reason of a campaign whose cap of 0 stops every claim.
PAUSED: Final = dom.PAUSED
_UNSET: Any = object()

#: The shortest id prefix accepted (hex digits after ``benchmark-campaign-``), as git does.
MIN_PREFIX: Final = 4
SHORT_ID: Final = 12
_HEX_PREFIX = re.compile(r"^[0-9a-f]{4,64}$")
_WORK_ID = re.compile(r"^benchmark-work-[0-9a-f]{64}$")


def short_id(campaign_id: str) -> str:
    """The first 12 hex digits of a campaign id: what tables show, and a usable prefix."""
    return campaign_id.removeprefix(dom.CAMPAIGN_PREFIX)[:SHORT_ID]


def _refused(code: str, message: str) -> CampaignBlocked:
    return CampaignBlocked(code, message)


def _known_shape(campaign_id: Any) -> str:
    """``campaign_id`` if it has a campaign id's shape, else ``not_found`` before any SQL."""
    if not dom.is_campaign_id(campaign_id):
        raise _refused(dom.NOT_FOUND, "not a campaign id (benchmark-campaign-<64 hex digits>)")
    return str(campaign_id)


def _texts(values: Any, what: str) -> tuple[str, ...]:
    """A list (or other iterable, not a string) of text, else ``input_invalid``."""
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise _refused(dom.INPUT_INVALID, f"{what} must be a list of text")
    items = tuple(values)
    if len(items) > 100_000 or any(not isinstance(item, str) for item in items):
        raise _refused(dom.INPUT_INVALID, f"{what} must be a list of at most 100,000 texts")
    return items


@attrs.frozen
class RetryOutcome:
    """What ``retry`` re-armed: the items (now pending or due) and whether the report was."""

    campaign_id: str
    work_ids: tuple[str, ...]
    report_rearmed: bool
    attempts: int

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "retried": len(self.work_ids),
            "work_ids": list(self.work_ids),
            "report_rearmed": self.report_rearmed,
            "attempts": self.attempts,
        }


def _sorted_counts(rows: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(rows.items()))


@attrs.frozen
class DeleteOutcome:
    """What ``delete`` removed: rows per table, and the live leases it overrode."""

    campaign_id: str
    rows: Mapping[str, int] = attrs.field(converter=_sorted_counts)
    live_leases: int

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "deleted_rows": dict(self.rows),
            "live_leases": self.live_leases,
        }


@attrs.frozen
class CampaignControls:
    """An operator's view of a campaign's controls: cancelled, caps, and the flow now."""

    campaign_id: str
    cancelled_at: float | None
    max_concurrent_leases: int | None
    max_claims_per_minute: int | None
    live_leases: int
    claims_last_minute: int

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None

    @property
    def paused(self) -> bool:
        """A cap of 0: no claim is handed out until it is raised."""
        return 0 in (self.max_concurrent_leases, self.max_claims_per_minute)

    def as_payload(self) -> dict[str, Any]:
        return {
            "campaign_id": self.campaign_id,
            "cancelled": self.cancelled,
            "cancelled_at": self.cancelled_at,
            "paused": self.paused,
            "max_concurrent_leases": self.max_concurrent_leases,
            "max_claims_per_minute": self.max_claims_per_minute,
            "live_leases": self.live_leases,
            "claims_last_minute": self.claims_last_minute,
        }


def operator_status(db: Database, status: CampaignStatus) -> CampaignStatus:
    """``status`` with an operator's cancel (one read of the campaign row by key)."""
    with db.read() as session:
        row = CampaignActionRepository(session).controls(status.campaign_id)
    if row is None or row.cancelled_at is None:
        return status
    return attrs.evolve(status, cancelled=True)


def operator_reasons(db: Database, health: CampaignHealth) -> CampaignHealth:
    """``health`` with what operators did: ``cancelled``, ``paused`` (a cap of 0).

    Either is a reason (status ``degraded``, unless already ``blocked``), and
    replaces ``stalled``: nothing moves because an operator said so.
    """
    with db.read() as session:
        row = CampaignActionRepository(session).controls(health.campaign_id)
    if row is None:
        return health
    extra = set()
    if row.cancelled_at is not None:
        extra.add(CANCELLED)
    if 0 in (row.max_concurrent_leases, row.max_claims_per_minute):
        extra.add(PAUSED)
    if not extra:
        return health
    reasons = (set(health.reasons) - {dom.REASON_STALLED}) | extra
    blocked = health.status == dom.HealthStatus.BLOCKED
    status = dom.HealthStatus.BLOCKED if blocked else dom.HealthStatus.DEGRADED
    return attrs.evolve(health, status=status, reasons=tuple(sorted(reasons)))


class Campaigns(Protocol):
    """What the actions need of a ``CampaignService``: the context its jobs share."""

    @property
    def context(self) -> CampaignContext: ...


class CampaignActions:
    """The actions, on a ``CampaignService``'s database and clock (its context)."""

    def __init__(self, service: Campaigns) -> None:
        self.service = service
        self.db = service.context.db

    # -- finding -----------------------------------------------------------------------

    def resolve(self, campaign_id: str) -> str:
        """The one campaign whose id is ``campaign_id`` or starts with it.

        Accepts a whole id, or at least 4 of its hex digits with or without the
        ``benchmark-campaign-`` prefix. ``not_found`` when nothing matches (or
        the text cannot start an id), ``id_ambiguous`` when several do.
        """
        if not isinstance(campaign_id, str):
            raise _refused(dom.NOT_FOUND, "a campaign id is text")
        text = campaign_id.strip()
        digits = text.removeprefix(dom.CAMPAIGN_PREFIX)
        if _HEX_PREFIX.fullmatch(digits) is None:
            shown = ascii(text[:40]) + ("..." if len(text) > 40 else "")
            raise _refused(
                dom.NOT_FOUND,
                f"{shown} is not a campaign id or a prefix of one "
                f"(at least {MIN_PREFIX} hex digits)",
            )
        with self.db.read() as session:
            found = CampaignActionRepository(session).ids_with_prefix(dom.CAMPAIGN_PREFIX + digits)
        if not found:
            raise _refused(dom.NOT_FOUND, f"no campaign id starts with {digits}")
        if len(found) > 1:
            raise _refused(
                ID_AMBIGUOUS,
                f"{digits} starts several campaign ids ({', '.join(map(short_id, found))}, "
                "...): give more digits",
            )
        return found[0]

    def unregistered(self) -> tuple[str, ...]:
        """Campaigns with rows but no stored policy and suite (adopted legacy ones), oldest
        first: ``register`` each before workers or reads can use it."""
        with self.db.read() as session:
            return tuple(CampaignActionRepository(session).unregistered())

    # -- retry ---------------------------------------------------------------------------

    def retry(
        self,
        campaign_id: str,
        *,
        attempts: int | None = None,
        codes: Iterable[str] = (),
        work_ids: Iterable[str] = (),
        now: float | None = None,
    ) -> RetryOutcome:
        """Give failed items (and a failed report) ``attempts`` more attempts.

        Selects every failed item, or those whose last error is one of
        ``codes``, or the items ``work_ids`` (each must be failed). A failed
        report finalization is re-armed too when no ``work_ids`` are named (and
        its error is one of ``codes``, when codes are named). ``attempts``
        (default: the campaign's max attempts) is how many attempts each gets:
        its attempt count is set back so that many remain, up to its maximum
        (then it is ``pending`` as if new, else ``retry_wait`` due now).
        ``nothing_to_retry`` when nothing selected is failed. A code may be given
        in full or by a unique dotted suffix of a failed item's code
        (``tiny.bad_case``); a suffix of several is ``input_invalid``.
        """
        campaign_id = _known_shape(campaign_id)
        codes = _texts(codes, "codes")
        work_ids = _texts(work_ids, "work_ids")
        if any(not dom.is_error_code(code) for code in codes):
            raise _refused(dom.INPUT_INVALID, "an error code to retry is not a valid code")
        if any(not isinstance(w, str) or _WORK_ID.fullmatch(w) is None for w in work_ids):
            raise _refused(dom.INPUT_INVALID, "a work id to retry is not a valid work id")
        if attempts is not None:
            attempts = dom.max_attempts_value(attempts)
        current = self.service.context.now(now)
        with self.db.write() as session:
            rows = CampaignActionRepository(session)
            campaign = CampaignRepository(session).get(campaign_id)
            if campaign is None:
                raise _refused(dom.NOT_FOUND, "no such campaign in this database")
            if campaign.archived_at is not None:
                raise _refused(dom.ARCHIVED, "the campaign is archived: its items are gone")
            if codes:
                codes = self._full_codes(rows.failed_codes(campaign_id), codes)
            if work_ids:
                missing = set(work_ids) - rows.existing_work_ids(campaign_id, work_ids)
                if missing:
                    raise _refused(
                        WORK_NOT_FOUND,
                        f"{len(missing)} work id(s) are not items of this campaign",
                    )
            most = WorkRepository(session).attempts_range(campaign_id)[1]
            remaining = int(most) if attempts is None else attempts
            retried = rows.retry_items(
                campaign_id, current, remaining, codes=codes, work_ids=work_ids
            )
            if work_ids and len(retried) != len(set(work_ids)):
                raise _refused(NOTHING_TO_RETRY, "a named work item is not failed")
            report = False
            if not work_ids:
                failed_code = rows.failed_report_code(campaign_id)
                if failed_code is not None and (not codes or failed_code in codes):
                    report = rows.retry_report(campaign_id, current, remaining)
            if not retried and not report:
                raise _refused(
                    NOTHING_TO_RETRY,
                    "no failed item or report matches"
                    + (f" (codes {', '.join(codes)})" if codes else ""),
                )
            CampaignRepository(session).touch(campaign_id, current)
        return RetryOutcome(campaign_id, tuple(retried), report, remaining)

    @staticmethod
    def _full_codes(failed: set[str], codes: tuple[str, ...]) -> tuple[str, ...]:
        full = []
        for code in codes:
            found = dom.codes_matching(code, failed)
            if len(found) > 1:
                raise _refused(
                    dom.INPUT_INVALID,
                    f"{code} is the end of several failed codes: {', '.join(sorted(found))}",
                )
            full.append(found.pop() if found else code)
        return tuple(full)

    # -- cancel, resume, caps -------------------------------------------------------------

    def controls(self, campaign_id: str, now: float | None = None) -> CampaignControls:
        """Whether the campaign is cancelled, its caps, its live leases and recent claims."""
        campaign_id = _known_shape(campaign_id)
        current = self.service.context.now(now)
        with self.db.read() as session:
            rows = CampaignActionRepository(session)
            row = rows.controls(campaign_id)
            if row is None:
                raise _refused(dom.NOT_FOUND, "no such campaign in this database")
            live, recent = rows.flow(campaign_id, current)
        return CampaignControls(
            campaign_id=campaign_id,
            cancelled_at=None if row.cancelled_at is None else float(row.cancelled_at),
            max_concurrent_leases=row.max_concurrent_leases,
            max_claims_per_minute=row.max_claims_per_minute,
            live_leases=live,
            claims_last_minute=recent,
        )

    def cancel(self, campaign_id: str, now: float | None = None) -> CampaignControls:
        """Stop handing out the campaign's work: claims and report claims return ``None``.

        Leases already handed out may still complete or fail. Status and health
        say ``cancelled``; no report is finalized. ``cancelled`` when it already
        is, ``finished`` when its report is final (nothing is left to stop).
        """
        campaign_id = _known_shape(campaign_id)
        current = self.service.context.now(now)
        with self.db.write() as session:
            rows = CampaignActionRepository(session)
            if rows.controls(campaign_id) is None:
                raise _refused(dom.NOT_FOUND, "no such campaign in this database")
            if rows.report_status(campaign_id) == dom.ReportStatus.SUCCEEDED:
                raise _refused(FINISHED, "the campaign's report is final: nothing to cancel")
            if not rows.set_cancelled(campaign_id, current):
                raise _refused(CANCELLED, "the campaign is already cancelled")
            CampaignRepository(session).touch(campaign_id, current)
            notify_work(session.connection(), campaign_id)  # idle workers: work is due
        return self.controls(campaign_id, now=current)

    def resume(self, campaign_id: str, now: float | None = None) -> CampaignControls:
        """Undo ``cancel``: claims hand out the campaign's work again (``not_cancelled``
        when it is not cancelled)."""
        campaign_id = _known_shape(campaign_id)
        current = self.service.context.now(now)
        with self.db.write() as session:
            rows = CampaignActionRepository(session)
            if rows.controls(campaign_id) is None:
                raise _refused(dom.NOT_FOUND, "no such campaign in this database")
            if not rows.set_cancelled(campaign_id, None):
                raise _refused(NOT_CANCELLED, "the campaign is not cancelled")
            CampaignRepository(session).touch(campaign_id, current)
            notify_work(session.connection(), campaign_id)
        return self.controls(campaign_id, now=current)

    def set_limits(
        self,
        campaign_id: str,
        *,
        max_concurrent_leases: Any = _UNSET,
        max_claims_per_minute: Any = _UNSET,
        now: float | None = None,
    ) -> CampaignControls:
        """Set (an integer from 0 to 1,000,000) or clear (``None``) the campaign's caps.

        ``max_concurrent_leases``: at most this many unexpired item leases at
        once; ``max_claims_per_minute``: at most this many item claims in any
        60 seconds. 0 pauses the campaign. An argument left out is unchanged.
        Leases already handed out are not revoked by a lower cap.
        """
        campaign_id = _known_shape(campaign_id)
        values: dict[str, int | None] = {}
        if max_concurrent_leases is not _UNSET:
            values["max_concurrent_leases"] = cap_value(max_concurrent_leases)
        if max_claims_per_minute is not _UNSET:
            values["max_claims_per_minute"] = cap_value(max_claims_per_minute)
        current = self.service.context.now(now)
        with self.db.write() as session:
            rows = CampaignActionRepository(session)
            if not (rows.set_caps(campaign_id, values) if values else rows.controls(campaign_id)):
                raise _refused(dom.NOT_FOUND, "no such campaign in this database")
            notify_work(session.connection(), campaign_id)  # a cap raised or lifted
        return self.controls(campaign_id, now=current)

    # -- delete --------------------------------------------------------------------------

    def delete(
        self, campaign_id: str, *, force: bool = False, now: float | None = None
    ) -> DeleteOutcome:
        """Delete the campaign and every row of it (items, results, report, its policy,
        and its suite unless another campaign binds it).

        Refused with ``leases_live`` while a worker holds a lease that has not
        expired, unless ``force`` (that worker's next write is then ``lease_lost``).
        """
        campaign_id = _known_shape(campaign_id)
        if not isinstance(force, bool):
            raise _refused(dom.INPUT_INVALID, "force must be true or false")
        current = self.service.context.now(now)
        with self.db.write() as session:
            rows = CampaignActionRepository(session)
            if not rows.lock(campaign_id):
                raise _refused(dom.NOT_FOUND, "no such campaign in this database")
            campaign = CampaignRepository(session).get(campaign_id)
            assert campaign is not None
            live = rows.live_leases(campaign_id, current)
            if live and not force:
                raise _refused(
                    LEASES_LIVE,
                    f"{live} lease(s) are live: stop the workers, wait for the leases to "
                    "expire, or force",
                )
            deleted = rows.delete(campaign_id, campaign.policy_sha256, campaign.suite_sha256)
        self.service.context.plans.forget(campaign_id)
        return DeleteOutcome(campaign_id, deleted, live)
