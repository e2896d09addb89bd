"""The report-state invariants health checks are pure: tested on plain rows, no database."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchledger.domain import campaign as dom
from benchledger.domain.campaign_rules import check_report_state
from benchledger.errors import CampaignBlocked


def _row(**changes: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "status": "pending",
        "lease_owner": None,
        "lease_token": None,
        "lease_expires_at": None,
        "attempts": 0,
        "max_attempts": 3,
        "last_error_code": None,
        "last_error_detail_hash": None,
        "next_attempt_at": 100.0,
        "created_at": 100.0,
        "updated_at": 100.0,
    }
    values.update(changes)
    return SimpleNamespace(**values)


def test_a_consistent_row_is_returned_as_it_is() -> None:
    row = _row()
    assert check_report_state(row, (3, 3)) is row
    leased = _row(
        status="leased", attempts=1, lease_owner="w-1", lease_token="t-1", lease_expires_at=400.0
    )
    assert check_report_state(leased, (3, 3)) is leased
    waiting = _row(status="retry_wait", attempts=1, last_error_code="a.b")
    assert check_report_state(waiting, (3, 3)) is waiting


@pytest.mark.parametrize(
    ("changes", "work_max_attempts"),
    [
        ({"status": "done"}, (3, 3)),  # not a status
        ({"status": "leased", "attempts": 1}, (3, 3)),  # a lease without its holder
        ({"lease_owner": "w-1"}, (3, 3)),  # a holder without a lease
        ({"attempts": 4}, (3, 3)),  # more attempts than allowed
        ({}, (2, 3)),  # the items disagree on the attempt budget
        ({"attempts": 1}, (3, 3)),  # pending after an attempt
        ({"status": "failed", "attempts": 1}, (3, 3)),  # failed without a code
        ({"status": "succeeded", "attempts": 1, "last_error_code": "a.b"}, (3, 3)),
        ({"last_error_detail_hash": "f" * 64}, (3, 3)),  # a detail while pending
        ({"created_at": 200.0}, (3, 3)),  # updated before created
        (None, (3, 3)),  # no row at all
    ],
)
def test_a_broken_invariant_is_report_state_invalid(
    changes: dict[str, Any] | None, work_max_attempts: tuple[int, int]
) -> None:
    row = None if changes is None else _row(**changes)
    with pytest.raises(CampaignBlocked) as caught:
        check_report_state(row, work_max_attempts)
    assert caught.value.code == dom.REPORT_STATE_INVALID
