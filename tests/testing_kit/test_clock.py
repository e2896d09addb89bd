"""LedgerClock: a Callable[[], float] of epoch seconds that moves only when told to."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from benchledger.testing import LedgerClock
from benchledger.testing.clock import DEFAULT_START


def test_time_stands_still_until_moved() -> None:
    clock = LedgerClock()
    assert clock() == clock.now() == clock.peek() == DEFAULT_START
    assert clock.advance(2.5) == DEFAULT_START + 2.5
    assert clock() == DEFAULT_START + 2.5


def test_is_a_clock_callable() -> None:
    clock: Callable[[], float] = LedgerClock(100)
    value = clock()
    assert isinstance(value, float)
    assert value == 100.0


def test_set_goes_anywhere_including_backwards() -> None:
    clock = LedgerClock(1_000.0)
    assert clock.set(500) == 500.0
    assert clock() == 500.0
    assert clock.set(2_000.25) == 2_000.25


def test_sleep_advances_instead_of_waiting() -> None:
    clock = LedgerClock(10.0)
    clock.sleep(30)
    assert clock() == 40.0


def test_step_makes_readings_strictly_increasing() -> None:
    clock = LedgerClock(0.0, step=0.5)
    assert [clock(), clock(), clock.now()] == [0.0, 0.5, 1.0]
    assert clock.peek() == 1.5
    assert clock.peek() == 1.5


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_refuses_times_that_are_not_epoch_seconds(value: float) -> None:
    with pytest.raises(ValueError):
        LedgerClock(value)
    with pytest.raises(ValueError):
        LedgerClock().set(value)


def test_refuses_non_numbers_and_moving_backwards_by_advance() -> None:
    clock = LedgerClock()
    with pytest.raises(TypeError):
        clock.set(True)
    with pytest.raises(TypeError):
        clock.advance("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        LedgerClock(step=-1)
    assert clock() == DEFAULT_START


def test_fixture_is_fresh_per_test(ledger_clock: LedgerClock) -> None:
    assert ledger_clock() == DEFAULT_START
    ledger_clock.advance(3600)


def test_fixture_is_fresh_per_test_again(ledger_clock: LedgerClock) -> None:
    assert ledger_clock() == DEFAULT_START
