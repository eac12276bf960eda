"""Waiting rows (issue 22, the engine side): a row or a play suspends on an outside event.

The store is the memory store; its own contract is tests/test_wait_contract.py.
The wall clock of every runtime here follows Trio's (mock) clock, so deadlines
and lingering run in virtual time.
"""

from __future__ import annotations

import math
import pathlib
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._map._report import MapCounts
from trioplay._trace import ListSink, Recorder
from trioplay.stores.memory import MemoryStore

EPOCH = 1_800_000_000.0  # the wall clock at Trio time 0


def wall() -> float:
    return EPOCH + trio.current_time()


class Clock:
    """A wall clock the test moves by hand (a restart later in the day)."""

    def __init__(self) -> None:
        self.now = EPOCH

    def __call__(self) -> float:
        return self.now


def _runtime(store: MemoryStore, **options: Any) -> Any:
    options.setdefault("wall_clock", wall)
    return trioplay.open_runtime(store=store, **options)


class Approvals:
    """A map of ``rows`` rows whose rows in ``waiting`` wait for an approval.

    Column ``before`` calls a tool (counted), ``approval`` waits for the
    event ``approval`` keyed by the row's id (rows not in ``waiting`` skip
    it), and the play then runs a step after the map (counted).
    """

    def __init__(
        self, rows: int, waiting: set[int], page_size: int = 4, **run_options: Any
    ) -> None:
        self.rows = [{"id": f"r{i}"} for i in range(rows)]
        self.waiting = {f"r{i}" for i in waiting}
        self.calls: Counter[str] = Counter()
        self.after = 0
        self.run_options = {"page_size": page_size, **run_options}
        self.result: trioplay.MapResult | None = None
        self.tools = trioplay.ToolRegistry()
        self.tools.add("enrich", self._enrich)

    async def _enrich(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        self.calls[input["id"]] += 1
        return {"score": len(input["id"])}

    async def play(self, ctx: trioplay.PlayContext, input: Any) -> Any:
        async def before(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return (await rc.tool("enrich", {"id": row["id"]}))["score"]

        async def approval(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            if row["id"] not in self.waiting:
                return None
            return await rc.wait_for_event("approval", key=row["id"], timeout=3600)

        self.result = await (
            ctx.dataset("leads", self.rows)
            .with_column("before", before)
            .with_column("approval", approval)
            .run(key="id", **self.run_options)
        )

        def after() -> int:
            self.after += 1
            return self.after

        await ctx.step("after", after)
        return self.result.completed_count


async def _rows(store: MemoryStore, run_id: str) -> dict[str, dict[str, Any]]:
    rows = await store.read_rows(run_id, "leads", limit=10_000)
    return {
        row.key: {"status": row.status, "data": trioplay._json.loads(row.data_json)} for row in rows
    }


class CountingStore(MemoryStore):
    """A memory store that counts its wait registrations and polls."""

    def __init__(self) -> None:
        super().__init__()
        self.registers = 0
        self.registered = 0
        self.polls: list[int] = []

    async def register_waits(self, requests: Any, *, now: float) -> Any:
        self.registers += 1
        self.registered += len(requests)
        return await super().register_waits(requests, now=now)

    async def poll_waits(self, wait_keys: Any, *, now: float) -> Any:
        self.polls.append(len(wait_keys))
        return await super().poll_waits(wait_keys, now=now)


# -- a map with waiting rows ---------------------------------------------------------
async def test_waiting_rows_stop_the_run_then_resume_with_their_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    plays = Approvals(1000, {2, 500, 997}, page_size=100)  # acceptance 1: 1,000 rows, 3 wait
    recorder = Recorder(sink := ListSink())
    async with _runtime(store, tools=plays.tools, recorder=recorder) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(plays.play, run_id="r")
        waiting = caught.value
        assert waiting.run_id == "r"
        assert sorted(w.row_key for w in waiting.waits) == ["r2", "r500", "r997"]
        assert waiting.next_deadline == min(w.deadline for w in waiting.waits)
        assert all(w.status == "waiting" for w in waiting.waits)
        assert plays.after == 0  # nothing after the map ran on a partial result
        assert (await store.get_run("r")).status == "waiting"  # type: ignore[union-attr]
        rows = await _rows(store, "r")
        assert len(rows) == 997
        assert not {"r2", "r500", "r997"} & set(rows)
        assert plays.result is None  # the map stopped the play instead of returning
        recorder.flush()
        records = [event for event in sink.events if event.TYPE == "row.waiting"]
        assert sorted(event.row for event in records) == ["r2", "r500", "r997"]  # type: ignore[attr-defined]
        finished = [e for e in sink.events if e.TYPE == "map.finished"]
        assert [(e.status, e.completed, e.waiting) for e in finished] == [("waiting", 997, 3)]  # type: ignore[attr-defined]
        assert not [e for e in sink.events if e.TYPE == "map.stall"]
        assert store.registers <= 3  # the three waits went to the store in one call or a few

        for i in (2, 500, 997):
            sent = await rt.send_event("r", "approval", f"r{i}", data={"ok": i})
            assert (sent.outcome, sent.dataset, sent.row_key) == ("delivered", "leads", f"r{i}")
        calls_before = sum(plays.calls.values())
        assert await rt.run(plays.play, run_id="r") == 3
        assert sum(plays.calls.values()) == calls_before  # replayed: 0 provider calls
        assert rt.last_stats is not None
        assert rt.last_stats.provider_calls == 0
        rows = await _rows(store, "r")
        assert [rows[f"r{i}"]["data"]["approval"] for i in (2, 500, 997)] == [
            {"ok": 2},
            {"ok": 500},
            {"ok": 997},
        ]
        assert plays.after == 1
        assert (await store.get_run("r")).status == "completed"  # type: ignore[union-attr]
        # A second resume changes nothing.
        assert await rt.run(plays.play, run_id="r") == 0
        assert await _rows(store, "r") == rows
        assert plays.after == 1


async def test_on_waiting_return_hands_the_play_its_result_and_the_run_still_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    plays = Approvals(6, {1, 4}, on_waiting="return")
    async with _runtime(store, tools=plays.tools) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(plays.play, run_id="r")
    result = plays.result
    assert result is not None
    assert (result.completed_count, result.waiting_count) == (4, 2)
    assert [(w.row_key, w.position, w.name, w.key_json) for w in result.waiting] == [
        ("r1", 1, "approval", '"r1"'),
        ("r4", 4, "approval", '"r4"'),
    ] or sorted(w.row_key for w in result.waiting) == ["r1", "r4"]
    assert all(w.deadline == pytest.approx(EPOCH + 3600, abs=5) for w in result.waiting)
    assert plays.after == 1  # the play went on
    assert len(caught.value.waits) == 2


async def test_no_stall_line_for_a_page_whose_only_unsettled_rows_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stalls: list[Any] = []
    store = MemoryStore()
    plays = Approvals(4, {0, 1, 2, 3})

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.stall":
            stalls.append(event)

    limits = trioplay.Limits(stall_log_interval=1.0)
    async with _runtime(store, tools=plays.tools, limits=limits, on_event=on_event) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(plays.play, run_id="r")
        await trio.sleep(10)
    assert stalls == []


async def test_except_exception_in_a_resolver_does_not_swallow_the_suspension(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def careless(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        try:
            return await rc.wait_for_event("e", key=row["k"], timeout=60)
        except Exception:
            return "swallowed"

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("d", [{"k": 1}]).with_column("v", careless).run(key="k")

    store = MemoryStore()
    async with _runtime(store) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(play, run_id="r")
    assert await store.read_rows("r", "d") == []


# -- delivery ------------------------------------------------------------------------
async def test_an_event_sent_before_its_waiter_registers_is_delivered_in_the_same_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await _event_before_its_waiter(MemoryStore())


async def test_an_event_sent_before_its_waiter_registers_on_sqlite(tmp_path: pathlib.Path) -> None:
    # On the real clock: SQLite answers from its thread, which a mock clock would outrun.
    await _event_before_its_waiter(f"sqlite:///{tmp_path / 'waits.db'}")


async def _event_before_its_waiter(store: Any) -> None:
    sent, running = trio.Event(), trio.Event()

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        running.set()
        await sent.wait()  # the run is running; the wait is not registered yet
        return await rc.wait_for_event("callback", key=row["k"], timeout=60)

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        result = await ctx.dataset("d", [{"k": "a"}]).with_column("v", resolver).run(key="k")
        return result.completed_count

    async with trioplay.open_runtime(store=store) as rt:
        async with trio.open_nursery() as nursery:
            outputs: list[Any] = []

            async def run() -> None:
                outputs.append(await rt.run(play, run_id="r"))

            nursery.start_soon(run)
            await running.wait()
            result = await rt.send_event("r", "callback", "a", data=[1, 2])
            assert result.outcome == "buffered"
            sent.set()
        assert outputs == [1]
        [row] = await rt.store.read_rows("r", "d")
        assert trioplay._json.loads(row.data_json)["v"] == [1, 2]
        [wait] = await rt.store.list_waits("r")
        assert (wait.status, wait.payload_json) == ("delivered", "[1,2]")


async def test_two_waits_on_one_name_and_key_in_a_row_are_two_occurrences(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def twice(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        first = await rc.wait_for_event("step", key=1, timeout=60)
        second = await rc.wait_for_event("step", key=1, timeout=60)
        return [first, second]

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (await ctx.dataset("d", [{"k": 1}]).with_column("v", twice).run()).completed_count

    store = MemoryStore()
    async with _runtime(store) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(play, run_id="r")  # the row waits on its first wait
        # FIFO: the first wait gets the first event, the second one is kept for the next.
        assert (await rt.send_event("r", "step", 1, data="one")).outcome == "delivered"
        assert (await rt.send_event("r", "step", 1, data="two")).outcome == "buffered"
        with pytest.raises(trioplay.UnknownRun):
            await rt.send_event("nope", "step", 1, data=0)
        assert await rt.run(play, run_id="r") == 1
    [row] = await store.read_rows("r", "d")
    assert trioplay._json.loads(row.data_json)["v"] == ["one", "two"]
    waits = await store.list_waits("r")
    assert len({w.wait_key for w in waits}) == 2


async def test_a_play_level_wait_and_a_token_handle(autojump_clock: trio.testing.MockClock) -> None:
    tokens: list[str] = []

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        handle = await ctx.event_wait("signed", key={"doc": 7}, timeout=600)
        tokens.append(handle.token)
        return await handle

    store = MemoryStore()
    async with _runtime(store) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(play, run_id="r")
        [wait] = caught.value.waits
        assert (wait.dataset, wait.row_key, wait.name, wait.key_json) == (
            None,
            None,
            "signed",
            '{"doc":7}',
        )
        result = await rt.send_event("r", token=tokens[0], data="yes")
        assert result.outcome == "delivered"
        assert await rt.run(play, run_id="r") == "yes"
    assert tokens[0] == tokens[1]  # the token is written once: the same on a rerun
    assert len(tokens[0]) >= 32


async def test_a_rejected_event_fails_the_row_with_event_rejected(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    plays = Approvals(2, {0})
    async with _runtime(store, tools=plays.tools) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(plays.play, run_id="r")
        await rt.send_event("r", "approval", "r0", reject="not this one")
        assert await rt.run(plays.play, run_id="r") == 0
    rows = await store.read_rows("r", "leads", status="failed")
    assert [row.key for row in rows] == ["r0"]
    assert "EventRejected" in (rows[0].error or "")
    assert "not this one" in (rows[0].error or "")


# -- the deadline is written once -------------------------------------------------------
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("default", [trioplay._waits.MISSING, "fallback"])
async def test_a_restart_does_not_move_the_deadline(
    default: Any, kind: str, tmp_path: pathlib.Path
) -> None:
    clock = Clock()

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.wait_for_event("e", key=row["k"], timeout=3600, default=default)

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (await ctx.dataset("d", [{"k": 1}]).with_column("v", resolver).run()).failed_count

    memory = MemoryStore()

    def store() -> Any:  # each attempt a new process: a new runtime over the same store
        return memory if kind == "memory" else f"sqlite:///{tmp_path / 'waits.db'}"

    async with _runtime(store(), wall_clock=clock) as rt:
        with pytest.raises(trioplay.RunWaiting) as first:
            await rt.run(play, run_id="r")
    clock.now += 30 * 60  # killed, restarted half an hour later
    async with _runtime(store(), wall_clock=clock) as rt:
        with pytest.raises(trioplay.RunWaiting) as second:
            await rt.run(play, run_id="r")
    assert first.value.next_deadline == second.value.next_deadline == EPOCH + 3600
    clock.now = EPOCH + 61 * 60
    async with _runtime(store(), wall_clock=clock) as rt:
        failed = await rt.run(play, run_id="r")
        [row] = await rt.store.read_rows("r", "d")
        [wait] = await rt.store.list_waits("r")
    assert (wait.status, wait.deadline) == ("timed_out", EPOCH + 3600)
    if default is trioplay._waits.MISSING:
        assert failed == 1
        assert "EventWaitTimeout" in (row.error or "")
    else:
        assert failed == 0
        assert trioplay._json.loads(row.data_json)["v"] == "fallback"


# -- bad input writes nothing ------------------------------------------------------------
BAD_WAITS = [
    ({}, "timeout"),  # no bound
    ({"timeout": math.nan}, "timeout"),
    ({"timeout": math.inf}, "timeout"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": -5}, "timeout"),
    ({"timeout": 31 * 24 * 3600}, "timeout"),  # past Limits.max_event_wait
    ({"timeout": "10"}, "timeout"),
    ({"deadline": EPOCH + 40 * 24 * 3600}, "deadline"),
    ({"timeout": 5, "deadline": EPOCH + 5}, "deadline"),
    ({"timeout": 5, "name": ""}, "name"),
    ({"timeout": 5, "key": {1, 2}}, "key"),
    ({"timeout": 5, "key": math.nan}, "key"),
    ({"timeout": 5, "linger": 0}, "linger"),
    ({"timeout": 5, "linger": 3600}, "linger"),
]


@pytest.mark.parametrize(("options", "field"), BAD_WAITS)
async def test_a_bad_wait_fails_its_row_naming_the_field_and_writes_nothing(
    options: dict[str, Any], field: str
) -> None:
    arguments = {"name": "e", **options}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.wait_for_event(**arguments)

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (await ctx.dataset("d", [{"k": 1}]).with_column("v", resolver).run()).failed_count

    async def at_play_level(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.wait_for_event(**arguments)

    store = MemoryStore()
    async with _runtime(store, wall_clock=Clock()) as rt:
        assert await rt.run(play, run_id="r") == 1
        with pytest.raises(trioplay.InvalidWait) as caught:
            await rt.run(at_play_level, run_id="p")
    assert caught.value.field == field
    [row] = await store.read_rows("r", "d")
    assert f"InvalidWait: {field} " in (row.error or "")
    assert await store.list_waits("r") == []
    assert await store.list_waits("p") == []


BAD_EVENTS = [
    ({"name": "", "key": 1, "data": 1}, "name"),
    ({"name": "e", "key": {1}, "data": 1}, "key"),
    ({"name": "e", "key": 1, "data": math.nan}, "data"),
    ({"name": "e", "key": 1, "data": object()}, "data"),
    ({"name": "e", "key": 1}, "data"),  # neither data nor reject
    ({"name": "e", "key": 1, "data": 1, "reject": "no"}, "reject"),
    ({"name": "e", "key": 1, "data": "x" * 2_000_000}, "data"),  # over 1 MiB
    ({"token": "", "data": 1}, "token"),
    ({"token": "t", "name": "e", "data": 1}, "token"),
    ({"name": "e", "key": 1, "data": 1, "event_id": ""}, "event_id"),
]


@pytest.mark.parametrize(("options", "field"), BAD_EVENTS)
async def test_a_bad_event_is_refused_naming_the_field_and_writes_nothing(
    options: dict[str, Any], field: str
) -> None:
    store = MemoryStore()
    async with _runtime(store, wall_clock=Clock()) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(_waits_once, run_id="r")
        before = (await store.list_waits("r"), await store.list_events("r"))
        with pytest.raises(trioplay.InvalidWait) as caught:
            await rt.send_event("r", **options)
        assert (await store.list_waits("r"), await store.list_events("r")) == before
    assert caught.value.field == field
    with pytest.raises(trioplay.InvalidWait):  # the plain function: before opening the store
        trioplay.send_event("sqlite:///nonexistent/dir/x.db", "r", **options)


async def test_a_forged_token_and_an_event_for_a_completed_run_are_refused_writing_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    async with _runtime(store) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(_waits_once, run_id="r")
        before = (await store.list_waits("r"), await store.list_events("r"))
        with pytest.raises(trioplay.InvalidWait) as caught:
            await rt.send_event("r", token="not-a-token", data=1)
        assert caught.value.field == "token"
        assert (await store.list_waits("r"), await store.list_events("r")) == before
        await rt.send_event("r", "e", 1, data="done")
        assert await rt.run(_waits_once, run_id="r") == "done"
        before = (await store.list_waits("r"), await store.list_events("r"))
        with pytest.raises(trioplay.EventRefused, match="completed"):
            await rt.send_event("r", "e", 1, data="late")
        assert (await store.list_waits("r"), await store.list_events("r")) == before


async def _waits_once(ctx: trioplay.PlayContext, _input: Any) -> Any:
    return await ctx.wait_for_event("e", key=1, timeout=60)


# -- lingering -----------------------------------------------------------------------
async def test_a_lingering_row_takes_an_event_that_comes_back_in_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.wait_for_event("cb", key=row["k"], timeout=600, linger=30)

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"k": i} for i in range(20)]
        return (
            await ctx.dataset("d", rows).with_column("v", resolver).run(key="k")
        ).completed_count

    store = CountingStore()
    polls = store.polls
    limits = trioplay.Limits(max_concurrent_rows=4, event_poll_interval=1.0)
    async with _runtime(store, limits=limits) as rt:
        async with trio.open_nursery() as nursery:
            outputs: list[Any] = []

            async def run() -> None:
                outputs.append(await rt.run(play, run_id="r"))

            nursery.start_soon(run)
            await trio.sleep(5)  # 20 rows linger with 4 row slots: their slots were released
            for i in range(20):
                await rt.send_event("r", "cb", i, data=i * 10)
    assert outputs == [20]
    rows = await store.read_rows("r", "d")
    assert [trioplay._json.loads(row.data_json)["v"] for row in rows] == [i * 10 for i in range(20)]
    assert polls
    assert max(polls) == 20
    assert len(polls) <= 10  # one call per interval, not one per row


async def test_a_thousand_suspending_rows_register_in_a_few_store_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    plays = Approvals(1000, set(range(1000)), page_size=250)
    async with _runtime(store, tools=plays.tools) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(plays.play, run_id="r")
    assert len(caught.value.waits) == store.registered == 1000
    # Group commit: the waits made while a registration is out go together.
    assert store.registers <= 1000 // 50, store.registers


def test_map_counts_carry_waiting_last() -> None:
    assert MapCounts(1, 2, 3, 4, 5)._asdict()["waiting"] == 0


@pytest.mark.deadline(3600)  # virtual seconds: the reruns linger 300 s
async def test_a_cancelled_run_with_lingering_waits_leaves_nothing_and_keeps_its_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from .test_cancellation import runtime_tasks

    plays = Approvals(6, {0, 1, 2, 3, 4, 5})

    async def lingering(ctx: trioplay.PlayContext, input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            await rc.tool("enrich", {"id": row["id"]})
            return await rc.wait_for_event("approval", key=row["id"], timeout=3600, linger=300)

        result = await ctx.dataset("leads", plays.rows).with_column("v", resolver).run(key="id")
        return result.completed_count

    store = MemoryStore()
    limits = trioplay.Limits(max_concurrent_rows=2)
    async with _runtime(store, tools=plays.tools, limits=limits) as rt:
        before = runtime_tasks()
        with trio.move_on_after(30) as scope:  # as Ctrl-C does (docs/durability.md)
            await rt.run(lingering, run_id="r")
        assert scope.cancelled_caught
        assert runtime_tasks() == before  # no task left
        assert rt.row_limiter.total_tokens == 2  # every lent slot taken back
        assert "running" not in await store.count_receipts("r")
        waits = await store.list_waits("r")
        assert sorted(w.row_key for w in waits) == [f"r{i}" for i in range(6)]
        assert {w.status for w in waits} == {"waiting"}
        assert (await store.get_run("r")).status == "cancelled"  # type: ignore[union-attr]
        # A rerun finds the same waits (and no new ones); events sent then complete rows.
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(lingering, run_id="r")
        assert len(caught.value.waits) == 6
        assert {w.wait_key for w in await store.list_waits("r")} == {w.wait_key for w in waits}
        for i in range(3):
            await rt.send_event("r", "approval", f"r{i}", data=i)
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(lingering, run_id="r")
        assert sorted(w.row_key for w in caught.value.waits) == ["r3", "r4", "r5"]
        # Cancelling the run makes them final: a rerun fails those rows.
        assert await store.cancel_run("r", now=wall()) == 3
        with pytest.raises(trioplay.EventRefused):
            await rt.send_event("r", "approval", "r3", data=3)
        assert await rt.run(lingering, run_id="r") == 0
    failed = await store.read_rows("r", "leads", status="failed")
    assert [row.key for row in failed] == ["r3", "r4", "r5"]
    assert all("EventRefused" in (row.error or "") for row in failed)


async def test_the_timeline_and_the_chrome_trace_show_waiting_rows_as_their_own_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import io
    import json

    from trioplay._pictures._timeline import render_timeline
    from trioplay._trace import ChromeTraceSink

    text = io.StringIO()
    recorder = Recorder(kept := ListSink(), ChromeTraceSink(text))
    plays = Approvals(4, {1, 2})
    async with _runtime(MemoryStore(), tools=plays.tools, recorder=recorder) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(plays.play, run_id="r")
    recorder.close()
    slices = [e for e in json.loads(text.getvalue())["traceEvents"] if e.get("name") == "waiting"]
    assert len(slices) == 2
    assert ">waiting<" in render_timeline(kept.events)  # in the legend
    # A run where no row waited draws no such state.
    recorder = Recorder(other := ListSink())
    plays = Approvals(3, set())
    async with _runtime(MemoryStore(), tools=plays.tools, recorder=recorder) as rt:
        await rt.run(plays.play, run_id="r")
    recorder.close()
    assert ">waiting<" not in render_timeline(other.events)


async def test_two_maps_of_one_play_side_by_side_stop_it_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def waits(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.wait_for_event("e", key=row["k"], timeout=60)

    async def slow(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        await trio.sleep(30)
        return 1

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async with trio.open_nursery() as nursery:  # the play's own nursery
            nursery.start_soon(ctx.dataset("a", [{"k": 1}]).with_column("v", waits).run)
            nursery.start_soon(ctx.dataset("b", [{"k": 2}]).with_column("v", slow).run)
        return "never"

    async with _runtime(MemoryStore()) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(play, run_id="r")
    assert [w.dataset for w in caught.value.waits] == ["a"]


async def test_a_context_kept_past_its_run_cannot_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept: list[trioplay.PlayContext] = []

    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        kept.append(ctx)
        return 1

    async with _runtime(MemoryStore()) as rt:
        await rt.run(play, run_id="r")
        with pytest.raises(trioplay.RunEnded):
            await kept[0].wait_for_event("e", timeout=5)


async def test_listeners_hear_the_waiting_map_and_the_sent_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    heard: list[trioplay.RuntimeEvent] = []
    plays = Approvals(3, {1})
    async with _runtime(MemoryStore(), tools=plays.tools, on_event=heard.append) as rt:
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(plays.play, run_id="r")
        await rt.send_event("r", "approval", "r1", data=1, event_id="e1")
    finished = [e.data for e in heard if e.type == "map.finished"]
    assert [(d["completed"], d["waiting"]) for d in finished] == [(2, 1)]
    [run] = [e.data for e in heard if e.type == "run.finished"]
    assert run["status"] == "waiting"
    [sent] = [e for e in heard if e.type == "event.sent"]
    assert sent.run_id == "r"
    assert sent.data == {
        "name": "approval",
        "key": '"r1"',
        "event_id": "e1",
        "outcome": "delivered",
        "dataset": "leads",
        "row": "r1",
    }
