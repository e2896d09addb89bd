"""``benchledger study``: budgets, trials, admissions, epochs, candidates.

Every command acts as ``--actor`` (or ``BENCHLEDGER_ACTOR``); every write is
idempotent per ``--request-key`` and based on ``--revision`` (default: the
study's current revision).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from benchledger.cli.group import LedgerGroup
from benchledger.cli.numbers import INTEGER
from benchledger.cli.output import (
    CommandError,
    console,
    emit_document,
    emit_json,
    fail,
    json_option,
    read_json_file,
)
from benchledger.cli.settings import Settings
from benchledger.cli.views import print_candidate, print_study, print_study_list
from benchledger.domain.study import Budget, RunState, SelectionPolicy, StudyState
from benchledger.domain.study_documents import to_document
from benchledger.domain.study_evidence import RunEvidence
from benchledger.domain.study_rules import Role
from benchledger.domain.study_runs import Material, MaterialRef, MaterialSpec
from benchledger.domain.study_views import Study
from benchledger.errors import StudyError

if TYPE_CHECKING:
    from rich.console import Console

    from benchledger.services.studies import StudyService

F = TypeVar("F", bound=Callable[..., Any])

ACTOR_ENV = "BENCHLEDGER_ACTOR"
ACTOR_MISSING = "ledger.input.actor_missing"


class StudyContext:
    """The settings plus the acting actor of every study command."""

    def __init__(self, settings: Settings, actor: str | None) -> None:
        self.settings = settings
        self._actor = actor

    @property
    def actor(self) -> str:
        if not self._actor:
            fail(ACTOR_MISSING, f"name the acting actor with --actor or {ACTOR_ENV}")
        return self._actor

    @contextlib.contextmanager
    def service(self) -> Iterator[StudyService]:
        from benchledger.services.studies import StudyService

        database = self.settings.database()
        service = StudyService(database)
        try:
            yield service
        except StudyError as error:
            if error.code == "forbidden" and service.role_of(self.actor) is None:
                raise CommandError(
                    error.code,
                    f"{error.message} {self.actor!r} has no role: the ledger's first owner runs "
                    "`benchledger study bootstrap`, then grants roles with `study grant`",
                ) from None
            raise
        finally:
            database.dispose()


pass_study = click.make_pass_decorator(StudyContext)


@click.group(cls=LedgerGroup, short_help="Experiment studies.")
@click.option(
    "--actor",
    envvar=ACTOR_ENV,
    default=None,
    metavar="ID",
    help=f"The acting actor (env {ACTOR_ENV}); every operation is authorized for it.",
)
@click.pass_context
def study(context: click.Context, actor: str | None) -> None:
    """Experiment studies: budgets, trials, admissions, epochs, candidates."""
    context.obj = StudyContext(context.find_object(Settings) or Settings(None), actor)


def request_key_option(function: F) -> F:
    return click.option(
        "--request-key",
        default=None,
        metavar="KEY",
        help="Idempotency key (8-128 chars): repeat it to retry safely. Default: a new one.",
    )(function)


def revision_option(function: F) -> F:
    return click.option(
        "--revision",
        type=INTEGER,
        default=None,
        help="The study revision this change is based on (default: the current one).",
    )(function)


def _key(request_key: str | None) -> str:
    return request_key or f"cli-{uuid.uuid4().hex}"


def _current(service: StudyService, actor: str, study_id: str) -> Study:
    return service.get(actor, study_id, limit=1).study


def _revision(service: StudyService, actor: str, study_id: str, revision: int | None) -> int:
    if revision is not None:
        return revision
    return _current(service, actor, study_id).revision


def _emit(value: Any, as_json: bool, line: str) -> None:
    """``--json``: the value's document; else one line (usually the new thing's id)."""
    if as_json:
        emit_document(value)
    else:
        click.echo(line)


def _show(value: Any, as_json: bool, show: Callable[[Any, Console], None]) -> None:
    """``--json``: the value's document; else its tables."""
    if as_json:
        emit_document(value)
    else:
        show(value, console())


def _register(service: StudyService, actor: str, spec: MaterialSpec) -> Material:
    return service.register_material(
        actor,
        recipe=spec.recipe,
        envelope=spec.envelope,
        trainer_id=spec.trainer_id,
        builtin=spec.builtin,
    )


