"""The study write path on its prebuilt statements: what each write sends, and its edges."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from benchledger.domain.study_rules import admission_run_key
from benchledger.errors import StudyError
from benchledger.models.study import RunRow
from helpers import refused

from .helpers import EDITOR, OWNER, Kit

if TYPE_CHECKING:
    from helpers import StatementLog


def _sent(seen: list[tuple[str, object]]) -> list[str]:
    """The statements sent, without the transaction's own BEGIN (SQLite sends it)."""
    return [statement for statement, _ in seen if not statement.startswith("BEGIN")]


def test_an_admission_and_its_report_send_a_fixed_handful_of_statements(
    kit: Kit, statements: StatementLog
) -> None:
    study, trial, _ = kit.ready()
    kit.finish(kit.admit(study.id, trial.id).run.id)  # an earlier child, settled by the next
    with statements(kit.db) as seen:
        admission = kit.admit(study.id, trial.id)
    # kit.admit reads the study first (a read transaction); the admission is the rest:
    # role, lock, receipt and key, trial, material, unsettled, the child's run, its
    # settlement, the run, the reservation; then the new revision, its audit entry and
    # the receipt (PostgreSQL: one statement).
    postgresql = kit.db.dialect_name == "postgresql"
    admit = _sent(seen)[-(11 if postgresql else 13) :]
    assert admit[0].startswith("SELECT study_access_roles.role")
    assert sum("study_access_roles" in statement for statement in _sent(seen)) == 2
    assert admit[-1].startswith("WITH advanced AS" if postgresql else "INSERT INTO study_operat")
    if postgresql:
        assert "INSERT INTO study_audit_log" in admit[-1]
        assert "INSERT INTO study_operation_receipts" in admit[-1]
    with statements(kit.db) as seen:
        kit.service.report_run(OWNER, admission.run.id, "completed", custody_ceased=None)
    # role, the run, (PostgreSQL: the run again, FOR UPDATE), the move, its audit entry
    assert len(_sent(seen)) == (5 if kit.db.dialect_name == "postgresql" else 4)


def test_a_run_key_taken_by_another_run_refuses_the_admission_and_writes_nothing(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    key = kit.key("admit")
    with kit.db.write() as session:
        session.execute(
            sa.insert(RunRow).values(
                id="f" * 32,
                run_key=admission_run_key(study.id, OWNER, key),
                request_sha256="0" * 64,
                actor_id=OWNER,
                study_id=study.id,
                trial_id=trial.id,
                material_sha256=trial.material.sha256,
                state="queued",
                custody_ceased=False,
                created_at=0.0,
                updated_at=0.0,
            )
        )
    current = kit.current(study.id)
    with refused(kit.db, "conflict") as caught:
        kit.service.admit(
            OWNER,
            study.id,
            revision=current.revision,
            admission_epoch=current.admission_epoch,
            trial_id=trial.id,
            request_key=key,
        )
    assert "already admitted" in str(caught.value)


def test_a_role_granted_and_revoked_is_read_afresh_by_the_next_write(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    kit.service.revoke_role(OWNER, EDITOR)
    with pytest.raises(StudyError) as caught:
        kit.admit(study.id, trial.id, actor=EDITOR)
    assert caught.value.code == "forbidden"
    kit.service.grant_role(OWNER, EDITOR, "editor")
    with pytest.raises(StudyError) as caught:
        kit.admit(study.id, trial.id, actor=EDITOR)  # an editor without a grant
    assert "execution grant" in str(caught.value)
