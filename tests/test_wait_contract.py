"""The contract of ``WaitStore`` (issue 22), run against each store.

Waits and events: registration, delivery, buffering, FIFO, exactly-once,
resends, rejection, tokens, deadlines (the boundary instant included),
cancellation, and bad input that writes nothing. The ``store`` fixture is
parametrised over the stores that implement waits (``WAIT_STORES``), built by
the factories of ``tests/test_store_contract.py``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import pytest

from trioplay import (
    EventConflict,
    EventRecord,
    EventRefused,
    InvalidWait,
    RunRecord,
    SendRequest,
    SendResult,
    Store,
    UnknownRun,
    WaitRecord,
    WaitRequest,
    WaitStore,
)
from trioplay.stores._rules import decide_register, decide_send

from .test_store_contract import STORE_FACTORIES, STORE_MARKS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.deadline(10)


class WaitingStore(Store, WaitStore, Protocol):
    """A store with waits (every store, once all three implement ``WaitStore``)."""


WAIT_STORES = list(STORE_FACTORIES)

NOW = 1_000.0
HOUR = 3600.0


@pytest.fixture(params=[pytest.param(n, marks=STORE_MARKS.get(n, [])) for n in WAIT_STORES])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[WaitingStore]:
    opened = STORE_FACTORIES[request.param](tmp_path)
    assert isinstance(opened, WaitStore)
    await opened.open()
    try:
        await opened.begin_attempt("run-1", "enrich", "{}", now=NOW)
        yield opened
    finally:
        await opened.aclose()


def wait(
    key: str = "w1",
    *,
    name: str = "approval",
    key_json: str = '"lead-1"',
    deadline: float = NOW + HOUR,
    run_id: str = "run-1",
    token: str | None = None,
) -> WaitRequest:
    return WaitRequest(
        wait_key=key,
        run_id=run_id,
        dataset="leads",
        row_key=f"row-{key}",
        name=name,
        key_json=key_json,
        deadline=deadline,
        token=token or f"token-{key}",
    )


def event(
    event_id: str = "e1",
    payload: str | None = '{"ok":true}',
    *,
    name: str = "approval",
    key_json: str = '"lead-1"',
    run_id: str = "run-1",
    reject: str | None = None,
    token: str | None = None,
) -> SendRequest:
    return SendRequest(
        run_id=run_id,
        name=name if token is None else "",
        key_json=key_json if token is None else "",
        payload_json=payload,
        event_id=event_id,
        reject=reject,
        token=token,
    )


async def register(
    store: WaitingStore, *requests: WaitRequest, now: float = NOW
) -> list[WaitRecord]:
    return await store.register_waits(list(requests), now=now)


async def one(store: WaitingStore, key: str, now: float = NOW) -> WaitRecord:
    [found] = await store.poll_waits([key], now=now)
    assert found is not None
    return found


async def snapshot(
    store: WaitingStore, run_id: str = "run-1"
) -> tuple[list[WaitRecord], list[EventRecord], RunRecord | None]:
    return (
        await store.list_waits(run_id),
        await store.list_events(run_id),
        await store.get_run(run_id),
    )


# -- the records a request becomes -------------------------------------------------


def test_a_new_wait_and_a_new_event_hold_every_field_of_their_request() -> None:
    # The rules copy a record's leading fields off its request in one call
    # (stores/_rules.py): a field added to both, out of that order, fails here.
    request = wait()
    registered = decide_register([request], {}, [], NOW).inserts[0]
    shared = [f.name for f in attrs.fields(WaitRequest)]
    assert [getattr(registered, n) for n in shared] == [getattr(request, n) for n in shared]
    assert (registered.status, registered.created_at) == ("waiting", NOW)
    sent = event()
    stored = decide_send(sent, None, [], "running", NOW, store="memory://").event
    assert stored is not None
    shared = [f.name for f in attrs.fields(EventRecord) if hasattr(sent, f.name)]
    assert len(shared) == 6
    assert [getattr(stored, n) for n in shared] == [getattr(sent, n) for n in shared]
    assert (stored.sent_at, stored.consumed_by) == (NOW, None)


# -- registration -----------------------------------------------------------------


async def test_a_new_wait_is_waiting_with_its_deadline_and_token(store: WaitingStore) -> None:
    [record] = await register(store, wait())
    assert record == WaitRecord(
        wait_key="w1",
        run_id="run-1",
        dataset="leads",
        row_key="row-w1",
        name="approval",
        key_json='"lead-1"',
        token="token-w1",
        deadline=NOW + HOUR,
        status="waiting",
        created_at=NOW,
    )
    assert await store.list_waits("run-1") == [record]


async def test_a_registered_wait_keeps_its_first_deadline_and_token(store: WaitingStore) -> None:
    # A rerun half an hour later computes a new deadline and token: the stored ones stay.
    [first] = await register(store, wait())
    later = attrs.evolve(wait(), deadline=NOW + 1800 + HOUR, token="other")
    [again] = await register(store, later, now=NOW + 1800)
    assert again == first


async def test_a_wait_key_repeated_in_one_batch_is_registered_once(store: WaitingStore) -> None:
    records = await register(store, wait("w1"), wait("w1", deadline=NOW + 5), wait("w2"))
    assert [r.wait_key for r in records] == ["w1", "w1", "w2"]
    assert records[0] == records[1]
    assert records[0].deadline == NOW + HOUR
    assert len(await store.list_waits("run-1")) == 2


async def test_records_follow_the_order_of_requests_in_a_large_batch(store: WaitingStore) -> None:
    requests = [wait(f"w{i:04d}", key_json=str(i % 7)) for i in range(1500)][::-1]
    records = await register(store, *requests)
    assert [r.wait_key for r in records] == [r.wait_key for r in requests]
    assert {r.status for r in records} == {"waiting"}


async def test_poll_reads_waits_in_order_and_none_for_unknown_keys(store: WaitingStore) -> None:
    await register(store, wait("w1"), wait("w2"))
    found = await store.poll_waits(["w2", "nope", "w1"], now=NOW)
    assert [w.wait_key if w else None for w in found] == ["w2", None, "w1"]


# -- delivery -----------------------------------------------------------------------


async def test_an_event_for_an_open_wait_is_delivered_and_copied_in(store: WaitingStore) -> None:
    await register(store, wait())
    result = await store.send_event(event(), now=NOW + 5)
    assert result == SendResult("delivered", "e1", "w1", "leads", "row-w1")
    record = await one(store, "w1", now=NOW + 10)
    assert (record.status, record.payload_json, record.event_id, record.settled_at) == (
        "delivered",
        '{"ok":true}',
        "e1",
        NOW + 5,
    )
    [stored] = await store.list_events("run-1")
    assert (stored.consumed_by, stored.sent_at) == ("w1", NOW + 5)
    # Every replay reads the one copied value, long after the deadline too.
    [again] = await register(store, wait(), now=NOW + 10 * HOUR)
    assert again == record == await one(store, "w1", now=NOW + 10 * HOUR)


async def test_an_event_sent_before_its_waiter_is_buffered_then_taken(store: WaitingStore) -> None:
    result = await store.send_event(event(), now=NOW)
    assert result == SendResult("buffered", "e1")
    assert [e.event_id for e in await store.list_events("run-1", unclaimed_only=True)] == ["e1"]
    [record] = await register(store, wait(), now=NOW + 1)
    assert (record.status, record.payload_json, record.event_id) == (
        "delivered",
        '{"ok":true}',
        "e1",
    )
    assert await store.list_events("run-1", unclaimed_only=True) == []
    [stored] = await store.list_events("run-1")
    assert stored.consumed_by == "w1"


async def test_another_name_or_key_does_not_take_the_event(store: WaitingStore) -> None:
    await register(store, wait("w1", name="other"), wait("w2", key_json='"lead-2"'))
    assert (await store.send_event(event(), now=NOW)).outcome == "buffered"
    assert {w.status for w in await store.list_waits("run-1")} == {"waiting"}


async def test_events_of_another_run_stay_apart(store: WaitingStore) -> None:
    await store.begin_attempt("run-2", "enrich", "{}", now=NOW)
    await store.send_event(event(run_id="run-2"), now=NOW)
    [record] = await register(store, wait())
    assert record.status == "waiting"
    assert [e.run_id for e in await store.list_events("run-2")] == ["run-2"]
    assert await store.list_events("run-1") == []


async def test_fifo_two_waits_two_events_one_each_in_order(store: WaitingStore) -> None:
    await register(store, wait("w-b"), now=NOW)
    await register(store, wait("w-a"), now=NOW + 1)  # younger, though its key sorts first
    first = await store.send_event(event("e1", '"first"'), now=NOW + 2)
    second = await store.send_event(event("e2", '"second"'), now=NOW + 3)
    assert (first.wait_key, second.wait_key) == ("w-b", "w-a")
    assert (await one(store, "w-b")).payload_json == '"first"'
    assert (await one(store, "w-a")).payload_json == '"second"'


async def test_fifo_waits_registered_together_are_served_by_wait_key(store: WaitingStore) -> None:
    await register(store, wait("w2"), wait("w1"))
    first = await store.send_event(event("e1", "1"), now=NOW + 1)
    second = await store.send_event(event("e2", "2"), now=NOW + 1)
    assert (first.wait_key, second.wait_key) == ("w1", "w2")


async def test_fifo_buffered_events_go_out_in_send_order(store: WaitingStore) -> None:
    for index in range(3):
        await store.send_event(event(f"e{index}", str(index)), now=NOW)
    [a] = await register(store, wait("w-a"), now=NOW + 1)
    [b, c] = await register(store, wait("w-c"), wait("w-b"), now=NOW + 2)
    assert [a.payload_json, c.payload_json, b.payload_json] == ["0", "1", "2"]
    assert await store.list_events("run-1", unclaimed_only=True) == []


async def test_an_event_settles_one_wait_only(store: WaitingStore) -> None:
    await store.send_event(event(), now=NOW)
    [first, second] = await register(store, wait("w1"), wait("w2"))
    assert (first.status, second.status) == ("delivered", "waiting")


async def test_a_reject_settles_the_wait_rejected_with_its_reason(store: WaitingStore) -> None:
    await register(store, wait())
    result = await store.send_event(event(payload=None, reject="not approved"), now=NOW + 1)
    assert result.outcome == "delivered"
    record = await one(store, "w1")
    assert (record.status, record.reason, record.payload_json) == ("rejected", "not approved", None)


async def test_a_buffered_reject_settles_the_next_waiter_rejected(store: WaitingStore) -> None:
    await store.send_event(event(payload=None, reject="no"), now=NOW)
    [record] = await register(store, wait())
    assert (record.status, record.reason) == ("rejected", "no")


# -- resends ---------------------------------------------------------------------------


async def test_a_resend_with_the_same_id_is_a_duplicate_and_writes_nothing(
    store: WaitingStore,
) -> None:
    await register(store, wait("w1"), wait("w2"))
    await store.send_event(event("e1"), now=NOW + 1)
    before = await snapshot(store)
    again = await store.send_event(event("e1"), now=NOW + 2)
    assert again == SendResult("duplicate", "e1", "w1")
    assert await snapshot(store) == before  # w2 still waits: never delivered twice


async def test_a_resend_of_a_buffered_event_is_a_duplicate(store: WaitingStore) -> None:
    await store.send_event(event("e1"), now=NOW)
    assert (await store.send_event(event("e1"), now=NOW + 1)).outcome == "duplicate"
    assert len(await store.list_events("run-1")) == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"payload": '{"ok":false}'},
        {"key_json": '"lead-2"'},
        {"name": "other"},
        {"payload": None, "reject": "no"},
    ],
)
async def test_the_same_id_with_another_content_is_refused(
    store: WaitingStore, changed: dict[str, Any]
) -> None:
    await store.send_event(event("e1"), now=NOW)
    before = await snapshot(store)
    with pytest.raises(EventConflict, match="e1"):
        await store.send_event(event("e1", **changed), now=NOW + 1)
    assert await snapshot(store) == before


async def test_a_resend_to_a_completed_run_is_still_a_duplicate(store: WaitingStore) -> None:
    await register(store, wait())
    await store.send_event(event("e1"), now=NOW + 1)
    await store.finish_attempt("run-1", "completed", attempt=1, now=NOW + 2)
    assert (await store.send_event(event("e1"), now=NOW + 3)).outcome == "duplicate"


# -- deadlines ---------------------------------------------------------------------------


async def test_the_deadline_instant_itself_is_still_in_time(store: WaitingStore) -> None:
    deadline = NOW + HOUR
    await register(store, wait(deadline=deadline))
    assert (await one(store, "w1", now=deadline)).status == "waiting"
    result = await store.send_event(event(), now=deadline)
    assert result.outcome == "delivered"


async def test_just_past_the_deadline_the_wait_times_out_once(store: WaitingStore) -> None:
    deadline = NOW + HOUR
    await register(store, wait(deadline=deadline))
    after = math.nextafter(deadline, math.inf)
    record = await one(store, "w1", now=after)
    assert (record.status, record.settled_at, record.deadline) == ("timed_out", after, deadline)
    # Written once: a later poll or registration reads the same record.
    assert await one(store, "w1", now=after + HOUR) == record
    assert await register(store, wait(deadline=after + 2 * HOUR), now=after + HOUR) == [record]


async def test_an_event_past_a_waits_deadline_stays_buffered(store: WaitingStore) -> None:
    deadline = NOW + HOUR
    await register(store, wait(deadline=deadline))
    after = math.nextafter(deadline, math.inf)
    assert (await store.send_event(event(), now=after)).outcome == "buffered"
    assert (await one(store, "w1", now=after)).status == "timed_out"
    [unclaimed] = await store.list_events("run-1", unclaimed_only=True)
    assert unclaimed.event_id == "e1"


async def test_an_expired_wait_is_passed_over_for_a_younger_open_one(store: WaitingStore) -> None:
    await register(store, wait("w-old", deadline=NOW + 10))
    await register(store, wait("w-new", deadline=NOW + HOUR), now=NOW + 5)
    result = await store.send_event(event(), now=NOW + 20)
    assert result.wait_key == "w-new"


async def test_an_event_stamped_after_the_deadline_never_satisfies_a_late_registration(
    store: WaitingStore,
) -> None:
    # The wait registers after its deadline (a rerun long after): the event was sent
    # after that deadline, so it may not settle it.
    await store.send_event(event(), now=NOW + 20)
    [record] = await register(store, wait(deadline=NOW + 10), now=NOW + 30)
    assert record.status == "timed_out"
    assert len(await store.list_events("run-1", unclaimed_only=True)) == 1


async def test_an_event_sent_in_time_settles_a_wait_registered_after_its_deadline(
    store: WaitingStore,
) -> None:
    # Sent at the deadline instant, registered later: the event was in time.
    await store.send_event(event(), now=NOW + 10)
    [record] = await register(store, wait(deadline=NOW + 10), now=NOW + 30)
    assert (record.status, record.event_id) == ("delivered", "e1")


async def test_registering_past_the_deadline_with_no_event_times_out(store: WaitingStore) -> None:
    [record] = await register(store, wait(deadline=NOW - 1))
    assert (record.status, record.settled_at) == ("timed_out", NOW)


# -- tokens ------------------------------------------------------------------------------


async def test_an_event_addressed_by_token_reaches_the_waits_slot(store: WaitingStore) -> None:
    await register(store, wait(token="secret-token"))
    result = await store.send_event(event(token="secret-token"), now=NOW + 1)
    assert (result.outcome, result.wait_key) == ("delivered", "w1")
    [stored] = await store.list_events("run-1")
    assert (stored.name, stored.key_json) == ("approval", '"lead-1"')


@pytest.mark.parametrize("token", ["forged", "token-of-run-2"])
async def test_a_forged_or_foreign_token_is_refused_and_writes_nothing(
    store: WaitingStore, token: str
) -> None:
    await store.begin_attempt("run-2", "enrich", "{}", now=NOW)
    await register(store, wait("w9", run_id="run-2", token="token-of-run-2"))
    await register(store, wait())
    before = await snapshot(store), await snapshot(store, "run-2")
    with pytest.raises(InvalidWait, match="token"):
        await store.send_event(event(token=token), now=NOW + 1)
    assert (await snapshot(store), await snapshot(store, "run-2")) == before


# -- runs that take no events ----------------------------------------------------------------


async def test_an_event_for_an_unknown_run_names_the_run_and_the_store(store: WaitingStore) -> None:
    with pytest.raises(UnknownRun) as raised:
        await store.send_event(event(run_id="ghost"), now=NOW)
    assert "ghost" in str(raised.value)
    assert store.url.split("?")[0].split("@")[-1][:8] in str(raised.value)
    assert await snapshot(store, "ghost") == ([], [], None)


@pytest.mark.parametrize("status", ["completed", "cancelled"])
async def test_an_event_for_a_run_that_is_over_is_refused(store: WaitingStore, status: str) -> None:
    await register(store, wait())
    if status == "cancelled":
        await store.cancel_run("run-1", now=NOW + 1)
    else:
        await store.finish_attempt("run-1", "completed", attempt=1, now=NOW + 1)
    before = await snapshot(store)
    with pytest.raises(EventRefused, match=status):
        await store.send_event(event(), now=NOW + 2)
    assert await snapshot(store) == before


@pytest.mark.parametrize("status", ["waiting", "failed"])
async def test_a_waiting_or_failed_run_takes_events(store: WaitingStore, status: Any) -> None:
    await store.finish_attempt("run-1", status, attempt=1, now=NOW + 1)
    assert (await store.send_event(event(), now=NOW + 2)).outcome == "buffered"


async def test_cancel_run_cancels_open_waits_only(store: WaitingStore) -> None:
    await register(store, wait("w1"), wait("w2"), wait("w3", key_json='"other"'))
    await store.send_event(event(), now=NOW + 1)
    assert await store.cancel_run("run-1", now=NOW + 2) == 2
    statuses = {w.wait_key: (w.status, w.settled_at) for w in await store.list_waits("run-1")}
    assert statuses == {
        "w1": ("delivered", NOW + 1),
        "w2": ("cancelled", NOW + 2),
        "w3": ("cancelled", NOW + 2),
    }
    run = await store.get_run("run-1")
    assert run is not None
    assert run.status == "cancelled"
    assert await store.cancel_run("run-1", now=NOW + 3) == 0


async def test_cancel_of_an_unknown_run_fails_and_writes_nothing(store: WaitingStore) -> None:
    with pytest.raises(UnknownRun, match="ghost"):
        await store.cancel_run("ghost", now=NOW)
    assert await store.get_run("ghost") is None


# -- listings -----------------------------------------------------------------------------------


async def test_list_waits_oldest_first_and_list_events_in_send_order(store: WaitingStore) -> None:
    await register(store, wait("w3"), now=NOW)
    await register(store, wait("w2"), wait("w1"), now=NOW + 1)
    assert [w.wait_key for w in await store.list_waits("run-1")] == ["w3", "w1", "w2"]
    for event_id in ("z", "a", "m"):
        await store.send_event(event(event_id, key_json='"none"'), now=NOW + 2)
    assert [e.event_id for e in await store.list_events("run-1")] == ["z", "a", "m"]


# -- bad input is refused before any store sees it ----------------------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: wait(name=""), "name"),
        (lambda: wait(key_json="{oops"), "key_json"),
        (lambda: wait(deadline=math.nan), "deadline"),
        (lambda: wait(deadline=math.inf), "deadline"),
        (lambda: wait(""), "wait_key"),
        (lambda: event(name=""), "name"),
        (lambda: event(key_json="[1,"), "key_json"),
        (lambda: event(payload='{"a": }'), "payload_json"),
        (lambda: event(payload=None), "payload_json"),
        (lambda: event(payload=None, reject=""), "reject"),
        (lambda: event(reject="why"), "reject"),
        (lambda: event(""), "event_id"),
    ],
)
def test_bad_records_are_refused_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises(InvalidWait) as raised:
        build()
    assert raised.value.field == field
    assert str(raised.value).startswith(field)


def test_a_payload_that_is_not_json_names_line_and_column() -> None:
    with pytest.raises(InvalidWait, match=r"at line 2, column 8: Expecting value$"):
        event(payload='{\n  "a": ,}')


# -- runs: lineage and the end of a cancelled run ---------------------------------------------


async def test_a_root_run_is_its_own_root_and_records_its_play(store: WaitingStore) -> None:
    run = await store.begin_attempt("root", "enrich", "{}", now=NOW, play_ref="plays.py:enrich")
    assert (run.parent_run_id, run.root_run_id, run.depth, run.play_ref) == (
        None,
        "root",
        0,
        "plays.py:enrich",
    )
    assert await store.get_run("root") == run


async def test_a_child_run_records_its_parent_root_and_depth(store: WaitingStore) -> None:
    child = await store.begin_attempt("child", "sub", "{}", now=NOW, parent_run_id="run-1")
    grandchild = await store.begin_attempt("grand", "sub", "{}", now=NOW, parent_run_id="child")
    assert (child.parent_run_id, child.root_run_id, child.depth) == ("run-1", "run-1", 1)
    assert (grandchild.parent_run_id, grandchild.root_run_id, grandchild.depth) == (
        "child",
        "run-1",
        2,
    )
    assert await store.get_run("grand") == grandchild


async def test_a_later_attempt_keeps_the_lineage_and_the_play_ref(store: WaitingStore) -> None:
    await store.begin_attempt("child", "sub", "{}", now=NOW, parent_run_id="run-1", play_ref="a")
    again = await store.begin_attempt("child", "sub", "{}", now=NOW + 1)
    assert (again.attempt, again.parent_run_id, again.depth, again.play_ref) == (2, "run-1", 1, "a")
    moved = await store.begin_attempt("child", "sub", "{}", now=NOW + 2, play_ref="b")
    assert (moved.attempt, moved.play_ref) == (3, "b")
    assert await store.get_run("child") == moved


async def test_a_cancelled_run_does_not_begin_again(store: WaitingStore) -> None:
    await store.cancel_run("run-1", now=NOW + 1)
    cancelled = await store.get_run("run-1")
    again = await store.begin_attempt("run-1", "enrich", "{}", now=NOW + 2)
    assert again == cancelled
    assert again.status == "cancelled"
    assert await store.get_run("run-1") == cancelled
