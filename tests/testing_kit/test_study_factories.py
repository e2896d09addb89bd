"""Study factories make what StudyService makes: digests, ids, charges; rows load through it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchledger import Database, StudyError
from benchledger.adapters.evidence import SqlEvidenceStore
from benchledger.domain.canonical import sha256_json
from benchledger.domain.study import Budget, SelectionPolicy, StudyState, TrainerKind
from benchledger.domain.study_evidence import RunEvidence, select_checkpoint
from benchledger.domain.study_runs import Material, MaterialRef, material_sha256
from benchledger.models.study import AuditRow, ReservationRow
from benchledger.services.studies import StudyService
from benchledger.testing import LedgerClock
from benchledger.testing.factories import (
    TEST_OPERATOR,
    TEST_OWNER,
    AccessRoleRowFactory,
    AuditRowFactory,
    BudgetFactory,
    CandidateRowFactory,
    EnvelopeFactory,
    ExecutionGrantRowFactory,
    MaterialFactory,
    MaterialRefFactory,
    MaterialRowFactory,
    MetricDefinitionFactory,
    OperationReceiptRowFactory,
    ReservationRowFactory,
    RunCapabilityRowFactory,
    RunCheckpointRowFactory,
    RunEvidenceFactory,
    RunEvidenceRowFactory,
    RunMetricRowFactory,
    RunObservationRowFactory,
    RunRowFactory,
    SelectionPolicyFactory,
    StudyPolicyRowFactory,
    StudyRowFactory,
    TrialRowFactory,
)

# -- value objects (no database) ---------------------------------------------------------


def test_value_factories_return_the_real_value_objects() -> None:
    assert isinstance(BudgetFactory(), Budget)
    assert isinstance(SelectionPolicyFactory(), SelectionPolicy)
    assert isinstance(MaterialRefFactory(), MaterialRef)
    assert isinstance(MaterialFactory(), Material)
    assert isinstance(RunEvidenceFactory(), RunEvidence)


def test_envelopes_fit_the_default_limits_ten_times() -> None:
    limits, envelope = BudgetFactory(), EnvelopeFactory()
    total = Budget.zero()
    for _ in range(10):
        total = total + envelope
    assert total.fits_within(limits)
    assert (total + envelope).exceeded(limits)
    assert limits.require_positive("limits") is limits


def test_selection_policy_is_content_addressed_by_its_metric() -> None:
    metric = MetricDefinitionFactory()
    policy = SelectionPolicyFactory(metric=metric)
    assert policy.metric_definition_sha256 == metric.sha256
    assert policy.sha256 == sha256_json(policy.to_document())
    assert SelectionPolicy.from_document(policy.to_document()) == policy
    assert SelectionPolicyFactory(metric=metric).sha256 == policy.sha256
    assert SelectionPolicyFactory().sha256 != policy.sha256


def test_material_ref_is_the_catalogs_digest() -> None:
    material = MaterialFactory(recipe={"lr": 0.1}, trainer_id="trainer-x")
    assert material.sha256 == material_sha256(
        {"lr": 0.1}, material.envelope, "trainer-x", TrainerKind.EXTERNAL
    )
    assert MaterialRefFactory(material=material) == material.ref
    assert MaterialFactory().sha256 != MaterialFactory().sha256


def test_evidence_satisfies_a_policy_on_its_metric() -> None:
    metric = MetricDefinitionFactory()
    evidence = RunEvidenceFactory(metric=metric, checkpoint_count=3)
    chosen = select_checkpoint(evidence, SelectionPolicyFactory(metric=metric), None)
    assert chosen == evidence.checkpoints[-1]
    assert chosen.selected
    last = select_checkpoint(
        evidence, SelectionPolicyFactory(metric=metric, checkpoint_rule="last"), None
    )
    assert last == chosen
    assert evidence.sha256 == sha256_json(evidence.identity_document())
    assert RunEvidence.from_document(evidence.to_document()) == evidence


# -- rows, read back through the service --------------------------------------------------


def test_study_loads_through_get_list_and_policy(
    ledger_session: Session, study_service: StudyService
) -> None:
    policy, limits = SelectionPolicyFactory(), BudgetFactory(attempt_slots=3)
    row = StudyRowFactory(policy=policy, limits=limits, name="Factory study")
    page = study_service.get(TEST_OWNER, row.id)
    assert page.study.id == row.id
    assert (page.study.name, page.study.state, page.study.revision) == (
        "Factory study",
        StudyState.DRAFT,
        1,
    )
    assert page.study.limits == limits
    assert page.charged == Budget.zero()
    assert study_service.policy(TEST_OWNER, row.policy_sha256) == policy
    listed = study_service.list(TEST_OWNER).studies
    assert [summary.id for summary in listed] == [row.id]
    assert study_service.role_of(TEST_OWNER) == "owner"


@pytest.mark.parametrize(
    ("state", "epoch", "revision"),
    [("draft", 0, 1), ("open", 1, 2), ("stopping", 2, 3), ("stopped", 2, 3)],
)
def test_study_states_carry_their_epoch_and_revision(
    ledger_session: Session, study_service: StudyService, state: str, epoch: int, revision: int
) -> None:
    study = study_service.get(TEST_OWNER, StudyRowFactory(state=state).id).study
    assert (study.state, study.admission_epoch, study.revision) == (state, epoch, revision)
    assert (study.stop_receipt_id is not None) == (state in ("stopping", "stopped"))


def test_members_advance_the_study_and_the_service_continues_from_there(
    ledger_session: Session, study_service: StudyService
) -> None:
    study = StudyRowFactory()
    trials = [TrialRowFactory(study=study, replicate=index) for index in range(3)]
    page = study_service.get(TEST_OWNER, study.id)
    assert page.study.trial_ids == tuple(trial.id for trial in trials)
    assert (page.study.membership_revision, page.study.revision) == (4, 4)
    assert study_service.trial(TEST_OWNER, trials[1].id).replicate == 1
    # The service takes over at the revision the factories left.
    material = MaterialRowFactory()
    added = study_service.prepare_trial(
        TEST_OWNER,
        study.id,
        revision=4,
        material=MaterialRef(material.sha256),
        replicate=0,
        request_key="factory-next-trial",
    )
    assert added.membership_revision == 5
    opened = study_service.open_study(
        TEST_OWNER, study.id, revision=5, request_key="factory-open-study"
    )
    assert (opened.state, opened.admission_epoch) == (StudyState.OPEN, 1)


def test_catalog_material_is_what_register_material_stores(
    ledger_session: Session, study_service: StudyService
) -> None:
    AccessRoleRowFactory(actor_id=TEST_OWNER, role="owner")
    material = MaterialFactory(recipe={"lr": 0.5})
    MaterialRowFactory(material=material)
    registered = study_service.register_material(
        TEST_OWNER,
        recipe={"lr": 0.5},
        envelope=material.envelope,
        trainer_id=material.trainer_id,
    )
    assert registered == material


def test_reservation_charges_its_envelope_and_admission_continues(
    ledger_session: Session, study_service: StudyService
) -> None:
    reservation = ReservationRowFactory()
    page = study_service.get(TEST_OWNER, reservation.study_id)
    assert page.charged == Budget(
        reservation.envelope_attempt_slots,
        reservation.envelope_admitted_wall_seconds,
        reservation.envelope_retained_bytes,
        reservation.envelope_peak_staging_bytes,
    )
    assert [r.id for r in page.reservations] == [reservation.id]
    assert page.reservations[0].state == "reserved"
    # Finish the run through the service: reconcile settles the factory's reservation.
    study_service.report_run(TEST_OWNER, reservation.run_id, "completed")
    settled = study_service.reconcile(TEST_OWNER, reservation.study_id)
    assert settled.reservations[0].state == "settled"
    assert settled.charged == page.charged  # the worst case stays charged
    # A second admission by the service, at the revision the factories left.
    study = settled.study
    admission = study_service.admit(
        TEST_OWNER,
        study.id,
        revision=study.revision,
        admission_epoch=study.admission_epoch,
        trial_id=reservation.trial_id,
        request_key="factory-second-admit",
    )
    assert admission.reservation.envelope == page.charged
    assert study_service.get(TEST_OWNER, study.id).charged == page.charged + page.charged


def test_a_factory_admission_is_what_admit_would_replay(
    ledger_session: Session, study_service: StudyService
) -> None:
    """The stored request digest is the service's: the same key with the same inputs is
    recognised as this admission (conflict on the reservation), not a new one."""
    reservation = ReservationRowFactory()
    with pytest.raises(StudyError) as raised:
        study_service.admit(
            TEST_OWNER,
            reservation.study_id,
            revision=study_service.get(TEST_OWNER, reservation.study_id).study.revision,
            admission_epoch=reservation.admission_epoch,
            trial_id=reservation.trial_id,
            request_key=reservation.request_key,
        )
    assert raised.value.code == "conflict"


@pytest.mark.parametrize(
    ("run_state", "reservation_state"),
    [
        ("queued", "reserved"),
        ("running", "running"),
        ("completed", "settled"),
        ("failed", "settled"),
        ("unknown", "unknown"),
    ],
)
def test_reservations_follow_their_runs_as_reconcile_would(
    ledger_session: Session, study_service: StudyService, run_state: str, reservation_state: str
) -> None:
    run = RunRowFactory(state=run_state)
    before = study_service.get(TEST_OWNER, run.study_id)
    assert before.reservations[0].state == reservation_state
    if run_state != "queued":
        after = study_service.reconcile(TEST_OWNER, run.study_id)
        assert after.reservations == before.reservations  # nothing left to settle
    row = ledger_session.scalar(sa.select(ReservationRow).where(ReservationRow.run_id == run.id))
    assert row is not None
    assert (row.settled_at is not None) == (reservation_state == "settled")


def test_evidence_rows_load_as_the_evidence_they_store(
    ledger_session: Session, ledger_db: Database
) -> None:
    evidence = RunEvidenceFactory(checkpoint_count=3, capabilities=("validation", "export"))
    run = RunRowFactory(state="completed")
    row = RunEvidenceRowFactory(
        run=run,
        evidence=RunEvidenceFactory(
            run_id=run.id,
            material=MaterialRef(run.material_sha256),
            checkpoint_count=3,
            capabilities=("validation", "export"),
            metric=evidence.metric_definitions[0],
        ),
    )
    with ledger_db.read():
        loaded = SqlEvidenceStore().load(run.id)
    assert loaded is not None
    assert loaded.sha256 == row.evidence_sha256
    assert len(loaded.checkpoints) == 3
    assert loaded.coverage.required == ("validation", "export")


@pytest.mark.parametrize(
    "part",
    [
        RunMetricRowFactory,
        RunCheckpointRowFactory,
        RunObservationRowFactory,
        RunCapabilityRowFactory,
    ],
)
def test_each_evidence_part_alone_makes_whole_evidence(
    ledger_session: Session, ledger_db: Database, part: type
) -> None:
    row = part()
    with ledger_db.read():
        loaded = SqlEvidenceStore().load(row.run_id)  # re-verifies the digest
    assert loaded is not None
    assert loaded.run_id == row.run_id


def test_candidate_is_verified_by_the_service(
    ledger_session: Session, study_service: StudyService
) -> None:
    row = CandidateRowFactory()
    result = study_service.candidate(TEST_OWNER, row.id)
    assert result.ref.sha256 == row.candidate_sha256
    assert result.checkpoint.sha256 == row.checkpoint_sha256
    assert result.checkpoint.selected
    page = study_service.candidates(TEST_OWNER, row.run_id)
    assert [ref.id for ref in page.candidates] == [row.id]


def test_the_service_selects_the_same_candidate_from_factory_evidence(
    ledger_session: Session, study_service: StudyService
) -> None:
    run = RunRowFactory(state="completed")
    metric = MetricDefinitionFactory()
    study = study_service.get(TEST_OWNER, run.study_id).study
    policy_row = StudyPolicyRowFactory(policy=SelectionPolicyFactory(metric=metric))
    saved = study_service.save(
        TEST_OWNER,
        study.id,
        revision=study.revision,
        name=study.name,
        limits=study.limits,
        policy=study_service.policy(TEST_OWNER, policy_row.sha256),
        request_key="factory-save-policy",
    )
    evidence = RunEvidenceFactory(
        run_id=run.id, material=MaterialRef(run.material_sha256), metric=metric
    )
    RunEvidenceRowFactory(run=run, evidence=evidence)
    result = study_service.select_candidate(
        TEST_OWNER,
        study.id,
        revision=saved.revision,
        trial_id=run.trial_id,
        run_id=run.id,
        request_key="factory-select",
    )
    policy = study_service.policy(TEST_OWNER, policy_row.sha256)
    assert result.checkpoint == select_checkpoint(evidence, policy, None)
    assert result.candidate.evaluation_sha256 == evidence.evaluation_sha256
    assert study_service.candidate(TEST_OWNER, result.ref.id) == result


def test_an_operator_admits_with_a_factory_grant(
    ledger_session: Session, study_service: StudyService
) -> None:
    grant = ExecutionGrantRowFactory()
    assert study_service.role_of(TEST_OPERATOR) == "operator"
    study = study_service.get(TEST_OPERATOR, grant.study_id).study
    admission = study_service.admit(
        TEST_OPERATOR,
        grant.study_id,
        revision=study.revision,
        admission_epoch=study.admission_epoch,
        trial_id=grant.trial_id,
        approval_id=grant.id,
        request_key="factory-granted-admit",
    )
    assert admission.run.approval_id == grant.id


def test_create_replays_a_factory_receipt(
    ledger_session: Session, study_service: StudyService
) -> None:
    policy, limits = SelectionPolicyFactory(), BudgetFactory()
    receipt = OperationReceiptRowFactory(policy=policy, limits=limits)
    study = study_service.get(TEST_OWNER, receipt.study_id).study
    replayed = study_service.create(
        TEST_OWNER,
        name=study.name,
        limits=limits,
        policy=policy,
        request_key=receipt.request_key,
    )
    assert replayed == study
    assert [s.id for s in study_service.list(TEST_OWNER).studies] == [study.id]


def test_audit_rows_are_append_only(ledger_session: Session, ledger_db: Database) -> None:
    row = AuditRowFactory(details={"revision": 1})
    ledger_session.commit()
    with pytest.raises(sa.exc.DatabaseError), ledger_db.write() as session:
        session.execute(sa.update(AuditRow).values(actor_id="someone-else"))
    assert row.details_json == '{"revision":1}'


def test_roles_are_one_per_actor(ledger_session: Session, study_service: StudyService) -> None:
    AccessRoleRowFactory(actor_id="reader", role="viewer")
    again = AccessRoleRowFactory(actor_id="reader", role="editor")
    assert again.role == "viewer"  # the existing role is kept
    assert study_service.role_of("reader") == "viewer"


def test_study_timestamps_follow_the_ledger_clock(
    ledger_session: Session, ledger_clock: LedgerClock
) -> None:
    study = StudyRowFactory()
    ledger_clock.advance(60)
    trial = TrialRowFactory(study=study)
    assert study.created_at + 60 == trial.created_at == study.updated_at
