"""``benchledger demo``: the command, and both domains end to end on one database (``make demo``).

1. Creates or upgrades the database (embedded SQLite by default).
2. Campaign *release*: the bundled example suite (300 cases; ``cases`` cuts
   it) x 4 target locales, worked by ``workers`` processes with the
   deterministic example evaluator, which fails some items retryably (they
   succeed on a later attempt); the report is finalized, then status, health
   and the per-locale report are printed.
3. Campaign *lite*: a smaller candidate that fails some items for good (an
   unsupported locale, over-long sources), so its health is ``blocked`` and no
   report can be finalized: what an operator sees when a campaign cannot end.
4. A study: three recipe materials as trials, admissions one run at a time
   (one run fails and is retried as its child) until the four attempt slots
   of its budget are spent and the next admission is refused; reconciliation
   settles the reservations at their full envelope; a candidate checkpoint is
   selected by the policy; the study is stopped.

Everything is idempotent: running the demo again re-uses the campaigns
(nothing left to do) and replays the study's writes from their receipts.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import attrs
import click
from rich.console import Console

from benchledger.cli.output import console
from benchledger.cli.settings import Settings, pass_settings
from benchledger.cli.views import (
    DIMENSION_NAMES,
    amount,
    print_candidate,
    print_health,
    print_report,
    print_status,
    print_study,
)
from benchledger.db import Database
from benchledger.domain.campaign import WorkStatus
from benchledger.domain.campaign_plan import CampaignPolicy, Suite
from benchledger.domain.campaign_views import CampaignStatus
from benchledger.domain.study import RunState, StudyState
from benchledger.domain.study_runs import Material, MaterialSpec
from benchledger.domain.study_views import Admission, CandidateResult, StudyPage, Trial
from benchledger.errors import StudyError
from benchledger.examples import example_policy, example_suite
from benchledger.examples import study as study_example
from benchledger.services.campaigns import CampaignService
from benchledger.services.studies import StudyService
from benchledger.workers.options import WorkerOptions
from benchledger.workpool import PoolError, PoolResult, run_pool

EVALUATOR = "benchledger.examples.evaluator:evaluate"
OWNER = "demo-owner"
LITE_CASES = 24
#: Retries come back within a fraction of a second, so the demo does not wait.
DEMO_WORK = WorkerOptions(
    lease_seconds=60.0, retry_base_seconds=0.05, retry_max_seconds=0.5, poll_seconds=0.05
)


@attrs.frozen
class DemoResult:
    release: CampaignStatus
    lite: CampaignStatus
    study: StudyPage
    candidate: CandidateResult | None
    seconds: float


def _heading(out: Console, text: str) -> None:
    out.print()
    out.rule(f"[bold]{text}[/bold]", align="left")


def run_demo(
    url: str | None,
    *,
    cases: int | None = None,
    workers: int = 4,
    out: Console,
    progress: bool | None = None,
) -> DemoResult:
    """Run the whole demo on ``url`` and print it to ``out`` (progress goes to stderr)."""

    started = time.monotonic()
    database = Database(url)
    try:
        database.upgrade()
        shown = database.url if database.sqlite_path is not None else repr(database)
        out.print(f"ledger {shown}, schema revision {database.current_revision()}")
        out.print(
            "A campaign measures one candidate on a suite of cases: one item per (target "
            "locale, case).\nWorkers lease items; each try is an attempt, and a failed "
            "attempt is retried with backoff\nuntil the item's attempts are spent "
            "(then the item has failed for good). Once every item\nsucceeded, one "
            "immutable report is finalized."
        )
        campaigns = CampaignService(database)

        suite = example_suite(cases)
        release_policy = example_policy(suite)
        _heading(out, "campaign 1: release candidate example-mt 2.0")
        release = _work_campaign(
            out, campaigns, database.url, release_policy, suite, 3, workers, progress, "release"
        )
        print_status(release, out)
        print_health(campaigns.health(release.campaign_id), out)
        out.print()
        print_report(campaigns.load_report(release.campaign_id), out)

        lite_suite = example_suite(min(LITE_CASES, len(suite.cases)))
        lite_policy = example_policy(
            lite_suite, candidate_model_id="example-mt-lite", candidate_model_version="0.9"
        )
        _heading(out, "campaign 2: a lite candidate that fails some items for good")
        lite = _work_campaign(
            out, campaigns, database.url, lite_policy, lite_suite, 2, workers, progress, "lite"
        )
        print_status(lite, out)
        print_health(campaigns.health(lite.campaign_id), out)
        out.print(
            "no report: a campaign with items failed for good is blocked. Fix what their "
            "error codes name,\nthen `benchledger campaign retry ID` puts them back in the "
            "queue (or create a new campaign)."
        )

        _heading(out, "study: fine-tuning sweep with a finite budget")
        page, candidate = _study_demo(StudyService(database), out)
        seconds = time.monotonic() - started
        out.print()
        out.print(f"demo finished in {seconds:.1f} s; run it again: everything is idempotent")
        return DemoResult(release, lite, page, candidate, seconds)
    finally:
        database.dispose()


def _work_campaign(
    out: Console,
    campaigns: CampaignService,
    url: str,
    policy: CampaignPolicy,
    suite: Suite,
    max_attempts: int,
    workers: int,
    progress: bool | None,
    label: str,
) -> CampaignStatus:
    campaign_id = campaigns.create(policy, suite, max_attempts=max_attempts)
    before = campaigns.status(campaign_id)
    out.print(
        f"{campaign_id}\n{len(suite.cases)} cases x {len(policy.required_locales)} locales = "
        f"{before.work_count} items, max {max_attempts} attempts; "
        f"{workers} worker processes"
    )
    result: PoolResult = run_pool(
        url,
        campaign_id,
        EVALUATOR,
        workers=workers,
        options=DEMO_WORK,
        worker_prefix=f"demo-{label}",
        progress=progress,
        label=label,
    )
    if result.errors:
        code, message = result.errors[0]
        raise PoolError(code, f"a worker failed: {message}")
    if result.interrupted:
        raise PoolError("ledger.cli.interrupted", "stopped; run the demo again to resume")
    counts = result.status.counts
    out.print(
        f"worked {result.cases} attempts in {result.elapsed:.1f} s: "
        f"{counts[WorkStatus.SUCCEEDED]} succeeded, {counts[WorkStatus.FAILED]} failed"
    )
    return result.status


# -- the study -----------------------------------------------------------------------------

#: The admissions the demo makes: (trial index, how the run ends). The second
#: run fails and is retried as its child; the fifth finds the budget spent.
_PLAN: tuple[tuple[int, RunState], ...] = (
    (0, RunState.COMPLETED),
    (1, RunState.FAILED),
    (1, RunState.COMPLETED),
    (2, RunState.COMPLETED),
    (0, RunState.COMPLETED),
)


def _study_demo(service: StudyService, out: Console) -> tuple[StudyPage, CandidateResult | None]:

    role = service.bootstrap_owner(OWNER)
    out.print(f"actor {OWNER} is {role.value}")
    specs = [MaterialSpec.from_document(item) for item in study_example.example_materials()]
    materials = [
        service.register_material(
            OWNER,
            recipe=spec.recipe,
            envelope=spec.envelope,
            trainer_id=spec.trainer_id,
            builtin=spec.builtin,
        )
        for spec in specs
    ]
    spec = study_example.example_study_spec()
    for generation in itertools.count():

        def key(step: str, generation: int = generation) -> str:
            return f"demo-study-{generation}-{step}"

        created = service.create(
            OWNER,
            name=spec["name"],
            limits=study_example.LIMITS,
            policy=study_example.example_policy(),
            request_key=key("create"),
        )
        page = service.get(OWNER, created.id)
        if page.study.state is StudyState.STOPPED:
            out.print(f"study {created.id} was finished by an earlier demo run (replayed):")
            print_study(page, out)
            candidate = _existing_candidate(service, page)
            if candidate is not None:
                print_candidate(candidate, out)
            return page, candidate
        if page.study.state is StudyState.DRAFT and page.study.revision == 1:
            return _study_flow(service, out, created.id, materials, key)
        out.print(f"study {created.id} was left half-way by an interrupted run: starting anew")
    raise AssertionError("unreachable")


def _study_flow(
    service: StudyService,
    out: Console,
    study_id: str,
    materials: list[Material],
    key: Callable[[str], str],
) -> tuple[StudyPage, CandidateResult | None]:

    def revision() -> int:
        return service.get(OWNER, study_id, limit=1).study.revision

    limits = study_example.LIMITS.to_document()
    envelope = study_example.ENVELOPE.to_document()
    out.print(f"study {study_id}: a draft with a finite budget in four dimensions:")
    for name, meaning in DIMENSION_NAMES.items():
        out.print(f"  {meaning}: {amount(name, limits[name])}")
    out.print(
        "Each admission reserves its trial's envelope, the most one run may use ("
        + f"{envelope['attempt_slots']} slot, "
        + ", ".join(amount(name, envelope[name]) for name in list(DIMENSION_NAMES)[1:])
        + "),\nuntil reconcile settles it from the run's state. An admission that would "
        "exceed the budget is refused."
    )
    trials: list[Trial] = []
    for index, material in enumerate(materials):
        trials.append(
            service.prepare_trial(
                OWNER,
                study_id,
                revision=revision(),
                material=material.ref,
                replicate=1,
                request_key=key(f"trial-{index}"),
            )
        )
        rate = study_example.LEARNING_RATES[index]
        out.print(
            f"trial {trials[-1].id[:12]}: learning rate {rate}, material {material.sha256[:12]}"
        )
    opened = service.open_study(OWNER, study_id, revision=revision(), request_key=key("open"))
    out.print(
        f"opened: admission epoch {opened.admission_epoch} (stop and continue move the epoch; "
        "an admission names the epoch it expects)"
    )

    completed: list[tuple[Admission, Trial]] = []
    failed_run: dict[int, str] = {}
    for step, (index, ending) in enumerate(_PLAN):
        trial = trials[index]
        current = service.get(OWNER, study_id, limit=1).study
        try:
            admission = service.admit(
                OWNER,
                study_id,
                revision=current.revision,
                admission_epoch=current.admission_epoch,
                trial_id=trial.id,
                request_key=key(f"admit-{step}"),
                parent_run_id=failed_run.pop(index, None),
            )
        except StudyError as error:
            out.print(f"admission {step + 1} refused: {error.code}: {error.message}")
            continue
        run_id = admission.run.id
        service.report_run(OWNER, run_id, RunState.RUNNING)
        service.report_run(OWNER, run_id, ending, custody_ceased=True)
        parent = admission.reservation.parent_run_id
        out.print(
            f"admission {step + 1}: trial {trial.id[:12]} run {run_id[:12]}"
            + (f" (retry of {parent[:12]})" if parent else "")
            + f" reserved its envelope; the run {ending.value}"
        )
        if ending is RunState.COMPLETED:
            service.record_evidence(
                OWNER, study_example.example_evidence(run_id, trial.material.sha256)
            )
            completed.append((admission, trial))
        else:
            failed_run[index] = run_id

    page = service.reconcile(OWNER, study_id)
    out.print(
        "reconciled: every run ceased; each reservation is settled at its whole envelope "
        "(the runner reported no smaller use)"
    )
    print_study(page, out)

    best_admission, best_trial = max(
        completed, key=lambda pair: _selected_value(service, pair[0].run.id)
    )
    candidate = service.select_candidate(
        OWNER,
        study_id,
        revision=revision(),
        trial_id=best_trial.id,
        run_id=best_admission.run.id,
        request_key=key("select"),
    )
    value = _selected_value(service, best_admission.run.id)
    out.print(
        f"selected by the policy (checkpoint_rule=selected: the checkpoint the run's evidence "
        f"marks), validation chrF {value}; 'diagnostic' means no quality threshold was applied:"
    )
    print_candidate(candidate, out)

    outcome = service.stop(OWNER, study_id, revision=revision(), request_key=key("stop"))
    out.print(
        f"stopped: admission epoch {outcome.receipt.admission_epoch}, "
        f"state {outcome.status.study.state.value}"
    )
    return outcome.status, candidate


def _selected_value(service: StudyService, run_id: str) -> float:
    """The metric at the run's selected checkpoint, from the evidence the ledger retained."""
    evidence = service.run_evidence(OWNER, run_id)
    if evidence is None:
        raise StudyError(f"Run {run_id} has no retained evidence.", "unavailable")
    selected = next(item for item in evidence.checkpoints if item.selected)
    value: Any = next(
        item.value for item in evidence.observations if item.checkpoint_sha256 == selected.sha256
    )
    return float(value)


