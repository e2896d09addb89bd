"""Batched claims and group-committed completions: many items per statement and per
transaction, each still fenced by its own lease and token."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from benchledger.db import Database
from benchledger.domain import campaign as dom
from benchledger.domain.campaign_results import ClaimedCase, Completion
from benchledger.errors import CampaignBlocked
from benchledger.repositories.campaigns import completions
from benchledger.services.campaigns import CampaignService, batches
from benchledger.testing.clock import LedgerClock
from benchledger.workers.batching import ClaimBuffer, Committer
from benchledger.workers.lanes import LaneLimit
from benchledger.workers.lease import THREADS
from benchledger.workers.loop import Worker

from .helpers import T0, make_plan, result_for, snapshot, work_row


def test_a_batched_claim_leases_items_in_claim_order_each_with_its_own_token(
    service: CampaignService, ledger_db: Database
) -> None:
    plan = make_plan(cases=5)  # 10 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 4, lease_seconds=60)
    assert len(claims) == 4
    keys = [(c.target_locale, c.suite_case_key) for c in claims]
    assert keys == sorted(keys)
    assert len({c.lease_token for c in claims}) == 4
    for claim in claims:
        row = work_row(ledger_db, claim.work_id)
        assert (row.status, row.lease_token, row.attempts) == ("leased", claim.lease_token, 1)
    # The rest, then nothing: never an item twice.
    rest = service.claim_batch(cid, "w-2", 10, lease_seconds=60)
    assert len(rest) == 6
    assert not {c.work_id for c in rest} & {c.work_id for c in claims}
    assert service.claim_batch(cid, "w-2", 10, lease_seconds=60) == []
    for claim in claims + rest:
        service.complete(claim, result_for(claim))
    assert service.status(cid).counts["succeeded"] == 10
    assert service.verify(cid).ok


def test_a_batched_claim_takes_over_expired_leases(
    service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2)  # 4 items
    cid = service.create(plan.policy, plan.suite)
    lost = service.claim_batch(cid, "w-dead", 4, lease_seconds=10)
    clock.advance(11)
    taken = service.claim_batch(cid, "w-2", 4, lease_seconds=60)
    assert sorted(c.work_id for c in taken) == sorted(c.work_id for c in lost)
    assert all(c.attempt == 1 for c in taken)  # a lost lease gave its attempt back
    with pytest.raises(CampaignBlocked) as stale:
        service.complete(lost[0], result_for(lost[0]))
    assert stale.value.code == dom.LEASE_LOST
    outcomes = Counter(a.outcome for a in service.attempts(cid).attempts)
    assert outcomes == {"lease_expired": 4}


def test_a_capped_campaign_leases_one_at_a_time_within_its_caps(
    service: CampaignService,
) -> None:
    plan = make_plan(cases=5)
    cid = service.create(plan.policy, plan.suite, max_concurrent_leases=3)
    got = [len(service.claim_batch(cid, "w-1", 8, lease_seconds=60)) for _ in range(5)]
    assert got == [1, 1, 1, 0, 0]
    group = service.status(cid).limit_group
    assert group is not None
    service.set_limits(cid, max_concurrent_leases=None)
    service.set_group_limits(group, max_concurrent_leases=4)
    assert len(service.claim_batch(cid, "w-1", 8, lease_seconds=60)) == 1
    assert service.claim_batch(cid, "w-1", 8, lease_seconds=60) == []


@pytest.mark.parametrize("n", [0, -1, 257, 1.5, True, "2"])
def test_a_bad_batch_size_is_refused_and_changes_nothing(
    service: CampaignService, cid: str, ledger_db: Database, n: object
) -> None:
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked) as refused:
        service.claim_batch(cid, "w-1", n)  # type: ignore[arg-type]
    assert refused.value.code == dom.WORKER_SETTING_INVALID
    assert snapshot(ledger_db) == before


def test_a_group_commit_with_one_stale_lease_commits_the_others(
    service: CampaignService, clock: LedgerClock, ledger_db: Database
) -> None:
    plan = make_plan(cases=2)  # 4 items
    cid = service.create(plan.policy, plan.suite)
    stale, *live = service.claim_batch(cid, "w-1", 4, lease_seconds=10)
    clock.advance(5)
    live = [service.renew(claim, lease_seconds=60) for claim in live]
    clock.advance(6)  # the first one's lease ran out; another worker takes it over
    (taken,) = service.claim_batch(cid, "w-2", 4, lease_seconds=60)
    assert taken.work_id == stale.work_id
    outcomes = service.complete_batch(
        [Completion(claim, result_for(claim)) for claim in [stale, *live]]
    )
    assert isinstance(outcomes[0], CampaignBlocked) and outcomes[0].code == dom.LEASE_LOST
    assert [o.status for o in outcomes[1:] if not isinstance(o, CampaignBlocked)] == [
        "succeeded"
    ] * 3
    assert work_row(ledger_db, stale.work_id).lease_token == taken.lease_token  # untouched
    service.complete(taken, result_for(taken))
    assert service.verify(cid).ok


def test_a_case_twice_in_one_group_commit_completes_once(
    service: CampaignService, ledger_db: Database
) -> None:
    plan = make_plan(cases=1)
    cid = service.create(plan.policy, plan.suite)
    first, second = service.claim_batch(cid, "w-1", 2, lease_seconds=60)
    outcomes = service.complete_batch(
        [Completion(c, result_for(c)) for c in (first, second, first)]
    )
    assert [getattr(o, "status", None) for o in outcomes[:2]] == ["succeeded"] * 2
    assert isinstance(outcomes[2], CampaignBlocked) and outcomes[2].code == dom.LEASE_LOST
    history = service.attempts(cid).attempts
    assert sorted(a.work_id for a in history) == sorted([first.work_id, second.work_id])
    assert service.verify(cid).ok


def test_a_group_commit_longer_than_one_statement_fences_each_entry(
    service: CampaignService, ledger_db: Database
) -> None:
    """Past LISTED_BATCH entries SQLite writes the batch in several statements: a wrong
    token in the second one is lost alone, and every other entry commits once."""
    plan = make_plan(cases=50)  # 100 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 100, lease_seconds=60)
    assert len(claims) == 100 > completions.LISTED_BATCH
    forged = attrs.evolve(claims[70], lease_token=claims[71].lease_token)
    entries = [*claims[:70], forged, *claims[71:]]
    outcomes = service.complete_batch([Completion(c, result_for(c)) for c in entries])
    assert isinstance(outcomes[70], CampaignBlocked) and outcomes[70].code == dom.LEASE_LOST
    written = [o for i, o in enumerate(outcomes) if i != 70]
    assert [getattr(o, "status", None) for o in written] == ["succeeded"] * 99
    assert [getattr(o, "work_id", None) for o in written] == [
        c.work_id for i, c in enumerate(claims) if i != 70
    ]
    assert work_row(ledger_db, claims[70].work_id).status == "leased"
    history = service.attempts(cid).attempts
    assert len(history) == 99 and claims[70].work_id not in {a.work_id for a in history}


def test_a_group_commit_counts_the_cost_of_what_it_wrote(
    service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2)  # 4 items
    cid = service.create(plan.policy, plan.suite, limit_group="priced")
    stale, *live = service.claim_batch(cid, "w-1", 4, lease_seconds=10)
    clock.advance(11)  # every lease ran out: take three back
    live = service.claim_batch(cid, "w-2", 3, lease_seconds=60)
    assert len(live) == 3
    service.set_group_limits("priced", max_cost_per_minute=10_000)  # cost counts from now
    outcomes = service.complete_batch(
        [Completion(c, result_for(c), cost_units=100) for c in (stale, *live)]
    )
    assert isinstance(outcomes[0], CampaignBlocked) and outcomes[0].code == dom.LEASE_LOST
    assert service.group_usage("priced").cost_last_minute == 300


def test_a_group_commit_stores_each_result_byte_for_byte(
    service: CampaignService, ledger_db: Database
) -> None:
    """Results with quotes, backslashes, non-ASCII text and emoji travel in one batch
    (one JSON text on PostgreSQL) and are stored exactly as one at a time would."""
    plan = make_plan(cases=2)  # 4 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 4, lease_seconds=60)
    notes = ['say "hi"', "back\\slash\n", "Grüße, 東京", "emoji 😀 and \u00e9"]
    outcomes = service.complete_batch(
        [Completion(c, result_for(c, note=note)) for c, note in zip(claims, notes, strict=True)]
    )
    assert [getattr(o, "status", None) for o in outcomes] == ["succeeded"] * 4
    stored = {c.work_id: json.loads(work_row(ledger_db, c.work_id).result_json) for c in claims}
    assert [stored[c.work_id]["note"] for c in claims] == notes
    assert service.verify(cid).ok  # every stored text still hashes to its digest


def test_a_group_commit_refuses_a_bad_result_alone(service: CampaignService) -> None:
    plan = make_plan(cases=1)
    cid = service.create(plan.policy, plan.suite)
    good, bad = service.claim_batch(cid, "w-1", 2, lease_seconds=60)
    outcomes = service.complete_batch(
        [Completion(good, result_for(good)), Completion(bad, result_for(good))]
    )
    assert not isinstance(outcomes[0], CampaignBlocked)
    assert isinstance(outcomes[1], CampaignBlocked)
    assert outcomes[1].code == dom.RESULT_MISMATCH
    assert service.status(cid).counts == {
        "pending": 0, "leased": 1, "retry_wait": 0, "succeeded": 1, "failed": 0
    }  # fmt: skip


def test_lanes_share_claims_and_commits(
    ledger_db: Database, service: CampaignService, clock: LedgerClock
) -> None:
    """The same drain with batching on and off: on, far fewer transactions, and every
    item done exactly once either way."""
    commits = 0

    def counted(*_: object) -> None:
        nonlocal commits
        commits += 1

    def evaluate(claim: ClaimedCase, heartbeat: Callable[[], None]) -> Mapping[str, Any]:
        return result_for(claim)

    made: dict[bool, int] = {}
    for batching, model in ((True, "on"), (False, "off")):
        plan = make_plan(cases=40, candidate_model_id=f"batching-{model}")  # 80 items
        cid = service.create(plan.policy, plan.suite)
        commits = 0
        sa.event.listen(ledger_db.engine, "commit", counted)
        try:
            summary = Worker(
                service, cid, "w-1", evaluate, clock=clock, concurrency=8, batching=batching
            ).run()
        finally:
            sa.event.remove(ledger_db.engine, "commit", counted)
        made[batching] = commits
        assert summary.succeeded == 80 and summary.failed == 0
        history = service.attempts(cid, limit=1000).attempts
        assert len(history) == 80 and all(a.outcome == "succeeded" for a in history)
        assert service.verify(cid).ok
    assert made[False] >= 160  # a claim and a completion per case, at least
    # On: each group commit also leases the next cases of the lanes it frees (measured:
    # 30 transactions for 80 items, against 177).
    assert made[True] <= 0.25 * made[False], made


def die_after(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """``batches.<step>`` does its work in the transaction, then the connection dies."""
    real = getattr(batches, step)

    def dying(*args: Any) -> Any:
        real(*args)
        raise ConnectionResetError(f"the connection died after {step}, before the commit")

    monkeypatch.setattr(batches, step, dying)


def test_a_flush_that_dies_midway_writes_nothing_of_its_batch(
    service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(cases=2)  # 4 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 4, lease_seconds=60)
    # Every row written, uncommitted: the committer dies here.
    die_after(monkeypatch, "write_completions")
    with pytest.raises(ConnectionResetError):
        service.complete_batch([Completion(claim, result_for(claim)) for claim in claims])
    monkeypatch.undo()
    assert service.status(cid).counts["succeeded"] == 0  # nothing of the batch committed
    assert service.attempts(cid).attempts == ()
    outcomes = service.complete_batch([Completion(c, result_for(c)) for c in claims])
    assert [getattr(o, "status", None) for o in outcomes] == ["succeeded"] * 4
    assert service.verify(cid).ok


def test_every_lane_waiting_on_a_failed_flush_hears_of_it(
    service: CampaignService, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(cases=4)  # 8 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 8, lease_seconds=60)
    committer = Committer(service, THREADS)
    gate = threading.Event()
    real = service.complete_batch

    def failing(completions: Any, now: Any = None) -> Any:
        gate.wait(5)  # hold the first flush until every lane waits on it
        raise ConnectionResetError("the flush failed")

    monkeypatch.setattr(service, "complete_batch", failing)
    errors: list[BaseException] = []

    def lane(claim: ClaimedCase) -> None:
        try:
            committer.complete(claim, result_for(claim), 1.0)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=lane, args=(c,)) for c in claims[:4]]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(errors) == 4 and all(isinstance(e, ConnectionResetError) for e in errors)
    monkeypatch.setattr(service, "complete_batch", real)
    outcome = committer.complete(claims[4], result_for(claims[4]), service.context.now(None))
    assert outcome.status == "succeeded"  # the committer leads again after a failure


def test_a_committer_waits_a_moment_for_lanes_still_evaluating(
    service: CampaignService,
) -> None:
    """Results that arrive a millisecond apart share one commit while a lane is still
    evaluating; with none evaluating the leader writes at once, alone."""
    plan = make_plan(cases=4)  # 8 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 8, lease_seconds=60)
    evaluating = [4]
    committer = Committer(service, THREADS, evaluating=lambda: evaluating[0], linger=2.0)
    wakes = _count_wake_ups(committer)

    def lane(claim: ClaimedCase) -> None:
        committer.complete(claim, result_for(claim), service.context.now(None))

    threads = [threading.Thread(target=lane, args=(c,)) for c in claims[:4]]
    started = time.monotonic()
    for handed_in, thread in enumerate(threads, start=1):
        evaluating[0] -= 1  # a lane stops evaluating, then hands in its result
        thread.start()
        # It joined the queue (the last one may have been written already)...
        _wait_until(lambda n=handed_in: len(committer._pending) >= n or committer.batches > 0)
        time.sleep(0.01)  # ...and looked whether it ends the leader's wait
    for thread in threads:
        thread.join(10)
    assert committer.batches == 1
    assert time.monotonic() - started < 1.0  # the last result ended the wait, not the clock
    assert wakes == [1]  # only the last result woke the waiting leader, not each one
    evaluating[0] = 0
    started = time.monotonic()
    lane(claims[4])
    assert committer.batches == 2 and time.monotonic() - started < 1.0
    assert service.status(cid).counts["succeeded"] == 5


def test_a_full_batch_ends_the_wait_for_lanes_still_evaluating(
    service: CampaignService,
) -> None:
    """Lanes still evaluate, but the results waiting fill a batch: the one that fills
    it wakes the leader, which writes them at once (not at the end of its linger)."""
    plan = make_plan(cases=2)  # 4 items
    cid = service.create(plan.policy, plan.suite)
    claims = service.claim_batch(cid, "w-1", 3, lease_seconds=60)
    committer = Committer(service, THREADS, max_batch=3, evaluating=lambda: 5, linger=5.0)
    wakes = _count_wake_ups(committer)
    threads = [
        threading.Thread(
            target=committer.complete,
            args=(claim, result_for(claim), service.context.now(None)),
        )
        for claim in claims
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
        time.sleep(0.01)
    for thread in threads:
        thread.join(10)
    assert committer.batches == 1 and time.monotonic() - started < 2.5
    assert wakes == [1]
    assert service.status(cid).counts["succeeded"] == 3


def _wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def _count_wake_ups(committer: Committer) -> list[int]:
    """How many times a result woke the committer's waiting leader (one count, kept
    up to date in the list returned)."""
    woken = [0]
    arrived = committer._arrived
    pulse = arrived.pulse

    def counted() -> None:
        woken[0] += 1
        pulse()

    arrived.pulse = counted  # type: ignore[method-assign]
    return woken


def test_a_batched_worker_claims_no_more_than_max_cases(
    service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=20)  # 40 items
    cid = service.create(plan.policy, plan.suite)
    summary = Worker(
        service,
        cid,
        "w-1",
        lambda claim, heartbeat: result_for(claim),
        clock=clock,
        concurrency=8,
        max_cases=5,
    ).run()
    assert summary.cases == 5
    counts = service.status(cid).counts
    assert counts["succeeded"] == 5 and counts["leased"] == 0 and counts["pending"] == 35


def test_completions_look_again_at_a_campaign_another_writer_moved_half_a_second_later(
    service: CampaignService, ledger_db: Database, clock: LedgerClock
) -> None:
    """``updated_at`` moves at most once a second; a service that finds it moved by
    another writer within that second does not ask again at every commit."""
    from benchledger.repositories.campaigns.store import TOUCH_CAMPAIGN

    plan = make_plan(cases=10)  # 20 items
    cid = service.create(plan.policy, plan.suite)
    other = CampaignService(ledger_db, clock=clock)
    first = other.claim_batch(cid, "w-other", 1, lease_seconds=60)
    clock.advance(2)
    other.complete(first[0], result_for(first[0]))  # the other writer moves it now
    moved_at = service.status(cid).updated_at
    touches: list[float] = []
    touch_sql = TOUCH_CAMPAIGN.form(ledger_db.engine.dialect).sql

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement == touch_sql:
            touches.append(clock())

    claims = service.claim_batch(cid, "w-1", 12, lease_seconds=60)
    sa.event.listen(ledger_db.engine, "before_cursor_execute", count)
    try:
        for claim in claims:  # one completion each 1/8 s, for 1.5 s
            clock.advance(0.125)
            service.complete_batch([Completion(claim, result_for(claim))])
    finally:
        sa.event.remove(ledger_db.engine, "before_cursor_execute", count)
    # Moved by the other writer at `moved_at`: asked at 0.125 s (not moved), again half a
    # second later (not moved: under a second since), then at 1.125 s (moved); before,
    # it was asked at every commit of that second.
    assert [t - moved_at for t in touches] == [0.125, 0.625, 1.125]
    assert service.status(cid).updated_at == moved_at + 1.125


# -- complete_and_claim: a group commit that leases the freed lanes' next cases ---------


def test_complete_and_claim_writes_the_results_and_leases_the_next_items_at_once(
    service: CampaignService, ledger_db: Database
) -> None:
    plan = make_plan(cases=5)  # 10 items
    cid = service.create(plan.policy, plan.suite)
    first = service.claim_batch(cid, "w-1", 4, lease_seconds=60)
    commits: list[object] = []

    def committed(connection: object) -> None:
        commits.append(connection)

    sa.event.listen(ledger_db.engine, "commit", committed)
    try:
        outcomes, claims = service.complete_and_claim(
            [Completion(c, result_for(c)) for c in first], cid, "w-1", 4, lease_seconds=60
        )
    finally:
        sa.event.remove(ledger_db.engine, "commit", committed)
    assert len(commits) == 1  # one transaction for both
    assert [getattr(o, "status", None) for o in outcomes] == ["succeeded"] * 4
    keys = [(c.target_locale, c.suite_case_key) for c in claims]
    assert len(claims) == 4 and keys == sorted(keys)
    assert not {c.work_id for c in claims} & {c.work_id for c in first}
    assert len({c.lease_token for c in claims}) == 4
    for claim in claims:
        row = work_row(ledger_db, claim.work_id)
        assert (row.status, row.lease_token, row.lease_owner) == (
            "leased",
            claim.lease_token,
            "w-1",
        )
    counts = service.status(cid).counts
    assert (counts["succeeded"], counts["leased"], counts["pending"]) == (4, 4, 2)
    # The last round: fewer due than asked, then none.
    outcomes, rest = service.complete_and_claim(
        [Completion(c, result_for(c)) for c in claims], cid, "w-1", 4
    )
    assert len(rest) == 2
    outcomes, none = service.complete_and_claim(
        [Completion(c, result_for(c)) for c in rest], cid, "w-1", 4
    )
    assert none == [] and service.status(cid).counts["succeeded"] == 10
    assert service.verify(cid).ok


def test_complete_and_claim_a_stale_lease_is_lost_alone(
    service: CampaignService, clock: LedgerClock, ledger_db: Database
) -> None:
    plan = make_plan(cases=3)  # 6 items
    cid = service.create(plan.policy, plan.suite)
    (stale,) = service.claim_batch(cid, "w-1", 1, lease_seconds=10)
    (live,) = service.claim_batch(cid, "w-1", 1, lease_seconds=60)
    clock.advance(11)
    (taken,) = service.claim_batch(cid, "w-2", 1, lease_seconds=60)
    assert taken.work_id == stale.work_id  # the expired lease, taken over
    outcomes, claims = service.complete_and_claim(
        [Completion(stale, result_for(stale)), Completion(live, result_for(live))],
        cid,
        "w-1",
        2,
    )
    assert isinstance(outcomes[0], CampaignBlocked) and outcomes[0].code == dom.LEASE_LOST
    assert getattr(outcomes[1], "status", None) == "succeeded"
    assert len(claims) == 2
    assert work_row(ledger_db, stale.work_id).lease_token == taken.lease_token  # untouched


@pytest.mark.parametrize("gate", ["cancelled", "paused", "capped"])
def test_complete_and_claim_leases_nothing_past_a_gate_and_still_completes(
    service: CampaignService, gate: str
) -> None:
    plan = make_plan(cases=4)  # 8 items
    cid = service.create(plan.policy, plan.suite)
    first = service.claim_batch(cid, "w-1", 2, lease_seconds=60)
    if gate == "cancelled":
        service.cancel(cid)
    elif gate == "paused":
        service.set_limits(cid, max_concurrent_leases=0)
    else:  # room for one more lease: a batch must not take it past the cap
        service.set_limits(cid, max_concurrent_leases=3)
    outcomes, claims = service.complete_and_claim(
        [Completion(c, result_for(c)) for c in first], cid, "w-1", 4
    )
    assert claims == []
    statuses = [getattr(o, "status", getattr(o, "code", None)) for o in outcomes]
    if gate == "cancelled":  # a cancelled campaign takes no more results either
        assert service.status(cid).counts["succeeded"] == statuses.count("succeeded")
    else:
        assert statuses == ["succeeded", "succeeded"]
        assert service.status(cid).counts["leased"] == 0


def test_complete_and_claim_after_the_policy_expired_leases_nothing_and_raises_nothing(
    service: CampaignService, clock: LedgerClock
) -> None:
    plan = make_plan(cases=2, valid_until=T0 + 100)
    cid = service.create(plan.policy, plan.suite)
    first = service.claim_batch(cid, "w-1", 2, lease_seconds=300)
    clock.advance(101)
    outcomes, claims = service.complete_and_claim(
        [Completion(c, result_for(c)) for c in first], cid, "w-1", 2
    )
    assert claims == []
    assert all(isinstance(o, CampaignBlocked) and o.code == dom.VALIDITY_EXPIRED for o in outcomes)
    assert service.status(cid).counts["leased"] == 2  # nothing written


@pytest.mark.parametrize(
    "arguments",
    [
        {"n": 0},
        {"n": 257},
        {"n": True},
        {"worker_id": ""},
        {"lease_seconds": -1},
        {"campaign_id": "benchmark-campaign-" + "0" * 64},
        {"completions": "not a list"},
    ],
)
def test_complete_and_claim_refuses_bad_arguments_before_writing_anything(
    service: CampaignService, ledger_db: Database, arguments: dict[str, Any]
) -> None:
    plan = make_plan(cases=2)
    cid = service.create(plan.policy, plan.suite)
    first = service.claim_batch(cid, "w-1", 2, lease_seconds=60)
    call: dict[str, Any] = {
        "completions": [Completion(c, result_for(c)) for c in first],
        "campaign_id": cid,
        "worker_id": "w-1",
        "n": 2,
        **arguments,
    }
    before = snapshot(ledger_db)
    with pytest.raises(CampaignBlocked):
        service.complete_and_claim(**call)
    assert snapshot(ledger_db) == before


def test_complete_and_claim_that_dies_midway_writes_neither(
    service: CampaignService, monkeypatch: pytest.MonkeyPatch, ledger_db: Database
) -> None:
    plan = make_plan(cases=3)  # 6 items
    cid = service.create(plan.policy, plan.suite)
    first = service.claim_batch(cid, "w-1", 2, lease_seconds=60)
    die_after(monkeypatch, "_lease_batch")  # results written, items leased, uncommitted
    before = snapshot(ledger_db)
    with pytest.raises(ConnectionResetError):
        service.complete_and_claim([Completion(c, result_for(c)) for c in first], cid, "w-1", 2)
    monkeypatch.undo()
    assert snapshot(ledger_db) == before


def test_a_group_commit_leases_for_the_lanes_it_frees_and_no_more(
    service: CampaignService, cid: str
) -> None:
    lanes = LaneLimit(16)
    buffer = ClaimBuffer(service, cid, "w-1", 60, lanes, THREADS)
    assert buffer.refill_size(16) == 16
    assert buffer.refill_size(5) == 5  # a commit of five frees five lanes
    lanes.level = 4  # throttled: only four lanes may claim now
    assert buffer.refill_size(16) == 4
    buffer.refill(service.claim_batch(cid, "w-1", 3, lease_seconds=60))
    assert buffer.refill_size(16) == 1  # three are held already
    stopping = ClaimBuffer(service, cid, "w-1", 60, LaneLimit(16), THREADS)
    stopping.stopping = lambda: True
    capped = ClaimBuffer(service, cid, "w-1", 60, LaneLimit(16), THREADS)
    capped.room = lambda: 100
    closed = ClaimBuffer(service, cid, "w-1", 60, LaneLimit(16), THREADS)
    closed.closed = True
    assert stopping.refill_size(16) == capped.refill_size(16) == closed.refill_size(16) == 0
