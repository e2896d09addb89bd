"""Membership: a study's immutable trials, one registered material and a replicate each."""

from __future__ import annotations

import uuid

from benchledger.domain.study import MAX_MEMBERS, natural, refuse, request_sha256
from benchledger.domain.study_runs import Material, MaterialRef
from benchledger.domain.study_views import Trial
from benchledger.services.studies.context import StudyContext
from benchledger.services.studies.write import (
    StudyWrite,
    WriteRequest,
    checked_study_key,
    write_study,
)


def _material_ref(material: object) -> MaterialRef:
    if isinstance(material, Material):
        return material.ref
    if not isinstance(material, MaterialRef):
        raise refuse("Material must be a MaterialRef.")
    return material


def prepare_trial(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    revision: int,
    material: MaterialRef | Material,
    replicate: int,
    request_key: str,
) -> Trial:
    operation = "studies.prepare_trial"
    key = checked_study_key(actor, request_key, study_id, revision)
    ref = _material_ref(material)
    natural(replicate, "Replicate")
    sha = request_sha256(
        operation,
        study_id,
        {"revision": revision, "material_sha256": ref.sha256, "replicate": replicate},
    )

    def rule(write: StudyWrite) -> Trial:
        study = write.study
        if study.membership_revision - 1 >= MAX_MEMBERS:
            raise refuse("Study membership is full.", "unavailable")
        write.context.materials.load(ref)
        if write.repo.has_trial_with_material(study_id, ref.sha256, replicate):
            raise refuse("Material/replicate already belongs to this study.", "conflict")
        trial = Trial(
            id=uuid.uuid4().hex,
            study_id=study_id,
            material=ref,
            replicate=replicate,
            membership_revision=study.membership_revision + 1,
        )
        write.repo.add_trial(trial, write.now)
        write.repo.change(study, membership_revision=trial.membership_revision)
        write.advance({"trial_id": trial.id})
        return trial

    request = WriteRequest(actor, operation, study_id, revision, key, sha)
    return write_study(context, request, Trial, rule)
