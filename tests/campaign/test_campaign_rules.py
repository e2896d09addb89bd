"""The report-state invariants health checks are pure: tested on plain rows, no database."""

from __future__ import annotations

from typing import Any

import pytest

from benchledger.domain import campaign as dom
from benchledger.domain.campaign_rules import check_report_state
from benchledger.errors import CampaignBlocked

from .helpers import plain_report_state


def test_a_consistent_row_is_returned_as_it_is() -> None:
    row = plain_report_state()
    assert check_report_state(row, (3, 3)) is row
    leased = plain_report_state(
        status="leased", attempts=1, lease_owner="w-1", lease_token="t-1", lease_expires_at=400.0
    )
    assert check_report_state(leased, (3, 3)) is leased
    waiting = plain_report_state(status="retry_wait", attempts=1, last_error_code="a.b")
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
    row = None if changes is None else plain_report_state(**changes)
    with pytest.raises(CampaignBlocked) as caught:
        check_report_state(row, work_max_attempts)
    assert caught.value.code == dom.REPORT_STATE_INVALID
