"""The default access policy: one role per actor, the operation table, execution grants.

Roles: ``owner`` (everything, including owner-only operations), ``editor``
(inspect, edit, execute, cancel), ``operator`` (inspect, execute, cancel),
``viewer`` (inspect). An actor without a role may do nothing.
"""

from __future__ import annotations

import uuid

from benchledger.db import current_session
from benchledger.domain.study import refuse
from benchledger.domain.study_rules import Role, require_permitted
from benchledger.domain.study_views import ExecutionGrant
from benchledger.repositories.study_adapters import AccessRepository

#: ``session.info`` key: the roles read in this transaction, by actor (a write that
#: authorizes and then checks the actor's role reads it once).
_ROLES_READ = "benchledger.study.roles"


class SqlAccessPolicy:
    """:class:`~benchledger.ports.study.AccessPolicy` over ``study_access_roles`` and grants."""

    def role_of(self, actor_id: str) -> Role | None:
        session = current_session()
        read: dict[str, Role | None] = session.info.setdefault(_ROLES_READ, {})
        if actor_id not in read:
            role = AccessRepository(session).role(actor_id)
            read[actor_id] = None if role is None else Role(role)
        return read[actor_id]

    def require(self, actor_id: str, operation: str, *, study_id: str | None) -> Role:
        # Roles are catalog-wide; ``study_id`` is there for policies that scope them.
        return require_permitted(self.role_of(actor_id), operation)

    def assign(self, subject_id: str, role: Role | None, *, by: str, now: float) -> None:
        session = current_session()
        session.info.pop(_ROLES_READ, None)
        access = AccessRepository(session)
        access.serialize_role_changes()
        if role is None:
            access.remove_role(subject_id)
        else:
            access.set_role(subject_id, Role(role).value, by, now)

    def owner_count(self) -> int:
        access = AccessRepository(current_session())
        access.serialize_role_changes()
        return access.count_role(Role.OWNER.value)

    def grant_execution(
        self,
        *,
        study_id: str,
        trial_id: str,
        material_sha256: str,
        consumer_actor_id: str,
        granted_by: str,
        ttl_seconds: int,
        now: float,
    ) -> ExecutionGrant:
        grant = ExecutionGrant(
            id=uuid.uuid4().hex,
            study_id=study_id,
            trial_id=trial_id,
            material_sha256=material_sha256,
            consumer_actor_id=consumer_actor_id,
            granted_by=granted_by,
            created_at=now,
            expires_at=now + ttl_seconds,
        )
        AccessRepository(current_session()).add_grant(grant)
        return grant

    def consume_execution(
        self,
        grant_id: str,
        *,
        study_id: str,
        trial_id: str,
        consumer_actor_id: str,
        material_sha256: str,
        run_id: str,
        now: float,
    ) -> ExecutionGrant:
        access = AccessRepository(current_session())
        found = access.lock_grant(grant_id)
        if found is None:
            raise refuse("Execution grant not found.", "forbidden")
        grant, used = found
        if (
            grant.study_id != study_id
            or grant.trial_id != trial_id
            or grant.consumer_actor_id != consumer_actor_id
            or grant.material_sha256 != material_sha256
        ):
            raise refuse("Execution grant is for another trial, actor or material.", "forbidden")
        if used:
            raise refuse("Execution grant is already used.", "forbidden")
        if now >= grant.expires_at:
            raise refuse("Execution grant has expired.", "forbidden")
        access.consume_grant(grant_id, run_id, now)
        return grant
