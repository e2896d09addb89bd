"""What every study job shares: the ports, the clock, a read, and checks.

A write's transaction is :func:`~benchledger.services.studies.write.write`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import attrs

from benchledger.db import Database
from benchledger.domain.canonical import CanonicalJsonError, parse_canonical_json
from benchledger.domain.study import SelectionPolicy, refuse
from benchledger.domain.study_rules import Role, check_run_receipt
from benchledger.domain.study_runs import Run
from benchledger.domain.study_views import Reservation, Trial
from benchledger.errors import StudyError
from benchledger.ports.study import AccessPolicy, EvidenceStore, MaterialCatalog, RunRegistry
from benchledger.repositories.studies import StudyRepository
from benchledger.repositories.study_records import StudyRecord


@attrs.frozen
class StudyContext:
    """The database, the four ports and the clock of one :class:`StudyService`."""

    db: Database
    runs: RunRegistry
    materials: MaterialCatalog
    evidence: EvidenceStore
    access: AccessPolicy
    clock: Callable[[], float]

    def now(self) -> float:
        now = self.clock()
        if type(now) not in (int, float) or not 0 <= now < float("inf"):
            raise refuse("The clock must return finite, non-negative epoch seconds.")
        return float(now)

    @contextmanager
    def reading(
        self, actor: str, operation: str, study_id: str | None = None
    ) -> Iterator[StudyRepository]:
        """A read: one consistent snapshot, the actor authorized for ``operation`` first."""
        with self.db.read() as session:
            repo = StudyRepository(session)
            repo.snapshot()
            self.authorize(actor, operation, study_id)
            yield repo

    def authorize(self, actor: str, operation: str, study_id: str | None) -> Role:
        return self.access.require(actor, operation, study_id=study_id)

    def run_of(self, reservation: Reservation) -> Run:
        """The reservation's run from the registry, checked to be the attempt it admitted."""
        return check_run_receipt(reservation, self.runs.load(reservation.run_id))

    def children(self, repo: StudyRepository, study_id: str) -> Sequence[tuple[Reservation, Run]]:
        """The unsettled reservations with their (checked) runs.

        Settled reservations are of ceased runs, which never change again.
        """
        return [(reservation, self.run_of(reservation)) for reservation in repo.unsettled(study_id)]


def locked(repo: StudyRepository, study_id: str) -> StudyRecord:
    study = repo.lock(study_id)
    if study is None:
        raise refuse("Study not found.", "not_found")
    return study


def existing(repo: StudyRepository, study_id: str) -> StudyRecord:
    study = repo.get(study_id)
    if study is None:
        raise refuse("Study not found.", "not_found")
    return study


def member(repo: StudyRepository, study_id: str, trial_id: str, message: str) -> Trial:
    """A trial of this study (``not_found`` if none; ``message`` if of another study)."""
    trial = repo.trial(trial_id)
    if trial is None:
        raise refuse("Trial not found.", "not_found")
    if trial.study_id != study_id:
        raise refuse(message)
    return trial


def stored_policy(repo: StudyRepository, sha256: str) -> SelectionPolicy:
    """A stored selection policy, re-verified against its sha256."""
    stored = repo.policy_json(sha256)
    if stored is None:
        raise refuse("Selection policy not found.", "not_found")
    try:
        policy = SelectionPolicy.from_document(parse_canonical_json(stored))
    except (CanonicalJsonError, StudyError):
        raise refuse("Stored selection policy differs.", "unavailable") from None
    if policy.sha256 != sha256:
        raise refuse("Selection policy identity differs.", "unavailable")
    return policy
