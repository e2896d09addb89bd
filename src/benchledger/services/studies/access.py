"""Owners and roles: bootstrap the first owner, grant and revoke roles (never the last owner)."""

from __future__ import annotations

from benchledger.domain.study import as_enum, identifier, refuse
from benchledger.domain.study_rules import Role
from benchledger.repositories.studies import StudyRepository
from benchledger.services.studies.context import StudyContext
from benchledger.services.studies.write import write


def bootstrap_owner(context: StudyContext, actor: str) -> Role:
    identifier(actor, "Actor id")

    def work(repo: StudyRepository, now: float) -> Role:
        if context.access.owner_count() == 0:
            context.access.assign(actor, Role.OWNER, by=actor, now=now)
            repo.audit("access.bootstrap_owner", actor, actor, {"role": "owner"}, now)
            return Role.OWNER
        if context.access.role_of(actor) is Role.OWNER:
            return Role.OWNER
        raise refuse("The ledger already has an owner.", "forbidden")

    return write(context, actor, None, work)  # no owner yet: nobody to authorize against


def grant_role(context: StudyContext, actor: str, subject: str, role: Role | str) -> Role:
    identifier(actor, "Actor id")
    identifier(subject, "Subject actor id")
    wanted = as_enum(Role, role, "role")

    def work(repo: StudyRepository, now: float) -> Role:
        _keep_an_owner(context, subject, wanted)
        if context.access.role_of(subject) is wanted:
            return wanted  # granted already: a repeat writes nothing
        context.access.assign(subject, wanted, by=actor, now=now)
        repo.audit("access.grant_role", subject, actor, {"role": wanted.value}, now)
        return wanted

    return write(context, actor, "access.grant_role", work)


def revoke_role(context: StudyContext, actor: str, subject: str) -> None:
    identifier(actor, "Actor id")
    identifier(subject, "Subject actor id")

    def work(repo: StudyRepository, now: float) -> None:
        _keep_an_owner(context, subject, None)
        if context.access.role_of(subject) is None:
            return  # no role to remove: a repeat writes nothing
        context.access.assign(subject, None, by=actor, now=now)
        repo.audit("access.revoke_role", subject, actor, {}, now)

    write(context, actor, "access.revoke_role", work)


def role_of(context: StudyContext, actor: str) -> Role | None:
    identifier(actor, "Actor id")
    with context.db.read():
        return context.access.role_of(actor)


def _keep_an_owner(context: StudyContext, subject: str, role: Role | None) -> None:
    if (
        role is not Role.OWNER
        and context.access.role_of(subject) is Role.OWNER
        and context.access.owner_count() <= 1
    ):
        raise refuse("The last owner cannot be removed.", "conflict")
