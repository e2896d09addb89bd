"""``benchledger study ...``: the study service from the command line, on real databases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchledger import Database
from benchledger.domain.study_documents import to_document
from benchledger.examples import data_path
from benchledger.examples import study as example
from benchledger.services.studies import StudyService

from .helpers import Invoke, json_of, ok, refused

OWNER = "olivia"
SPEC = str(data_path("study.json"))
MATERIALS = str(data_path("materials.json"))


@pytest.fixture
def as_owner(cli: Invoke, ledger_db: Database) -> Invoke:
    """``benchledger study --actor olivia ...`` on this test's database, bootstrapped."""

    def run(*args: str, actor: str = OWNER) -> Any:
        return cli("study", "--actor", actor, *args, url=ledger_db.url)

    ok(run("bootstrap"))
    return run


def test_a_study_from_create_to_candidate_and_stop(
    as_owner: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    study_id = ok(as_owner("create", "--spec", SPEC)).stdout.strip()
    listing = json_of(as_owner("list", "--json"))
    assert [item["id"] for item in listing["studies"]] == [study_id]
    assert study_id in ok(as_owner("list")).stdout

    shas = ok(as_owner("material", MATERIALS)).stdout.split()
    assert len(shas) == 3
    first = ok(as_owner("trial", study_id, "--material", shas[0])).stdout.strip()
    material_file = tmp_path / "material.json"
    material_file.write_text(json.dumps(example.example_materials()[1]), encoding="utf-8")
    second = json_of(as_owner("trial", study_id, "--material", str(material_file), "--json"))
    assert second["material"]["sha256"] == shas[1]

    opened = json_of(as_owner("open", study_id, "--json"))
    assert opened["state"] == "open" and opened["admission_epoch"] == 1

    run_id = ok(as_owner("admit", study_id, "--trial", first)).stdout.strip()
    refused(as_owner("admit", study_id, "--trial", second["id"]), "unavailable")  # one at a time
    assert ok(as_owner("run", run_id)).stdout == f"{run_id} queued\n"
    ok(as_owner("run", run_id, "running"))
    assert json_of(as_owner("run", run_id, "--json"))["state"] == "running"
    assert "(ceased)" in ok(as_owner("run", run_id, "completed")).stdout
    shown = json_of(as_owner("run", run_id, "--json"))
    assert shown == to_document(StudyService(ledger_db).run(OWNER, run_id))
    assert shown["state"] == "completed" and shown["custody_ceased"] is True
    evidence = tmp_path / "evidence.json"
    evidence.write_text(
        json.dumps(example.example_evidence(run_id, shas[0]).to_document()),
        encoding="utf-8",
    )
    identity = tmp_path / "identity.json"
    identity.write_text(
        json.dumps(example.example_evidence(run_id, shas[0]).identity_document()),
        encoding="utf-8",
    )
    assert "identity document" in refused(as_owner("evidence", str(identity)), "invalid")
    assert run_id in ok(as_owner("evidence", str(evidence))).stdout

    page = json_of(as_owner("reconcile", study_id, "--json"))
    assert [item["state"] for item in page["reservations"]] == ["settled"]
    assert page["charged"] == example.ENVELOPE.to_document()
    shown = ok(as_owner("show", study_id)).stdout
    assert "attempt_slots" in shown and "settled" in shown

    selected = json_of(as_owner("select", study_id, "--trial", first, "--run", run_id, "--json"))
    assert selected["candidate"]["decision"] == "diagnostic"
    assert selected["checkpoint"]["selected"] is True
    candidate_id = selected["candidate"]["id"]
    again = json_of(as_owner("candidate", candidate_id, "--json"))
    assert again == selected
    assert "diagnostic" in ok(as_owner("candidate", candidate_id)).stdout

    stopped = json_of(as_owner("stop", study_id, "--json"))
    assert stopped["status"]["study"]["state"] == "stopped"
    assert stopped["receipt"]["admission_epoch"] == 2
    refused(as_owner("admit", study_id, "--trial", first), "stale")

    reopened = json_of(as_owner("open", study_id, "--json"))
    assert reopened["state"] == "open" and reopened["admission_epoch"] == 3
    page = StudyService(ledger_db).get(OWNER, study_id)
    assert page.study.admission_epoch == 3 and len(page.reservations) == 1


def test_budget_exhaustion_and_delegated_admission(as_owner: Invoke) -> None:
    study_id = ok(as_owner("create", "--spec", SPEC)).stdout.strip()
    sha = json_of(as_owner("material", MATERIALS, "--json"))[0]["ref"]["sha256"]
    trial = ok(as_owner("trial", study_id, "--material", sha)).stdout.strip()
    ok(as_owner("open", study_id))
    ok(as_owner("grant", "oscar", "operator"))
    # A non-owner needs an execution grant for an external trainer.
    refused(as_owner("admit", study_id, "--trial", trial, actor="oscar"), "forbidden")
    for attempt in range(4):
        approval = ok(
            as_owner(
                "approve", study_id, "--trial", trial, "--material", sha, "--consumer", "oscar"
            )
        ).stdout.strip()
        run_id = ok(
            as_owner("admit", study_id, "--trial", trial, "--approval", approval, actor="oscar")
        ).stdout.strip()
        ok(as_owner("run", run_id, "completed", actor="oscar"))
        assert json_of(as_owner("show", study_id, "--json"))["charged"]["attempt_slots"] == (
            attempt + 1
        )
    line = refused(as_owner("admit", study_id, "--trial", trial), "unavailable")
    assert "budget is exhausted" in line
    shown = json_of(as_owner("show", study_id, "--json", actor="oscar"))
    assert shown["charged"]["attempt_slots"] == 4
    ok(as_owner("revoke", "oscar"))
    refused(as_owner("show", study_id, actor="oscar"), "forbidden")


def test_study_refusals_are_one_line(as_owner: Invoke, cli: Invoke, ledger_db: Database) -> None:
    refused(cli("study", "list", url=ledger_db.url), "ledger.input.actor_missing")
    ok(cli("study", "list", url=ledger_db.url, env={"BENCHLEDGER_ACTOR": OWNER}))
    line = refused(as_owner("list", actor="mallory"), "forbidden")
    assert "study bootstrap" in line
    refused(as_owner("bootstrap", actor="mallory"), "forbidden")
    refused(as_owner("show", "0" * 32), "not_found")
    refused(as_owner("create", "--spec", "/nonexistent/spec.json"), "ledger.input.file_missing")
    refused(as_owner("create", "--spec", MATERIALS), "invalid")
    study_id = ok(as_owner("create", "--spec", SPEC, "--request-key", "create-0001")).stdout
    assert ok(as_owner("create", "--spec", SPEC, "--request-key", "create-0001")).stdout == (
        study_id
    )
    refused(
        as_owner("create", "--spec", SPEC, "--name", "other", "--request-key", "create-0001"),
        "conflict",
    )
    study_id = study_id.strip()
    refused(as_owner("open", study_id, "--revision", "7"), "stale")
    refused(as_owner("trial", study_id, "--material", "f" * 64), "not_found")
    refused(as_owner("run", "nosuchrun", "running"), "not_found")
    refused(as_owner("run", "nosuchrun"), "not_found")
    refused(as_owner("run", "nosuchrun", actor="mallory"), "forbidden")
    refused(as_owner("run", "nosuchrun", "--ceased"), "ledger.cli.usage", exit_code=2)
    refused(as_owner("run", "x", "sideways"), "ledger.cli.usage", exit_code=2)


def test_a_bad_material_document_is_refused_and_registers_nothing(
    as_owner: Invoke, ledger_db: Database, tmp_path: Path
) -> None:
    good, bad = example.example_materials()[0], {**example.example_materials()[1], "builtin": 1}
    materials = tmp_path / "materials.json"
    materials.write_text(json.dumps([good, bad]), encoding="utf-8")
    line = refused(as_owner("material", str(materials)), "invalid")
    assert "builtin" in line
    missing = tmp_path / "material.json"
    missing.write_text(json.dumps({"recipe": {}}), encoding="utf-8")
    study_id = ok(as_owner("create", "--spec", SPEC)).stdout.strip()
    refused(as_owner("trial", study_id, "--material", str(missing)), "invalid")
    with ledger_db.read() as session:
        count = session.execute(sa.text("SELECT count(*) FROM study_materials")).scalar_one()
    assert count == 0
