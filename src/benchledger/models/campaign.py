"""Campaign tables: the legacy schema v3 plus the stored policy and suite, and later additions."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from benchledger.domain.attempts import ATTEMPT_OUTCOMES
from benchledger.domain.campaign import (
    CLAIMABLE,
    DEFAULT_MAX_LEASE_LOSSES,
    DEFAULT_MAX_THROTTLES,
    MAX_ATTEMPTS,
    REPORT_STATUSES,
    STATUSES,
    WorkStatus,
)
from benchledger.models.base import Base, one_of

#: Indexes on expressions (a collation), which autogenerate cannot compare: the migrations
#: own them, and autogenerate and the schema tests leave them alone.
EXPRESSION_INDEXES: frozenset[str] = frozenset({"benchmark_campaign_items_in_order"})
#: The items' unique constraint, which only SQLite has (revision 0015: on PostgreSQL the
#: unique items-in-order index holds it); autogenerate, which does not see that a
#: constraint is SQLite's only, leaves it alone on PostgreSQL.
SQLITE_ONLY_CONSTRAINTS: frozenset[str] = frozenset({"uq_benchmark_campaign_work_campaign_id"})

#: The CHECK constraints below are built from the domain's vocabularies (WorkStatus,
#: ReportStatus); tests/schema/test_vocabularies.py ties the migrated ones to them.
WORK_STATUSES = STATUSES

_STATUS_CHECK = one_of("status", WORK_STATUSES)
_REPORT_STATUS_CHECK = one_of("status", REPORT_STATUSES)
_CLAIMABLE = one_of("status", CLAIMABLE)
_LEASED = f"status = '{WorkStatus.LEASED.value}'"
_ATTEMPTS_CHECK = "attempts >= 0"
_MAX_ATTEMPTS_CHECK = f"max_attempts BETWEEN 1 AND {MAX_ATTEMPTS}"


class CampaignRow(Base):
    __tablename__ = "benchmark_campaigns"
    __table_args__ = (
        sa.CheckConstraint("work_count > 0", name="work_count"),
        # The listing order of CampaignService.list() (keyset pages).
        sa.Index("benchmark_campaigns_created", "created_at", "campaign_id"),
        # A limit group's campaigns, which its caps count across.
        sa.Index("benchmark_campaigns_limit_group", "limit_group"),
    )

    campaign_id: Mapped[str] = mapped_column(primary_key=True)
    policy_sha256: Mapped[str] = mapped_column()
    suite_sha256: Mapped[str] = mapped_column()
    work_count: Mapped[int] = mapped_column(sa.Integer)
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()
    # Every item's and the report's attempt budget: status() and health() need no
    # aggregate over the items to check the report state (revision 0007).
    max_attempts: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("1"))
    # The last integrity audit (CampaignService.verify): when, and what it found.
    verified_at: Mapped[float | None] = mapped_column()
    verified_ok: Mapped[bool | None] = mapped_column(sa.Boolean)
    verified_problems: Mapped[int | None] = mapped_column(sa.Integer)
    # Operators' controls (revision 0008): a cancelled campaign hands out no work; the
    # flow-control caps (NULL: none; 0 pauses) are enforced by the claim.
    cancelled_at: Mapped[float | None] = mapped_column()
    max_concurrent_leases: Mapped[int | None] = mapped_column(sa.Integer)
    max_claims_per_minute: Mapped[int | None] = mapped_column(sa.Integer)
    # What the campaign measures, copied from its policy at create (revision 0009) so
    # listings show and filter by it; the optional name is metadata, not identity.
    name: Mapped[str | None] = mapped_column()
    candidate_provider_id: Mapped[str | None] = mapped_column()
    candidate_model_id: Mapped[str | None] = mapped_column()
    candidate_model_version: Mapped[str | None] = mapped_column()
    # The limit group whose caps the campaign's claims share with its other campaigns
    # (revision 0013; by default the provider's), and the name of the evaluator a fleet
    # runs it with (a name only: a fleet maps it to code through its own allow-list).
    limit_group: Mapped[str | None] = mapped_column()
    evaluator: Mapped[str | None] = mapped_column()
    # The archive (revision 0014; all NULL: never archived): when CampaignService.archive
    # dropped the finished campaign's items, how many, the digest of the results the
    # report is bound to, the per-locale summary of those results (canonical JSON) and the
    # seal binding these to the kept report's sha256 (domain.campaign_archive).
    archived_at: Mapped[float | None] = mapped_column()
    archived_items: Mapped[int | None] = mapped_column(sa.Integer)
    archived_results_sha256: Mapped[str | None] = mapped_column()
    archived_summary_json: Mapped[str | None] = mapped_column()
    archived_seal: Mapped[str | None] = mapped_column()


class WorkRow(Base):
    __tablename__ = "benchmark_campaign_work"
    __table_args__ = (
        sa.CheckConstraint(_STATUS_CHECK, name="status"),
        sa.CheckConstraint(_ATTEMPTS_CHECK, name="attempts"),
        sa.CheckConstraint(_MAX_ATTEMPTS_CHECK, name="max_attempts"),
        # SQLite: one item per (campaign, locale, case), and their code-point order (BINARY).
        sa.UniqueConstraint("campaign_id", "target_locale", "suite_case_key").ddl_if(
            dialect="sqlite"
        ),
        sa.Index(
            "benchmark_campaign_ready",
            "campaign_id",
            "status",
            "next_attempt_at",
            "target_locale",
            "suite_case_key",
        ),
        # Claim order without walking finished rows: only claimable rows are indexed.
        sa.Index(
            "benchmark_campaign_claimable",
            "campaign_id",
            "target_locale",
            "suite_case_key",
            sqlite_where=sa.text(_CLAIMABLE),
            postgresql_where=sa.text(_CLAIMABLE),
        ),
        # The lease-expiry sweep reads only leased rows.
        sa.Index(
            "benchmark_campaign_leases",
            "campaign_id",
            "lease_expires_at",
            sqlite_where=sa.text(_LEASED),
            postgresql_where=sa.text(_LEASED),
        ),
        # Error counts read only the items that carry an error code.
        sa.Index(
            "benchmark_campaign_errors",
            "campaign_id",
            "last_error_code",
            sqlite_where=sa.text("last_error_code IS NOT NULL"),
            postgresql_where=sa.text("last_error_code IS NOT NULL"),
        ),
        # PostgreSQL: one item per (campaign, locale, case), and the items in code-point
        # order (the "C" collation), the order results pages, exports and the audit read
        # them in (revisions 0011 and 0015: "C" equality is the default collation's).
        sa.Index(
            "benchmark_campaign_items_in_order",
            "campaign_id",
            sa.text('target_locale COLLATE "C"'),
            sa.text('suite_case_key COLLATE "C"'),
            unique=True,
        ).ddl_if(dialect="postgresql"),
    )

    work_id: Mapped[str] = mapped_column(primary_key=True)
    campaign_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("benchmark_campaigns.campaign_id")
    )
    target_locale: Mapped[str] = mapped_column()
    suite_case_key: Mapped[str] = mapped_column()
    status: Mapped[str] = mapped_column()
    attempts: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    max_attempts: Mapped[int] = mapped_column(sa.Integer)
    next_attempt_at: Mapped[float] = mapped_column()
    lease_owner: Mapped[str | None] = mapped_column()
    lease_token: Mapped[str | None] = mapped_column()
    lease_expires_at: Mapped[float | None] = mapped_column()
    last_error_code: Mapped[str | None] = mapped_column()
    last_error_detail_hash: Mapped[str | None] = mapped_column()
    result_json: Mapped[str | None] = mapped_column()
    result_sha256: Mapped[str | None] = mapped_column()
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()
    # sha256 binding a succeeded item's work id, attempts, budget and result sha256
    # (domain.integrity.result_seal); written with the result, re-checked by verify().
    result_seal: Mapped[str | None] = mapped_column()
    # When the current (or last) lease was granted: an attempt's start (revision 0009).
    leased_at: Mapped[float | None] = mapped_column()
    # Leases lost to a holder that stopped renewing (revision 0010): each gave its attempt
    # back; at max_lease_losses the item fails (lease_losses_spent).
    lease_losses: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    max_lease_losses: Mapped[int] = mapped_column(
        sa.Integer, server_default=sa.text(str(DEFAULT_MAX_LEASE_LOSSES))
    )
    # Throttled hand-backs (revision 0012): each gave its attempt back; from
    # max_throttles on, a throttle spends an attempt like any failure (throttles_spent).
    throttles: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    max_throttles: Mapped[int] = mapped_column(
        sa.Integer, server_default=sa.text(str(DEFAULT_MAX_THROTTLES))
    )
    # The attempts the item had when its history began (0 for items created since
    # revision 0009; an older item's count then): the audit expects a row for each after.
    history_from: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))


class AttemptRow(Base):
    """One attempt at a work item: append-only, written with the outcome it records."""

    __tablename__ = "benchmark_campaign_attempts"
    __table_args__ = (
        sa.CheckConstraint(one_of("outcome", ATTEMPT_OUTCOMES), name="outcome"),
        sa.CheckConstraint("attempt >= 1", name="attempt"),
        # One item's history, in the order it was recorded. Not unique by attempt: an
        # operator's retry gives an item its attempts again, numbered from 1.
        sa.Index("benchmark_campaign_attempts_work", "work_id", "attempt_id"),
        # Failures over time, per campaign.
        sa.Index("benchmark_campaign_attempts_finished", "campaign_id", "finished_at"),
    )

    attempt_id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("benchmark_campaigns.campaign_id")
    )
    work_id: Mapped[str] = mapped_column(sa.Text, sa.ForeignKey("benchmark_campaign_work.work_id"))
    attempt: Mapped[int] = mapped_column(sa.Integer)
    worker_id: Mapped[str | None] = mapped_column()
    claimed_at: Mapped[float | None] = mapped_column()
    finished_at: Mapped[float] = mapped_column()
    outcome: Mapped[str] = mapped_column()
    error_code: Mapped[str | None] = mapped_column()
    duration_seconds: Mapped[float | None] = mapped_column()


class ReportRow(Base):
    __tablename__ = "benchmark_campaign_reports"

    campaign_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("benchmark_campaigns.campaign_id"), primary_key=True
    )
    policy_sha256: Mapped[str] = mapped_column()
    results_sha256: Mapped[str] = mapped_column()
    report_json: Mapped[str] = mapped_column()
    report_sha256: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class ReportStateRow(Base):
    __tablename__ = "benchmark_campaign_report_state"
    __table_args__ = (
        sa.CheckConstraint(_REPORT_STATUS_CHECK, name="status"),
        sa.CheckConstraint(_ATTEMPTS_CHECK, name="attempts"),
        sa.CheckConstraint(_MAX_ATTEMPTS_CHECK, name="max_attempts"),
    )

    campaign_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("benchmark_campaigns.campaign_id"), primary_key=True
    )
    status: Mapped[str] = mapped_column()
    attempts: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    max_attempts: Mapped[int] = mapped_column(sa.Integer)
    next_attempt_at: Mapped[float] = mapped_column()
    lease_owner: Mapped[str | None] = mapped_column()
    lease_token: Mapped[str | None] = mapped_column()
    lease_expires_at: Mapped[float | None] = mapped_column()
    last_error_code: Mapped[str | None] = mapped_column()
    last_error_detail_hash: Mapped[str | None] = mapped_column()
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()
    # As a work item's (revision 0010): a killed finalizer's lease gives its attempt back.
    lease_losses: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    max_lease_losses: Mapped[int] = mapped_column(
        sa.Integer, server_default=sa.text(str(DEFAULT_MAX_LEASE_LOSSES))
    )


class StoredPolicyRow(Base):
    """A campaign policy as canonical JSON, keyed by its sha256 (content-addressed)."""

    __tablename__ = "benchmark_campaign_policies"

    policy_sha256: Mapped[str] = mapped_column(primary_key=True)
    policy_json: Mapped[str] = mapped_column()
    created_at: Mapped[float] = mapped_column()


class StoredSuiteRow(Base):
    """A suite manifest as canonical JSON, keyed by its sha256 (content-addressed)."""

    __tablename__ = "benchmark_campaign_suites"

    suite_sha256: Mapped[str] = mapped_column(primary_key=True)
    suite_json: Mapped[str] = mapped_column()
    case_count: Mapped[int] = mapped_column(sa.Integer)
    created_at: Mapped[float] = mapped_column()


class ClaimLogRow(Base):
    """When each claim of a campaign with ``max_claims_per_minute`` was handed out.

    Only such campaigns write here; a claim counts the rows of the last 60 s
    (index range, at most the cap) and prunes older ones (revision 0008).
    """

    __tablename__ = "benchmark_campaign_claims"
    __table_args__ = (sa.Index("benchmark_campaign_claims_recent", "campaign_id", "claimed_at"),)

    claim_id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("benchmark_campaigns.campaign_id")
    )
    claimed_at: Mapped[float] = mapped_column()


class LimitGroupRow(Base):
    """Caps shared by every campaign whose ``limit_group`` is this key (revision 0013).

    ``NULL``: no such cap; 0 pauses the group. A claim of any campaign in the group
    counts its live leases and the last minute's usage under this row's lock.
    """

    __tablename__ = "benchmark_limit_groups"

    group_key: Mapped[str] = mapped_column(primary_key=True)
    max_concurrent_leases: Mapped[int | None] = mapped_column(sa.Integer)
    max_claims_per_minute: Mapped[int | None] = mapped_column(sa.Integer)
    max_cost_per_minute: Mapped[int | None] = mapped_column(sa.Integer)
    created_at: Mapped[float] = mapped_column()
    updated_at: Mapped[float] = mapped_column()


class LimitGroupUsageRow(Base):
    """A limit group's claims (``claims`` 1) and reported costs (``cost_units``), by time.

    Written only for groups with a per-minute cap; the claims count the last 60 s
    (index range) and prune older rows.
    """

    __tablename__ = "benchmark_limit_group_usage"
    __table_args__ = (sa.Index("benchmark_limit_group_usage_recent", "group_key", "used_at"),)

    usage_id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    group_key: Mapped[str] = mapped_column()
    used_at: Mapped[float] = mapped_column()
    claims: Mapped[int] = mapped_column(sa.Integer)
    cost_units: Mapped[int] = mapped_column(sa.Integer)