def _existing_candidate(service: StudyService, page: StudyPage) -> CandidateResult | None:
    for reservation in page.reservations:
        listing = service.candidates(OWNER, reservation.run_id)
        for ref in listing.candidates:
            return service.candidate(OWNER, ref.id)
    return None


__all__ = ["DemoResult", "run_demo"]


@click.command(short_help="Run both domains end to end.")
@click.option(
    "--cases",
    type=click.IntRange(1, 300),
    default=None,
    help="Use the first N cases of the example suite (default: all 300).",
)
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress bars (default: when stderr is a terminal).",
)
@pass_settings
def demo(settings: Settings, cases: int | None, workers: int, progress: bool | None) -> None:
    """Run both domains end to end on one database (creates or upgrades it).

    Campaigns over the bundled example suite worked by N processes, then a
    study spending its budget and selecting a candidate. Safe to run again.
    """
    database = settings.database(create=True, check_schema=False)
    database.dispose()
    run_demo(database.url, cases=cases, workers=workers, out=console(), progress=progress)
    click.echo(f"open the dashboard: {_serve_command(settings.url or database.url)}")


def _serve_command(url: str) -> str:
    """The command that serves the dashboard on ``url`` (a password is never printed)."""
    import os
    import sys

    import sqlalchemy as sa

    program = sys.argv[0] if os.path.basename(sys.argv[0]) == "benchledger" else "benchledger"
    shown = sa.make_url(url).render_as_string(hide_password=True)
    return f"{program} --url {shown} serve"
