"""What every campaign job shares: the database, the collaborators, the clock, the plans.

Also the two steps the work-item lease and the report lease share: renewing a
live lease and recording a failed attempt (the same statement shapes on
``WorkLeases`` and ``ReportLeases``), and the throttled ``updated_at`` touch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa

from benchledger.adapters.reporting import DefaultReportBuilder
from benchledger.adapters.verification import StructuralResultVerifier
from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign import blocked
from benchledger.domain.campaign_results import (
    CaseOutcome,
    ClaimedCase,
    ClaimedReport,
    ReportOutcome,
)
from benchledger.errors import SchemaError
from benchledger.faults import Outage, OutagePolicy, riding, start_up
from benchledger.ports.campaign import ReportBuilder, ResultVerifier
from benchledger.repositories.campaigns.leases import WorkLeases
from benchledger.repositories.campaigns.reports import ReportLeases
from benchledger.repositories.campaigns.store import PROGRESS_TOUCH_SECONDS, touch_campaign
from benchledger.repositories.campaigns.work import missing_work_indexes
from benchledger.services.campaigns.outcomes import Failure
from benchledger.services.campaigns.plans import CampaignPlans

Clock = Callable[[], float]
_Claim = TypeVar("_Claim", ClaimedCase, ClaimedReport)
_Outcome = TypeVar("_Outcome", CaseOutcome, ReportOutcome)

# Timestamps up to this far in the future (another machine's clock) are normal.
DEFAULT_CLOCK_SKEW_SECONDS = 5.0
#: Campaigns whose last touch one service remembers (all forgotten when full).
_TOUCHED_SIZE = 256


def _missing_indexes(db: Database) -> set[str]:
    with db.engine.connect() as connection:
        return set(missing_work_indexes(connection))


class CampaignContext:
    """The database, result verifier, report builder and clock of one ``CampaignService``,
    with its cache of verified plans and of the campaigns it touched."""

    def __init__(
        self,
        db: Database,
        *,
        result_verifier: ResultVerifier | None,
        report_builder: ReportBuilder | None,
        clock: Clock,
        clock_skew_seconds: float,
        outage: Outage | OutagePolicy | None = None,
    ) -> None:
        if not callable(clock):
            raise blocked(dom.DEPENDENCY_INVALID)
        if result_verifier is not None and not callable(
            getattr(result_verifier, "verify_result", None)
        ):
            raise blocked(dom.DEPENDENCY_INVALID)
        if report_builder is not None and not (
            callable(getattr(report_builder, "build", None))
            and callable(getattr(report_builder, "verify", None))
        ):
            raise blocked(dom.DEPENDENCY_INVALID)
        if not isinstance(db, Database):
            raise blocked(dom.DEPENDENCY_INVALID)
        # Start-up rides out a restart within ``outage`` (default: a few seconds), then
        # ledger.database.unavailable: never a raw SQLAlchemy error (faults.start_up).
        starting = riding(outage)
        db.require_current_schema(outage=starting)
        missing = start_up("the schema check", lambda: _missing_indexes(db), starting)
        if missing:
            # Indexes are checked too, not only columns: a file without the claim index is refused.
            raise SchemaError(
                dom.SCHEMA_INVALID,
                "benchmark_campaign_work lacks index(es) " + ", ".join(sorted(missing)),
            )
        self.db = db
        self.result_verifier: ResultVerifier = result_verifier or StructuralResultVerifier()
        self.report_builder: ReportBuilder = report_builder or DefaultReportBuilder()
        self.clock = clock
        self.clock_skew_seconds = dom.duration(clock_skew_seconds, allow_zero=True)
        self.plans = CampaignPlans(db)
        # Campaign id -> when this service last moved its updated_at (see touch).
        self._touched: dict[str, float] = {}

    def now(self, now: Any) -> float:
        """``now``, or the clock's time when it is ``None``: valid epoch seconds."""
        return dom.timestamp(self.clock() if now is None else now)

    def touch(self, connection: sa.Connection, campaign_id: str, now: float) -> None:
        """Move the campaign's ``updated_at`` (throttled: ``touch_campaign``), skipping the
        statement when this service moved it to ``t`` and ``now < t + PROGRESS_TOUCH_SECONDS``:
        the database would not move it either (it is at least ``t`` and never goes back),
        so a hot loop of completions pays one touch a second, not one each. When another
        writer moved it lately, it looks again half a second later."""
        last = self._touched.get(campaign_id)
        if last is not None and now < last + PROGRESS_TOUCH_SECONDS:
            return
        if len(self._touched) >= _TOUCHED_SIZE:
            self._touched.clear()
        if touch_campaign(connection, campaign_id, now):
            self._touched[campaign_id] = now
        else:
            # Another writer moved it within the last second (or holds it now): look again
            # in half a second, not at every commit (it lags by 1.5 s at most, not 1 s).
            self._touched[campaign_id] = now - PROGRESS_TOUCH_SECONDS / 2

    def renew(
        self,
        rows: type[WorkLeases | ReportLeases],
        claim: _Claim,
        now: float | None,
        lease_seconds: float,
        lost: str,
    ) -> _Claim:
        """Extend ``claim``'s live lease to ``now + lease_seconds``, else raise ``lost``."""
        current = self.now(now)
        expires_at = current + dom.duration(lease_seconds)
        with self.db.write_connection() as connection:
            if not rows(connection).renew(claim, current, expires_at):
                raise blocked(lost)
        return attrs.evolve(claim, lease_expires_at=expires_at)

    def record_failure(
        self,
        rows: type[WorkLeases | ReportLeases],
        claim: ClaimedCase | ClaimedReport,
        failure: Failure,
        lost: str,
        outcome: Callable[[Any], _Outcome],
        *,
        duration_seconds: float | None = None,
    ) -> _Outcome:
        """Record ``failure`` on ``claim``'s live lease (else raise ``lost``); one transaction
        (a work item's failed attempt joins its history there, with ``duration_seconds``)."""
        with self.db.write_connection() as connection:
            row = rows(connection).fail(
                claim,
                failure.now,
                status=failure.status,
                next_attempt_at=failure.next_attempt_at,
                code=failure.code,
                detail_hash=failure.detail_hash,
                duration_seconds=duration_seconds,
            )
            if row is None:
                raise blocked(lost)
            self.touch(connection, claim.campaign_id, failure.now)
            return outcome(row)