def _material_ref(service: StudyService, actor: str, material: str) -> MaterialRef:
    """A material sha256, or a material JSON file to register first."""
    if Path(material).is_file() or material.endswith(".json"):
        spec = MaterialSpec.from_document(read_json_file(material, "material"))
        return _register(service, actor, spec).ref
    return MaterialRef(material)


@study.command("create", short_help="Create a draft study; print its id.")
@click.option(
    "--spec", "spec_file", required=True, metavar="FILE", help="JSON: name, limits, policy."
)
@click.option("--name", default=None, help="Override the spec's name.")
@request_key_option
@json_option
@pass_study
def study_create(
    ctx: StudyContext, spec_file: str, name: str | None, request_key: str | None, as_json: bool
) -> None:
    """Create a draft study (owner only) and print its id."""
    spec = read_json_file(spec_file, "study spec")
    if not isinstance(spec, dict) or set(spec) != {"name", "limits", "policy"}:
        fail("invalid", f"study spec {spec_file} needs exactly: name, limits, policy")
    limits = Budget.from_document(spec["limits"], "Study limits")
    policy = SelectionPolicy.from_document(spec["policy"])
    with ctx.service() as service:
        created = service.create(
            ctx.actor,
            name=name or spec["name"],
            limits=limits,
            policy=policy,
            request_key=_key(request_key),
        )
    _emit(created, as_json, created.id)


@study.command("show", short_help="The study, its budget and reservations.")
@click.argument("study_id")
@click.option("--offset", type=INTEGER, default=0, help="First reservation to show.")
@click.option("--revision", type=INTEGER, default=None, help="Pin the revision (later pages).")
@json_option
@pass_study
def study_show(
    ctx: StudyContext, study_id: str, offset: int, revision: int | None, as_json: bool
) -> None:
    """The study, its budget (limit, charged, remaining) and its reservations."""
    with ctx.service() as service:
        page = service.get(ctx.actor, study_id, offset=offset, revision=revision)
    _show(page, as_json, print_study)


@study.command("list")
@click.option("--cursor", default=None, help="Continue after this study id.")
@click.option("--limit", type=INTEGER, default=20, show_default=True)
@json_option
@pass_study
def study_list(ctx: StudyContext, cursor: str | None, limit: int, as_json: bool) -> None:
    """Study summaries in id order."""
    with ctx.service() as service:
        listing = service.list(ctx.actor, cursor=cursor, limit=limit)
    _show(listing, as_json, print_study_list)


@study.command("material", short_help="Register recipe materials.")
@click.argument("material_file", metavar="FILE")
@json_option
@pass_study
def study_material(ctx: StudyContext, material_file: str, as_json: bool) -> None:
    """Register recipe materials (one JSON object or a list); print their sha256."""
    documents = read_json_file(material_file, "material")
    items = documents if isinstance(documents, list) else [documents]
    specs = [MaterialSpec.from_document(item) for item in items]  # all valid, or none registered
    with ctx.service() as service:
        registered = [_register(service, ctx.actor, spec) for spec in specs]
    if as_json:
        emit_json([to_document(item) for item in registered])
        return
    for item in registered:
        click.echo(item.sha256)


