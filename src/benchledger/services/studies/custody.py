"""The host collaborators behind the ports: materials, run reports and run evidence."""

from __future__ import annotations

from benchledger.domain.study import (
    Budget,
    RunState,
    TrainerKind,
    as_enum,
    boolean,
    identifier,
    refuse,
)
from benchledger.domain.study_evidence import RunEvidence
from benchledger.domain.study_runs import Material, MaterialRef, Run, material_sha256
from benchledger.errors import StudyError
from benchledger.repositories.studies import StudyRepository
from benchledger.services.studies.context import StudyContext
from benchledger.services.studies.write import write


def register_material(
    context: StudyContext,
    actor: str,
    *,
    recipe: object,
    envelope: Budget,
    trainer_id: str,
    builtin: bool,
) -> Material:
    identifier(actor, "Actor id")
    if not isinstance(envelope, Budget):
        raise refuse("Material envelope must be a Budget.")
    envelope.require_positive("Material envelope")
    identifier(trainer_id, "Trainer id")
    kind = TrainerKind.BUILTIN if boolean(builtin, "Builtin") else TrainerKind.EXTERNAL
    ref = MaterialRef(material_sha256(recipe, envelope, trainer_id, kind))

    def work(repo: StudyRepository, now: float) -> Material:
        known = _known_material(context, ref)
        material = context.materials.register(
            recipe=recipe,
            envelope=envelope,
            trainer_id=trainer_id,
            builtin=builtin,
            now=now,
        )
        if known is not None and known == material:
            return material  # registered before: nothing written
        repo.audit(
            "studies.register_material",
            material.sha256,
            actor,
            {
                "trainer_id": material.trainer_id,
                "trainer_kind": material.trainer_kind.value,
                "envelope": material.envelope.to_document(),
            },
            now,
        )
        return material

    return write(context, actor, "studies.register_material", work)


def _known_material(context: StudyContext, ref: MaterialRef) -> Material | None:
    try:
        return context.materials.load(ref)
    except StudyError:
        return None


def report_run(
    context: StudyContext,
    actor: str,
    run_id: str,
    state: RunState | str,
    *,
    custody_ceased: bool | None,
) -> Run:
    identifier(actor, "Actor id")
    identifier(run_id, "Run id")
    target = as_enum(RunState, state, "run state")
    if custody_ceased is not None:
        boolean(custody_ceased, "Custody ceased")

    def work(repo: StudyRepository, now: float) -> Run:
        before = context.runs.load(run_id)
        run = context.runs.transition(run_id, target, now=now, custody_ceased=custody_ceased)
        if run == before:
            return run  # a repeated report changes nothing: nothing written
        repo.audit(
            "studies.report_run",
            run_id,
            actor,
            {"state": run.state.value, "custody_ceased": run.custody_ceased},
            now,
        )
        return run

    return write(context, actor, "studies.report_run", work)


def run(context: StudyContext, actor: str, run_id: str) -> Run:
    identifier(actor, "Actor id")
    identifier(run_id, "Run id")
    with context.reading(actor, "studies.run") as repo:
        reservation = repo.reservation_for_run(run_id)
        if reservation is None:
            raise refuse("Run not found.", "not_found")
        return context.run_of(reservation)


def record_evidence(context: StudyContext, actor: str, evidence: RunEvidence) -> None:
    identifier(actor, "Actor id")
    if not isinstance(evidence, RunEvidence):
        raise refuse("Evidence must be a RunEvidence.")

    def work(repo: StudyRepository, now: float) -> None:
        context.runs.load(evidence.run_id)
        known = context.evidence.load(evidence.run_id)
        if known is not None and known.sha256 == evidence.sha256:
            return  # retained already: nothing written
        context.evidence.record(evidence, now=now)
        repo.audit(
            "studies.record_evidence",
            evidence.run_id,
            actor,
            {"evidence_sha256": evidence.sha256},
            now,
        )

    write(context, actor, "studies.record_evidence", work)


def run_evidence(context: StudyContext, actor: str, run_id: str) -> RunEvidence | None:
    identifier(actor, "Actor id")
    identifier(run_id, "Run id")
    with context.reading(actor, "studies.run_evidence") as repo:
        if repo.reservation_for_run(run_id) is None:
            raise refuse("Run not found.", "not_found")
        return context.evidence.load(run_id)
