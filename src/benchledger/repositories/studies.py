"""All SQL of the study aggregate: studies, members, reservations, candidates, receipts, audit.

A repository works inside the caller's session and never commits; the service
owns the transaction. Writes to one study start with :meth:`StudyRepository.lock`
(``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already
serializes writers).

Rows never leave this module: the service gets domain values (``Trial``,
``Reservation``, ``Candidate``) and a :class:`StudyRecord` it reads
(:mod:`~benchledger.repositories.study_records` maps them), and asks the repository
for every change (:meth:`StudyRepository.change`, ``add_*``). A study moves to a
new revision one way: :meth:`StudyRepository.next_revision`, then
:meth:`StudyRepository.finish` writes it with the write's audit entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from benchledger.db import Prebuilt, consistent_snapshot, insert_if_absent
from benchledger.domain.canonical import CanonicalJsonError, canonical_json, parse_canonical_json
from benchledger.domain.study import DIMENSIONS, Budget, ReservationState, StudyState, refuse
from benchledger.domain.study_views import Candidate, Reservation, Study, Trial
from benchledger.models.study import (
    AuditRow,
    CandidateRow,
    OperationReceiptRow,
    ReservationRow,
    StudyPolicyRow,
    StudyRow,
    TrialRow,
)
from benchledger.repositories.study_records import (
    AuditEntry,
    ReceiptEntry,
    StoredCandidate,
    StoredReceipt,
    StudyRecord,
    budget_columns,
    reservation_view,
    trial_view,
)

# The partial index's predicate as literal SQL: a planner matches it only so.
_UNSETTLED = sa.text("study_reservations.state <> 'settled'")

_STUDIES = cast(sa.Table, StudyRow.__table__)
_TRIALS = cast(sa.Table, TrialRow.__table__)
_RESERVATIONS = cast(sa.Table, ReservationRow.__table__)
_RECEIPTS = cast(sa.Table, OperationReceiptRow.__table__)
_AUDIT = cast(sa.Table, AuditRow.__table__)

#: The columns a write may change; :meth:`StudyRepository.finish` writes them all at once.
_STUDY_MUTABLE = (
    "name",
    "state",
    "admission_epoch",
    "revision",
    "membership_revision",
    "policy_sha256",
    *(f"limit_{name}" for name in DIMENSIONS),
    *(f"charged_{name}" for name in DIMENSIONS),
    "stop_receipt_id",
    "updated_at",
)


def _by(table: sa.Table, **columns: str) -> sa.ColumnElement[bool]:
    return sa.and_(*(table.c[column] == sa.bindparam(name) for column, name in columns.items()))


# The hot statements of the study writes, built once (executed on the session's Connection).
_STUDY_BY_ID = sa.select(_STUDIES).where(_STUDIES.c.id == sa.bindparam("study_id"))
SELECT_STUDY = Prebuilt(_STUDY_BY_ID)
LOCK_STUDY = Prebuilt(_STUDY_BY_ID.with_for_update())
UPDATE_STUDY = Prebuilt(
    sa.update(_STUDIES)
    .where(_STUDIES.c.id == sa.bindparam("study_id"))
    .values({column: sa.bindparam(column) for column in _STUDY_MUTABLE})
)
INSERT_STUDY = Prebuilt(sa.insert(_STUDIES))
SELECT_TRIAL = Prebuilt(sa.select(_TRIALS).where(_TRIALS.c.id == sa.bindparam("trial_id")))
INSERT_TRIAL = Prebuilt(sa.insert(_TRIALS))
#: The stored receipt of (actor, operation, key) and whether the key names a reservation
#: of the study: one round trip for the replay and the conflict check of a write.
_RECEIPT_OF_KEY = _by(_RECEIPTS, actor_id="actor_id", operation="operation", request_key="key")
RECEIPT_AND_CLAIM = Prebuilt(
    sa.select(
        sa.select(_RECEIPTS.c.request_sha256).where(_RECEIPT_OF_KEY).scalar_subquery(),
        sa.select(_RECEIPTS.c.receipt_json).where(_RECEIPT_OF_KEY).scalar_subquery(),
        sa.exists().where(_by(_RESERVATIONS, study_id="study_id", request_key="key")),
    )
)
INSERT_RECEIPT = Prebuilt(sa.insert(_RECEIPTS))
INSERT_AUDIT = Prebuilt(
    sa.insert(_AUDIT)
    .values(
        {
            column: sa.bindparam(column)
            for column in ("action", "subject_id", "actor_id", "details_json", "recorded_at")
        }
    )
    .inline()  # the new id is not wanted back
)
_AUDIT_COLUMNS = ("action", "subject_id", "actor_id", "details_json", "recorded_at")
_RECEIPT_COLUMNS = tuple(column.name for column in _RECEIPTS.columns)
#: PostgreSQL: a write's last three statements in one round trip, the new revision of
#: the study, its audit entry and the write's receipt (data-modifying CTEs all run).
ADVANCE_AUDIT_RECEIPT = Prebuilt(
    sa.insert(_RECEIPTS)
    .values({column: sa.bindparam(f"r_{column}") for column in _RECEIPT_COLUMNS})
    .add_cte(
        sa.update(_STUDIES)
        .where(_STUDIES.c.id == sa.bindparam("study_id"))
        .values({column: sa.bindparam(column) for column in _STUDY_MUTABLE})
        .cte("advanced")
    )
    .add_cte(
        sa.insert(_AUDIT)
        .values({column: sa.bindparam(f"a_{column}") for column in _AUDIT_COLUMNS})
        .inline()
        .cte("audited")
    )
    .inline()
)
SELECT_UNSETTLED = Prebuilt(
    sa.select(_RESERVATIONS)
    .where(_RESERVATIONS.c.study_id == sa.bindparam("study_id"), _UNSETTLED)
    .order_by(_RESERVATIONS.c.position)
)
SETTLE_RESERVATION = Prebuilt(
    sa.update(_RESERVATIONS)
    .where(_RESERVATIONS.c.id == sa.bindparam("reservation_id"))
    .values(
        state=sa.bindparam("state"),
        updated_at=sa.bindparam("now"),
        settled_at=sa.bindparam("settled_at"),
    )
)
LAST_POSITION = Prebuilt(
    sa.select(sa.func.max(_RESERVATIONS.c.position)).where(
        _RESERVATIONS.c.study_id == sa.bindparam("study_id")
    )
)
SELECT_RESERVATION_FOR_RUN = Prebuilt(
    sa.select(_RESERVATIONS).where(_RESERVATIONS.c.run_id == sa.bindparam("run_id"))
)
#: A new reservation at the study's next position, taken in the same statement.
_RESERVATION_VALUES = tuple(
    column.name for column in _RESERVATIONS.columns if column.name != "position"
)
INSERT_RESERVATION = Prebuilt(
    sa.insert(_RESERVATIONS).from_select(
        ["position", *_RESERVATION_VALUES],
        sa.select(
            sa.func.coalesce(sa.func.max(_RESERVATIONS.c.position), 0) + 1,
            *(
                sa.bindparam(f"new_{name}", type_=_RESERVATIONS.c[name].type)
                for name in _RESERVATION_VALUES
            ),
        ).where(_RESERVATIONS.c.study_id == sa.bindparam("new_study_id")),
    )
)


class StudyRepository:
    """The study aggregate's SQL, in the caller's session (its hot statements on its Connection)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._connection: sa.Connection | None = None

    @property
    def connection(self) -> sa.Connection:
        """The session's Connection (in its transaction): the prebuilt statements run here."""
        if self._connection is None:
            self._connection = self.session.connection()
        return self._connection

    def _run(self, statement: Prebuilt, parameters: dict[str, Any]) -> sa.CursorResult[Any]:
        return statement(self.connection, parameters)

    def _forget(self, model: type[Any], key: str) -> None:
        """Expire the ORM copy of a row this session holds, if any, after a Core write to it
        (the testing kit's factories build rows with the ORM in the same session)."""
        if self.session.identity_map:
            held = self.session.identity_map.get(identity_key(model, key))
            if held is not None:
                self.session.expire(held)

    # -- policies --------------------------------------------------------------------------

    def store_policy(self, sha256: str, document: object, now: float) -> None:
        insert_if_absent(
            self.session,
            StudyPolicyRow,
            {"sha256": sha256, "policy_json": canonical_json(document), "created_at": now},
        )

    def policy_json(self, sha256: str) -> str | None:
        return self.session.scalar(
            sa.select(StudyPolicyRow.policy_json).where(StudyPolicyRow.sha256 == sha256)
        )

    # -- studies ---------------------------------------------------------------------------

    def add_study(
        self,
        *,
        study_id: str,
        name: str,
        limits: Budget,
        policy_sha256: str,
        actor: str,
        now: float,
    ) -> StudyRecord:
        """A new draft: revision 1, epoch 0, nothing charged, no members."""
        values = {
            "id": study_id,
            "name": name,
            "state": StudyState.DRAFT.value,
            "admission_epoch": 0,
            "revision": 1,
            "membership_revision": 1,
            "policy_sha256": policy_sha256,
            **budget_columns("limit_", limits),
            **budget_columns("charged_", Budget.zero()),
            "stop_receipt_id": None,
            "created_by": actor,
            "created_at": now,
            "updated_at": now,
        }
        self._run(INSERT_STUDY, values)
        return StudyRecord(values)

    def lock(self, study_id: str) -> StudyRecord | None:
        """The study, its row locked for this transaction (PostgreSQL ``FOR UPDATE``)."""
        self.session.flush()  # as the ORM would (autoflush): rows added but not yet sent
        row = self._run(LOCK_STUDY, {"study_id": study_id}).first()
        return None if row is None else StudyRecord(row._mapping)

    def get(self, study_id: str) -> StudyRecord | None:
        self.session.flush()  # as the ORM would (autoflush): rows added but not yet sent
        row = self._run(SELECT_STUDY, {"study_id": study_id}).first()
        return None if row is None else StudyRecord(row._mapping)

    def page(self, cursor: str | None, limit: int) -> list[StudyRecord]:
        query = sa.select(_STUDIES).order_by(_STUDIES.c.id).limit(limit)
        if cursor is not None:
            query = query.where(_STUDIES.c.id > cursor)
        return [StudyRecord(row._mapping) for row in self.connection.execute(query)]

    def change(
        self,
        study: StudyRecord,
        *,
        name: str | None = None,
        policy_sha256: str | None = None,
        limits: Budget | None = None,
        charged: Budget | None = None,
        state: StudyState | None = None,
        admission_epoch: int | None = None,
        membership_revision: int | None = None,
        stop_receipt_id: str | None = None,
    ) -> None:
        """Set the given fields of a study locked in this transaction.

        They are written with the study's next revision (:meth:`next_revision`,
        then :meth:`finish`).
        """
        changes: dict[str, Any] = {
            "name": name,
            "policy_sha256": policy_sha256,
            "state": None if state is None else state.value,
            "admission_epoch": admission_epoch,
            "membership_revision": membership_revision,
            "stop_receipt_id": stop_receipt_id,
        }
        for prefix, budget in (("limit_", limits), ("charged_", charged)):
            if budget is not None:
                changes.update(budget_columns(prefix, budget))
        study.update({column: value for column, value in changes.items() if value is not None})

    def next_revision(self, study: StudyRecord, now: float) -> int:
        """The study's next revision, not written yet: :meth:`finish` writes it."""
        study.update({"revision": study.revision + 1, "updated_at": now})
        return study.revision

    def _study_values(self, study: StudyRecord) -> dict[str, Any]:
        values = study.columns()
        return {"study_id": study.id, **{column: values[column] for column in _STUDY_MUTABLE}}

    def finish(
        self, study: StudyRecord, audit: AuditEntry | None, receipt: ReceiptEntry | None
    ) -> None:
        """A write's end: the study's new revision (:meth:`next_revision`, with every
        change), its audit entry and the write's receipt, if any (with both, one
        statement on PostgreSQL). Every service write audits its revision; only the
        testing kit's row factories, which build rows rather than audited writes,
        pass no ``audit``."""
        if audit is None or receipt is None or self.connection.dialect.name != "postgresql":
            self._run(UPDATE_STUDY, self._study_values(study))
            self._forget(StudyRow, study.id)
            if audit is not None:
                self._run(INSERT_AUDIT, audit.values())
            if receipt is not None:
                self._run(INSERT_RECEIPT, receipt.values())
            return
        self._run(
            ADVANCE_AUDIT_RECEIPT,
            {
                **self._study_values(study),
                **{f"a_{name}": value for name, value in audit.values().items()},
                **{f"r_{name}": value for name, value in receipt.values().items()},
            },
        )
        self._forget(StudyRow, study.id)

    def view(self, study: StudyRecord, trial_ids: Sequence[str] | None = None) -> Study:
        """The study with its members (read here unless given), as the service returns it."""
        return study.view(self.trial_ids(study.id) if trial_ids is None else trial_ids)

    def snapshot(self) -> None:
        """Make this read transaction one consistent snapshot (before its first query)."""
        consistent_snapshot(self.session)

    # -- members -----------------------------------------------------------------------------

    def trial_ids(self, study_id: str, membership_revision: int | None = None) -> list[str]:
        query = sa.select(_TRIALS.c.id).where(_TRIALS.c.study_id == study_id)
        if membership_revision is not None:
            query = query.where(_TRIALS.c.membership_revision <= membership_revision)
        return list(
            self.connection.execute(query.order_by(_TRIALS.c.membership_revision)).scalars()
        )

    def trial_counts(self, study_ids: Iterable[str]) -> dict[str, int]:
        ids = list(study_ids)
        if not ids:
            return {}
        rows = self.connection.execute(
            sa.select(_TRIALS.c.study_id, sa.func.count())
            .where(_TRIALS.c.study_id.in_(ids))
            .group_by(_TRIALS.c.study_id)
        )
        counts = {study_id: 0 for study_id in ids}
        counts.update({study_id: int(count) for study_id, count in rows})
        return counts

    def trial(self, trial_id: str) -> Trial | None:
        row = self._run(SELECT_TRIAL, {"trial_id": trial_id}).first()
        return None if row is None else trial_view(row)

    def has_trial_with_material(self, study_id: str, material_sha256: str, replicate: int) -> bool:
        return (
            self.connection.execute(
                sa.select(_TRIALS.c.id).where(
                    _TRIALS.c.study_id == study_id,
                    _TRIALS.c.material_sha256 == material_sha256,
                    _TRIALS.c.replicate == replicate,
                )
            ).first()
            is not None
        )

    def add_trial(self, trial: Trial, now: float) -> None:
        self._run(
            INSERT_TRIAL,
            {
                "id": trial.id,
                "study_id": trial.study_id,
                "material_sha256": trial.material.sha256,
                "replicate": trial.replicate,
                "membership_revision": trial.membership_revision,
                "created_at": now,
            },
        )

    # -- reservations ----------------------------------------------------------------------

    def reservation_count(self, study_id: str) -> int:
        """How many reservations the study has: its last position (one index seek).

        Positions are 1, 2, ... without gaps (each admission takes the next one
        under the study lock, and reservations are never deleted), so the last
        is the count, without walking the history as ``count(*)`` would.
        """
        return self.last_position(study_id)

    def reservations(self, study_id: str, offset: int, limit: int) -> list[Reservation]:
        rows = self.connection.execute(
            sa.select(_RESERVATIONS)
            .where(_RESERVATIONS.c.study_id == study_id)
            .order_by(_RESERVATIONS.c.position)
            .offset(offset)
            .limit(limit)
        )
        return [reservation_view(row) for row in rows]

    def unsettled(self, study_id: str) -> list[Reservation]:
        """Reservations whose run has not been seen ceased (settled ones never change).

        Served by the partial index ``ix_study_reservations_unsettled`` in
        position order: the settled history is never walked.
        """
        return [
            reservation_view(row) for row in self._run(SELECT_UNSETTLED, {"study_id": study_id})
        ]

    def last_position(self, study_id: str) -> int:
        return int(self._run(LAST_POSITION, {"study_id": study_id}).scalar() or 0)

    def reservation_for_run(self, run_id: str) -> Reservation | None:
        row = self._run(SELECT_RESERVATION_FOR_RUN, {"run_id": run_id}).first()
        return None if row is None else reservation_view(row)

    def add_reservation(self, reservation: Reservation, now: float) -> None:
        """A new reservation at the study's next position (the study is locked)."""
        values = {
            "id": reservation.id,
            "study_id": reservation.study_id,
            "admission_epoch": reservation.admission_epoch,
            "request_key": reservation.request_key,
            "actor_id": reservation.actor_id,
            "trial_id": reservation.trial_id,
            "parent_run_id": reservation.parent_run_id,
            "run_id": reservation.run_id,
            "request_sha256": reservation.request_sha256,
            "material_sha256": reservation.material_sha256,
            **budget_columns("envelope_", reservation.envelope),
            "state": reservation.state.value,
            "created_at": now,
            "updated_at": now,
            "settled_at": None,
        }
        self._run(INSERT_RESERVATION, {f"new_{name}": values[name] for name in values})

    def set_reservation_state(
        self, reservation_id: str, state: ReservationState, now: float
    ) -> None:
        """Move a reservation (one of :meth:`unsettled`)."""
        self._run(
            SETTLE_RESERVATION,
            {
                "reservation_id": reservation_id,
                "state": state.value,
                "now": now,
                "settled_at": now if state is ReservationState.SETTLED else None,
            },
        )

    def charged_total(self, study_id: str) -> Budget:
        """The sum of every reservation's envelope, recomputed (checks ``charged_*``)."""
        row = self.connection.execute(
            sa.select(
                *(
                    sa.func.coalesce(sa.func.sum(_RESERVATIONS.c[f"envelope_{name}"]), 0)
                    for name in DIMENSIONS
                )
            ).where(_RESERVATIONS.c.study_id == study_id)
        ).one()
        return Budget(*(int(value) for value in row))

    # -- candidates ------------------------------------------------------------------------

    def add_candidate(self, candidate: Candidate, actor: str, now: float) -> None:
        self.session.add(
            CandidateRow(
                id=candidate.id,
                study_id=candidate.study_id,
                trial_id=candidate.trial_id,
                run_id=candidate.run_id,
                checkpoint_sha256=candidate.checkpoint_sha256,
                evaluation_sha256=candidate.evaluation_sha256,
                policy_sha256=candidate.policy_sha256,
                decision=candidate.decision,
                limitations_json=canonical_json(list(candidate.limitations)),
                candidate_sha256=candidate.sha256,
                created_by=actor,
                created_at=now,
            )
        )
        self.session.flush()

    def candidate(self, candidate_id: str) -> StoredCandidate | None:
        row = self.session.get(CandidateRow, candidate_id)
        if row is None:
            return None
        try:
            limitations = parse_canonical_json(row.limitations_json)
        except CanonicalJsonError:
            limitations = None
        if not isinstance(limitations, list) or not all(
            isinstance(item, str) for item in limitations
        ):
            raise refuse("Stored candidate limitations differ.", "unavailable")
        candidate = Candidate(
            id=row.id,
            study_id=row.study_id,
            trial_id=row.trial_id,
            run_id=row.run_id,
            checkpoint_sha256=row.checkpoint_sha256,
            evaluation_sha256=row.evaluation_sha256,
            policy_sha256=row.policy_sha256,
            decision=row.decision,
            limitations=tuple(limitations),
        )
        return StoredCandidate(candidate, row.candidate_sha256)

    def candidate_ids_for_run(self, run_id: str, cursor: str | None, limit: int) -> list[str]:
        query = sa.select(CandidateRow.id).where(CandidateRow.run_id == run_id)
        if cursor is not None:
            query = query.where(CandidateRow.id > cursor)
        return list(self.session.scalars(query.order_by(CandidateRow.id).limit(limit)))

    # -- receipts and audit ------------------------------------------------------------------

    def receipt(self, actor_id: str, operation: str, key: str) -> StoredReceipt | None:
        stored, _ = self.receipt_and_claim(actor_id, operation, key, None)
        return stored

    def receipt_and_claim(
        self, actor_id: str, operation: str, key: str, study_id: str | None
    ) -> tuple[StoredReceipt | None, bool]:
        """The stored receipt of this request key (or None), and whether a reservation of
        ``study_id`` already has the key (always False without a study): one round trip."""
        row: Any = self._run(
            RECEIPT_AND_CLAIM,
            {"actor_id": actor_id, "operation": operation, "key": key, "study_id": study_id},
        ).one()
        sha256, document, claimed = row[0], row[1], row[2]
        stored = None if sha256 is None else StoredReceipt(sha256, document)
        return stored, bool(claimed)

    def add_receipt(
        self,
        *,
        actor_id: str,
        operation: str,
        key: str,
        request_sha256: str,
        study_id: str | None,
        document: object,
        now: float,
    ) -> None:
        self._run(
            INSERT_RECEIPT,
            ReceiptEntry(
                actor_id, operation, key, request_sha256, study_id, document, now
            ).values(),
        )

    def audit(
        self, action: str, subject_id: str, actor_id: str, details: object, now: float
    ) -> None:
        self._run(INSERT_AUDIT, AuditEntry(action, subject_id, actor_id, details, now).values())
