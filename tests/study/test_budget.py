"""Finite budgets: exhaustion in every dimension, save never below the charge, checked sums."""

from __future__ import annotations

import pytest

from benchledger.domain.study import DIMENSIONS, MAX_NATURAL, Budget
from helpers import refused

from .helpers import ENVELOPE, LIMITS, OWNER, Kit


def _with(budget: Budget, name: str, value: int) -> Budget:
    values = budget.to_document()
    values[name] = value
    return Budget.from_document(values)


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_admission_stops_when_any_one_dimension_is_exhausted(kit: Kit, dimension: str) -> None:
    # Room for exactly two envelopes in ``dimension``, plenty in the others.
    limits = _with(
        Budget(100, 100_000, 1_000_000, 1_000_000), dimension, 2 * getattr(ENVELOPE, dimension)
    )
    study, trial, _ = kit.ready(limits=limits)
    for _ in range(2):
        admission = kit.admit(study.id, trial.id)
        kit.finish(admission.run.id)
    page = kit.service.get(OWNER, study.id)
    assert getattr(page.charged, dimension) == getattr(limits, dimension)
    assert getattr(page.remaining, dimension) == 0
    with refused(kit.db, "unavailable") as caught:
        kit.admit(study.id, trial.id)
    error = caught.value
    assert "budget is exhausted" in str(error)
    assert error.status == 409


def test_an_envelope_larger_than_the_whole_budget_is_never_admitted(kit: Kit) -> None:
    study, trial, _ = kit.ready(
        limits=Budget(10, 600, 999, 5_000), envelope=Budget(1, 60, 1_000, 500)
    )
    with refused(kit.db, "unavailable"):
        kit.admit(study.id, trial.id)


def test_charge_is_the_sum_of_reservation_envelopes(kit: Kit) -> None:
    small = kit.material(Budget(1, 10, 100, 50))
    large = kit.material(Budget(2, 30, 300, 150))
    study = kit.study()
    first = kit.member(study.id, small)
    second = kit.member(study.id, large)
    kit.open(study.id)
    for trial in (first, second):
        kit.finish(kit.admit(study.id, trial.id).run.id)
    page = kit.service.get(OWNER, study.id)
    assert page.charged == Budget(3, 40, 400, 200)
    assert page.remaining == Budget(7, 560, 9_600, 4_800)
    from benchledger.repositories.studies import StudyRepository

    with kit.db.read() as session:
        assert StudyRepository(session).charged_total(study.id) == page.charged


def test_save_never_sets_limits_below_the_charge(kit: Kit) -> None:
    study, trial, _ = kit.ready()
    kit.finish(kit.admit(study.id, trial.id).run.id)
    revision = kit.revision(study.id)
    with refused(kit.db, "conflict") as caught:
        kit.service.save(
            OWNER,
            study.id,
            revision=revision,
            name="smaller",
            limits=_with(LIMITS, "retained_bytes", ENVELOPE.retained_bytes - 1),
            policy=kit.policy(),
            request_key=kit.key(),
        )
    error = caught.value
    assert "below existing obligations" in str(error)
    saved = kit.service.save(
        OWNER,
        study.id,
        revision=revision,
        name="exactly charged",
        limits=ENVELOPE,
        policy=kit.policy("selected"),
        request_key=kit.key(),
    )
    assert saved.limits == ENVELOPE and saved.name == "exactly charged"
    assert saved.policy_sha256 == kit.policy("selected").sha256
    assert saved.revision == revision + 1


def test_limits_must_be_positive_natural_numbers(kit: Kit) -> None:
    for limits in (Budget(0, 1, 1, 1), Budget(1, 1, 1, 0)):
        with refused(kit.db, "invalid"):
            kit.service.create(
                OWNER, name="zero", limits=limits, policy=kit.policy(), request_key=kit.key()
            )
    with pytest.raises(Exception) as caught:
        Budget(1, -1, 1, 1)
    assert getattr(caught.value, "code", None) == "invalid"


def test_sums_beyond_the_largest_natural_are_refused() -> None:
    big = Budget(MAX_NATURAL, 1, 1, 1)
    with pytest.raises(Exception) as caught:
        big.plus(Budget(1, 0, 0, 0))
    assert getattr(caught.value, "code", None) == "invalid"
