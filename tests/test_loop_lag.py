"""The loop-lag watchdog: a resolver that blocks the event loop is named as the cause."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .test_stall import stall_lines


def _play(resolver: Any, rows: int = 1) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        source = [{"id": f"r{i}"} for i in range(rows)]
        return await ctx.dataset("s", source).with_column("x", resolver).run(key="id")

    return play


@pytest.mark.deadline(600)
async def test_a_blocked_loop_is_an_event_and_the_stall_lines_cause(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Virtual time: the resolver "computes" 5 s (the clock jumps while no
    # other task runs), then waits 200 s. The watchdog, asleep until 0.25 s,
    # wakes at 5 s: 4.75 s late. The first stall line (60 s) names the loop;
    # the next one (120 s) no longer does, the lag being older than its interval.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")
    events: list[trioplay.RuntimeEvent] = []

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        autojump_clock.jump(5)
        await trio.sleep(200)
        return 1

    async with trioplay.open_runtime(store=MemoryStore(), on_event=events.append) as rt:
        result = await rt.run(_play(resolver), {}, run_id="r")
    assert result.completed_count == 1
    lags = [e for e in events if e.type == "loop.lag"]
    assert [(e.at, e.data) for e in lags] == [(5.0, {"lag_ms": 4750, "threshold_ms": 500})]
    lines = [line for _, line in stall_lines(caplog)]
    assert [(line["oldest_phase"], line["loop_lag_ms"]) for line in lines] == [
        ("loop", 4750),
        ("resolver", 0),
        ("resolver", 0),
    ]
    assert (lines[0]["oldest_tool"], lines[0]["oldest_row_key"]) == (None, None)
    assert lines[1]["oldest_row_key"] == "r0"


@pytest.mark.deadline(60)
async def test_a_lag_under_the_threshold_says_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[trioplay.RuntimeEvent] = []

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        autojump_clock.jump(0.4)
        await trio.sleep(1)
        return 1

    async with trioplay.open_runtime(store=MemoryStore(), on_event=events.append) as rt:
        await rt.run(_play(resolver), {}, run_id="r")
        assert [e for e in events if e.type == "loop.lag"] == []
        # Three rows computing 0.4 s each in one turn of the loop block it for 1.2 s.
        await rt.run(_play(resolver, rows=3), {}, run_id="r3")
    [lag] = [e for e in events if e.type == "loop.lag"]
    assert lag.data["lag_ms"] > 500


@pytest.mark.deadline(30)
async def test_a_resolver_blocking_the_real_loop_is_seen() -> None:
    # The system clock: a resolver that blocks for 0.3 s of real time (no
    # await). The watchdog sleeps 0.05 s at a time, so it wakes at least
    # 0.25 s late; a loaded machine only makes it later.
    events: list[trioplay.RuntimeEvent] = []

    def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        time.sleep(0.3)  # the point of the test: a blocking resolver
        return 1

    async with trioplay.open_runtime(
        store=MemoryStore(),
        on_event=events.append,
        limits=trioplay.Limits(loop_lag_threshold=0.1),
    ) as rt:
        await rt.run(_play(resolver), {}, run_id="r")
    # A busy machine may lag the loop past 0.1 s elsewhere too: the blocking
    # resolver's lag is the one of at least 0.25 s.
    lags = [e for e in events if e.type == "loop.lag"]
    assert max(lag.data["lag_ms"] for lag in lags) >= 250, lags
    assert {lag.data["threshold_ms"] for lag in lags} == {100}


async def test_the_watchdog_is_gone_with_its_run(autojump_clock: trio.testing.MockClock) -> None:
    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        return 1

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        before = len(trio.lowlevel.current_task().parent_nursery.child_tasks)  # type: ignore[union-attr]
        await rt.run(_play(resolver), {}, run_id="r")
        start = trio.current_time()
        await trio.sleep(10)
        # Nothing of the run woke the clock in between: one jump, straight to 10 s.
        assert trio.current_time() == start + 10
        after = len(trio.lowlevel.current_task().parent_nursery.child_tasks)  # type: ignore[union-attr]
    assert before == after


async def test_a_lag_the_watchdog_has_not_yet_measured_counts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Coming back from a block, a stall observer may run before the
    # watchdog in the same turn of the loop: the watchdog is overdue then.
    from trioplay._loop_lag import LoopWatch

    watch = LoopWatch(0.5)  # nobody listens
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        # The loop is idle: the watchdog sleeps until this task's deadline
        # (0.1 s), then watches until 0.35 s; the checkpoint lets it start.
        await trio.sleep(0.1)
        await trio.lowlevel.checkpoint()
        start = trio.current_time()
        autojump_clock.jump(10)
        assert watch.lag_since(start) == pytest.approx(9.75)
        await trio.testing.wait_all_tasks_blocked()
        assert watch.lag_since(start) == pytest.approx(9.75)  # now measured
        assert watch.lag_since(trio.current_time() + 1) == 0
        nursery.cancel_scope.cancel()


@pytest.mark.deadline(600)
async def test_a_blocked_loop_is_a_recorded_event_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The typed stream carries what on_event does: a loop.lag record, and the
    # stall line naming the loop.
    from trioplay._trace import ListSink, Recorder
    from trioplay._trace import _records as r

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        autojump_clock.jump(5)
        await trio.sleep(100)
        return 1

    kept = ListSink()
    recorder = Recorder(kept)
    async with trioplay.open_runtime(store=MemoryStore(), recorder=recorder) as rt:
        await rt.run(_play(resolver), {}, run_id="r")
    recorder.close()
    lags = [e for e in kept.events if isinstance(e, r.LoopLag)]
    assert lags == [r.LoopLag(at=5.0, lag_ms=4750.0, threshold_ms=500.0, run="r")]
    [stall, *_] = [e for e in kept.events if isinstance(e, r.MapStall)]
    assert (stall.phase, stall.report["loop_lag_ms"]) == ("loop", 4750)
