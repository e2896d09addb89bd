"""Pure study rules: who may do what, how runs settle reservations, and lifecycle moves."""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from benchledger.domain.canonical import sha256_json
from benchledger.domain.study import (
    Budget,
    ReservationState,
    RunState,
    StudyState,
    refuse,
    request_sha256,
)
from benchledger.domain.study_runs import Run
from benchledger.domain.study_views import Reservation

# -- access ------------------------------------------------------------------------------


class Role(enum.StrEnum):
    OWNER = "owner"
    EDITOR = "editor"
    OPERATOR = "operator"
    VIEWER = "viewer"


class Permission(enum.StrEnum):
    INSPECT = "inspect"
    EDIT = "edit"
    EXECUTE = "execute"
    APPROVE_EXECUTION = "approve-execution"
    CANCEL = "cancel"


#: What each role may do (before owner-only restrictions).
ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.OWNER: frozenset(Permission),
    Role.EDITOR: frozenset(
        {Permission.INSPECT, Permission.EDIT, Permission.EXECUTE, Permission.CANCEL}
    ),
    Role.OPERATOR: frozenset({Permission.INSPECT, Permission.EXECUTE, Permission.CANCEL}),
    Role.VIEWER: frozenset({Permission.INSPECT}),
}


@attrs.frozen
class OperationRule:
    permission: Permission
    owner_only: bool = False


#: Which permission each operation needs, and which operations are owner-only.
OPERATIONS: dict[str, OperationRule] = {
    "studies.policy": OperationRule(Permission.INSPECT),
    "studies.create": OperationRule(Permission.EDIT, owner_only=True),
    "studies.trial": OperationRule(Permission.INSPECT),
    "studies.prepare_trial": OperationRule(Permission.EDIT),
    "studies.get": OperationRule(Permission.INSPECT),
    "studies.list": OperationRule(Permission.INSPECT),
    "studies.save": OperationRule(Permission.EDIT, owner_only=True),
    "studies.open": OperationRule(Permission.EXECUTE, owner_only=True),
    "studies.continue": OperationRule(Permission.EXECUTE, owner_only=True),
    "studies.approve": OperationRule(Permission.APPROVE_EXECUTION, owner_only=True),
    "studies.admit": OperationRule(Permission.EXECUTE),
    "studies.admit_builtin": OperationRule(Permission.EXECUTE, owner_only=True),
    "studies.reconcile": OperationRule(Permission.INSPECT),
    "studies.stop": OperationRule(Permission.CANCEL),
    "studies.select_candidate": OperationRule(Permission.EDIT),
    "studies.candidate": OperationRule(Permission.INSPECT),
    "studies.candidates": OperationRule(Permission.INSPECT),
    "studies.register_material": OperationRule(Permission.EDIT),
    "studies.run": OperationRule(Permission.INSPECT),
    "studies.report_run": OperationRule(Permission.EXECUTE),
    "studies.record_evidence": OperationRule(Permission.EXECUTE),
    "studies.run_evidence": OperationRule(Permission.INSPECT),
    "access.grant_role": OperationRule(Permission.EDIT, owner_only=True),
    "access.revoke_role": OperationRule(Permission.EDIT, owner_only=True),
}


def role_permits(role: Role | None, operation: str) -> bool:
    rule = OPERATIONS.get(operation)
    if rule is None or role is None:
        return False
    if rule.owner_only and role is not Role.OWNER:
        return False
    return rule.permission in ROLE_PERMISSIONS[role]


def require_permitted(role: Role | None, operation: str) -> Role:
    if not role_permits(role, operation):
        raise refuse(f"Actor may not perform {operation}.", "forbidden")
    assert role is not None
    return role


# -- run custody ---------------------------------------------------------------------------


def check_run_receipt(reservation: Reservation, run: Run) -> Run:
    """The run is the very attempt ``reservation`` admitted (the reservation check).

    A registry reporting another study's, trial's, actor's or request's run
    under this id is refused (``unavailable``) rather than settled.
    """
    if (
        run.id != reservation.run_id
        or run.study_id != reservation.study_id
        or run.trial_id != reservation.trial_id
        or run.actor_id != reservation.actor_id
        or run.request_sha256 != reservation.request_sha256
        or run.material_sha256 != reservation.material_sha256
        or run.parent_run_id != reservation.parent_run_id
    ):
        raise refuse("Reservation and Run receipt differ.", "unavailable")
    return run


def reservation_state_for(run: Run) -> ReservationState:
    """How a run's state settles its reservation."""
    if run.state is RunState.UNKNOWN:
        return ReservationState.UNKNOWN
    if run.active:
        return ReservationState.RUNNING
    # Terminal: settled only once custody has ceased; before that, unknown.
    return ReservationState.SETTLED if run.ceased else ReservationState.UNKNOWN


@attrs.frozen
class ChildCustody:
    """Whether every child run has ceased, and whether any is of unknown custody."""

    ceased: bool
    unknown: bool
    active: bool


def child_custody(runs: Iterable[Run]) -> ChildCustody:
    unknown = active = False
    for run in runs:
        if run.state is RunState.UNKNOWN:
            unknown = True
        elif run.active:
            active = True
        elif not run.ceased:
            unknown = True
    return ChildCustody(ceased=not (unknown or active), unknown=unknown, active=active)


# -- admission ---------------------------------------------------------------------------

#: The operation name an admission is audited and receipted under.
ADMIT = "studies.admit"


def admission_request_sha256(
    study_id: str,
    *,
    revision: int,
    admission_epoch: int,
    trial_id: str,
    approval_id: str | None,
    parent_run_id: str | None,
) -> str:
    """The digest an admission's request key is bound to (and its run records)."""
    return request_sha256(
        ADMIT,
        study_id,
        {
            "revision": revision,
            "admission_epoch": admission_epoch,
            "trial_id": trial_id,
            "approval_id": approval_id,
            "parent_run_id": parent_run_id,
        },
    )


def admission_run_key(study_id: str, actor_id: str, request_key: str) -> str:
    """The run registry's key for the attempt one admission request makes."""
    return "study-" + sha256_json(
        {
            "study_id": study_id,
            "actor_id": actor_id,
            "request_key": request_key,
            "operation_id": ADMIT,
        }
    )


def settled_charge(state: ReservationState, envelope: Budget) -> Budget | None:
    """What a reservation in ``state`` has settled at: the worst case, its whole envelope.

    Settling never gives budget back; an unsettled reservation has settled nothing yet.
    """
    return envelope if state is ReservationState.SETTLED else None


@attrs.frozen
class LifecycleMove:
    state: StudyState
    close_epoch: bool


def reconciled_state(state: StudyState, custody: ChildCustody) -> LifecycleMove | None:
    """The study's move after reconciliation, or ``None`` when it stays.

    Unknown custody closes an open study's admission (a new epoch); a stopping
    or unknown study becomes stopped once every child has ceased.
    """
    if custody.unknown and state is StudyState.OPEN:
        return LifecycleMove(StudyState.UNKNOWN, close_epoch=True)
    if state in (StudyState.STOPPING, StudyState.UNKNOWN):
        if custody.unknown:
            target = StudyState.UNKNOWN
        elif custody.ceased:
            target = StudyState.STOPPED
        else:
            target = StudyState.STOPPING
        if target is not state:
            return LifecycleMove(target, close_epoch=False)
    return None
