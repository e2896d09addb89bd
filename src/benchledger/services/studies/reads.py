"""Reads: a study with a page of its reservations, the study list, policies, trials.

Each read is one consistent snapshot (:meth:`StudyRepository.snapshot`) and
needs the actor's ``inspect`` permission.
"""

from __future__ import annotations

from benchledger.domain.study import (
    MAX_LIST_PAGE,
    MAX_STUDY_PAGE,
    SelectionPolicy,
    identifier,
    natural,
    page_limit,
    refuse,
    sha256_hex,
)
from benchledger.domain.study_views import PageInfo, StudyList, StudyPage, Trial
from benchledger.repositories.studies import StudyRepository
from benchledger.repositories.study_records import StudyRecord
from benchledger.services.studies.context import StudyContext, existing, stored_policy


def get(
    context: StudyContext,
    actor: str,
    study_id: str,
    *,
    offset: int,
    limit: int,
    revision: int | None,
) -> StudyPage:
    identifier(actor, "Actor id")
    identifier(study_id, "Study id")
    natural(offset, "Page offset")
    page_limit(limit, MAX_STUDY_PAGE)
    if revision is not None:
        natural(revision, "Study revision", 1)
    if offset and revision is None:
        raise refuse("Later reservation pages require the study revision.")
    with context.reading(actor, "studies.get", study_id) as repo:
        study = existing(repo, study_id)
        if revision is not None and revision != study.revision:
            raise refuse("Study changed between pages.", "stale")
        return page(repo, study, offset, limit)


def study_list(context: StudyContext, actor: str, *, cursor: str | None, limit: int) -> StudyList:
    identifier(actor, "Actor id")
    page_limit(limit, MAX_LIST_PAGE)
    if cursor is not None:
        identifier(cursor, "Cursor")
    with context.reading(actor, "studies.list") as repo:
        studies = repo.page(cursor, limit + 1)
        shown = studies[:limit]
        counts = repo.trial_counts(study.id for study in shown)
        return StudyList(
            studies=tuple(study.summary(counts[study.id]) for study in shown),
            limit=limit,
            next_cursor=shown[-1].id if len(studies) > limit else None,
        )


def policy(context: StudyContext, actor: str, sha256: str) -> SelectionPolicy:
    identifier(actor, "Actor id")
    sha256_hex(sha256, "Policy sha256")
    with context.reading(actor, "studies.policy") as repo:
        return stored_policy(repo, sha256)


def trial(context: StudyContext, actor: str, trial_id: str) -> Trial:
    identifier(actor, "Actor id")
    identifier(trial_id, "Trial id")
    with context.reading(actor, "studies.trial") as repo:
        found = repo.trial(trial_id)
        if found is None:
            raise refuse("Trial not found.", "not_found")
        return found


def page(repo: StudyRepository, study: StudyRecord, offset: int, limit: int) -> StudyPage:
    """The study, ``limit`` of its reservations from ``offset``, and its charge."""
    total = repo.reservation_count(study.id)
    end = min(offset + limit, total)
    return StudyPage(
        study=repo.view(study),
        reservations=tuple(repo.reservations(study.id, offset, limit)),
        charged=study.charged,
        page=PageInfo(
            offset=offset,
            limit=limit,
            total=total,
            study_revision=study.revision,
            next_offset=end if end < total else None,
        ),
    )