@study.command("trial", short_help="Add a member trial; print its id.")
@click.argument("study_id")
@click.option(
    "--material",
    required=True,
    metavar="SHA256|FILE",
    help="A registered material's sha256, or a material JSON file (registered first).",
)
@click.option("--replicate", type=INTEGER, default=1, show_default=True)
@revision_option
@request_key_option
@json_option
@pass_study
def study_trial(
    ctx: StudyContext,
    study_id: str,
    material: str,
    replicate: int,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Add an immutable member trial (one material, one replicate); print its id."""
    with ctx.service() as service:
        ref = _material_ref(service, ctx.actor, material)
        trial = service.prepare_trial(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            material=ref,
            replicate=replicate,
            request_key=_key(request_key),
        )
    _emit(trial, as_json, trial.id)


@study.command("open", short_help="Open a draft, or continue a study.")
@click.argument("study_id")
@click.option(
    "--epoch",
    type=INTEGER,
    default=None,
    help="The admission epoch being continued (default: the current one).",
)
@revision_option
@request_key_option
@json_option
@pass_study
def study_open(
    ctx: StudyContext,
    study_id: str,
    epoch: int | None,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Open a draft, or continue a stopped study into a new epoch (owner only)."""
    with ctx.service() as service:
        current = _current(service, ctx.actor, study_id)
        base = current.revision if revision is None else revision
        if current.state is StudyState.DRAFT and epoch is None:
            opened = service.open_study(
                ctx.actor, study_id, revision=base, request_key=_key(request_key)
            )
        else:
            opened = service.continue_study(
                ctx.actor,
                study_id,
                revision=base,
                admission_epoch=current.admission_epoch if epoch is None else epoch,
                request_key=_key(request_key),
            )
    _emit(opened, as_json, f"{opened.id} open in epoch {opened.admission_epoch}")


@study.command("admit", short_help="Admit one run attempt; print its run id.")
@click.argument("study_id")
@click.option("--trial", "trial_id", required=True, help="The member trial to run.")
@click.option("--epoch", type=INTEGER, default=None, help="Admission epoch (default: current).")
@click.option("--approval", "approval_id", default=None, help="An owner's execution grant.")
@click.option("--parent-run", "parent_run_id", default=None, help="Retry of this ceased run.")
@revision_option
@request_key_option
@json_option
@pass_study
def study_admit(
    ctx: StudyContext,
    study_id: str,
    trial_id: str,
    epoch: int | None,
    approval_id: str | None,
    parent_run_id: str | None,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Admit one run attempt, reserving its material's whole envelope; print the run id."""
    with ctx.service() as service:
        current = _current(service, ctx.actor, study_id)
        admission = service.admit(
            ctx.actor,
            study_id,
            revision=current.revision if revision is None else revision,
            admission_epoch=current.admission_epoch if epoch is None else epoch,
            trial_id=trial_id,
            request_key=_key(request_key),
            approval_id=approval_id,
            parent_run_id=parent_run_id,
        )
    _emit(admission, as_json, admission.run.id)


@study.command("reconcile", short_help="Settle reservations from run state.")
@click.argument("study_id")
@json_option
@pass_study
def study_reconcile(ctx: StudyContext, study_id: str, as_json: bool) -> None:
    """Settle reservations from run state; close admission on unknown custody."""
    with ctx.service() as service:
        page = service.reconcile(ctx.actor, study_id)
    _show(page, as_json, print_study)


@study.command("stop", short_help="Close admission; cancel live runs.")
@click.argument("study_id")
@revision_option
@request_key_option
@json_option
@pass_study
def study_stop(
    ctx: StudyContext,
    study_id: str,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Close the admission epoch and cancel the runs that have not ceased."""
    with ctx.service() as service:
        outcome = service.stop(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            request_key=_key(request_key),
        )
    if as_json:
        emit_document(outcome)
        return
    receipt = outcome.receipt
    out = console()
    out.print(
        f"stopped admission: epoch {receipt.admission_epoch}, receipt {receipt.stop_receipt_id}, "
        f"{len(receipt.run_ids)} run(s) asked to cancel"
    )
    print_study(outcome.status, out)


@study.command("select", short_help="Select a candidate checkpoint.")
@click.argument("study_id")
@click.option("--trial", "trial_id", required=True)
@click.option("--run", "run_id", required=True)
@click.option("--checkpoint", "checkpoint_sha256", default=None, help="Explicit checkpoint.")
@revision_option
@request_key_option
@json_option
@pass_study
def study_select(
    ctx: StudyContext,
    study_id: str,
    trial_id: str,
    run_id: str,
    checkpoint_sha256: str | None,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Retain a diagnostic candidate: the policy's checkpoint of a completed member run."""
    with ctx.service() as service:
        result = service.select_candidate(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            trial_id=trial_id,
            run_id=run_id,
            request_key=_key(request_key),
            checkpoint_sha256=checkpoint_sha256,
        )
    _show(result, as_json, print_candidate)


@study.command("candidate", short_help="Show a retained candidate.")
@click.argument("candidate_id")
@json_option
@pass_study
def study_candidate(ctx: StudyContext, candidate_id: str, as_json: bool) -> None:
    """A retained candidate, re-verified against its run's evidence."""
    with ctx.service() as service:
        result = service.candidate(ctx.actor, candidate_id)
    _show(result, as_json, print_candidate)


@study.command("approve", short_help="Grant one execution of a trial.")
@click.argument("study_id")
@click.option("--trial", "trial_id", required=True)
@click.option("--material", "material_sha256", required=True, help="The trial's material sha256.")
@click.option("--consumer", "consumer_actor_id", required=True, help="Who may admit it.")
@click.option("--ttl", "ttl_seconds", type=INTEGER, default=600, show_default=True)
@revision_option
@request_key_option
@json_option
@pass_study
def study_approve(
    ctx: StudyContext,
    study_id: str,
    trial_id: str,
    material_sha256: str,
    consumer_actor_id: str,
    ttl_seconds: int,
    revision: int | None,
    request_key: str | None,
    as_json: bool,
) -> None:
    """Grant another actor one admission of an exact trial material (owner only)."""
    with ctx.service() as service:
        grant = service.approve(
            ctx.actor,
            study_id,
            revision=_revision(service, ctx.actor, study_id, revision),
            trial_id=trial_id,
            expected_material_sha256=material_sha256,
            consumer_actor_id=consumer_actor_id,
            request_key=_key(request_key),
            ttl_seconds=ttl_seconds,
        )
    _emit(grant, as_json, grant.id)


@study.command("run", short_help="Show a run's state, or report its new state.")
@click.argument("run_id")
@click.argument(
    "state", required=False, default=None, type=click.Choice([state.value for state in RunState])
)
@click.option(
    "--ceased/--not-ceased",
    "custody_ceased",
    default=None,
    help="Whether the run's process is proved gone (terminal states; default: ceased).",
)
@json_option
@pass_study
def study_run(
    ctx: StudyContext, run_id: str, state: str | None, custody_ceased: bool | None, as_json: bool
) -> None:
    """Show a run's state, or report its new STATE (what a run supervisor does)."""
    if state is None and custody_ceased is not None:
        raise click.UsageError(
            "--ceased/--not-ceased goes with a STATE to report", click.get_current_context()
        )
    with ctx.service() as service:
        if state is None:
            run = service.run(ctx.actor, run_id)
        else:
            run = service.report_run(ctx.actor, run_id, state, custody_ceased=custody_ceased)
    _emit(run, as_json, f"{run.id} {run.state.value}{' (ceased)' if run.ceased else ''}")


@study.command("evidence", short_help="Record a run's model evidence.")
@click.argument("evidence_file", metavar="FILE")
@pass_study
def study_evidence(ctx: StudyContext, evidence_file: str) -> None:
    """Record a run's model evidence (JSON; see docs/cli.md) once."""
    evidence = RunEvidence.from_document(read_json_file(evidence_file, "evidence"))
    with ctx.service() as service:
        service.record_evidence(ctx.actor, evidence)
    click.echo(f"{evidence.run_id} evidence {evidence.sha256}")


@study.command("bootstrap", short_help="Become the ledger's first owner.")
@pass_study
def study_bootstrap(ctx: StudyContext) -> None:
    """Make the acting actor the ledger's first owner (refused once there is one)."""
    with ctx.service() as service:
        role = service.bootstrap_owner(ctx.actor)
    click.echo(f"{ctx.actor} is {role.value}")


@study.command("grant")
@click.argument("subject")
@click.argument("role", type=click.Choice([role.value for role in Role]))
@pass_study
def study_grant(ctx: StudyContext, subject: str, role: str) -> None:
    """Give SUBJECT a role (owner only)."""
    with ctx.service() as service:
        granted = service.grant_role(ctx.actor, subject, role)
    click.echo(f"{subject} is {granted.value}")


@study.command("revoke", short_help="Remove an actor's role.")
@click.argument("subject")
@pass_study
def study_revoke(ctx: StudyContext, subject: str) -> None:
    """Remove SUBJECT's role (owner only; the last owner stays)."""
    with ctx.service() as service:
        service.revoke_role(ctx.actor, subject)
    click.echo(f"{subject} has no role")
