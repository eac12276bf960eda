"""Receipts for tool and step: replay, force, stale_after, failures, waits, the latch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, finder_map, registry


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def call_once(
    store: MemoryStore, tools: trioplay.ToolRegistry, run_id: str = "r", **opts: Any
) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.tool("finder", {"domain": "a.example"}, **opts)

    wall = opts.pop("wall_clock", None)
    kw: dict[str, Any] = {"wall_clock": wall} if wall else {}
    async with trioplay.open_runtime(store=store, tools=tools, **kw) as rt:
        return await rt.run(play, {}, run_id=run_id)


async def test_completed_receipt_is_replayed_across_runs_without_the_provider() -> None:
    tool = CountingTool()
    store = MemoryStore()
    first = await call_once(store, registry(finder=tool), run_id="one")
    second = await call_once(store, registry(finder=tool), run_id="two")
    assert first == second == {"email": "info@a.example"}
    assert tool.calls == 1


async def test_force_calls_again_with_a_new_idempotency_key() -> None:
    tool = CountingTool()
    store = MemoryStore()
    await call_once(store, registry(finder=tool))
    await call_once(store, registry(finder=tool), force=True)
    assert tool.calls == 2
    assert tool.idempotency_keys[0] != tool.idempotency_keys[1]


async def test_idempotency_key_is_stable_for_one_receipt() -> None:
    tool = CountingTool(fail_on=set())
    flaky = {"n": 0}

    async def sometimes(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        flaky["n"] += 1
        tool.idempotency_keys.append(call.idempotency_key)
        if flaky["n"] == 1:
            raise trioplay.ProviderTransientError("network", "reset")
        return {"ok": call.attempt}

    store = MemoryStore()
    with pytest.raises(trioplay.ProviderTransientError):
        await call_once(store, registry(finder=sometimes))
    assert await call_once(store, registry(finder=sometimes)) == {"ok": 2}
    assert tool.idempotency_keys[0] == tool.idempotency_keys[1]


async def test_stale_after_refreshes_an_old_result() -> None:
    tool = CountingTool()
    store = MemoryStore()
    clock = Clock()
    await call_once(store, registry(finder=tool), wall_clock=clock, stale_after=60)
    clock.now += 30
    await call_once(store, registry(finder=tool), wall_clock=clock, stale_after=60)
    assert tool.calls == 1
    clock.now += 31
    await call_once(store, registry(finder=tool), wall_clock=clock, stale_after=60)
    assert tool.calls == 2


async def test_recorded_failure_is_raised_again_without_calling() -> None:
    tool = CountingTool(fail_on={"a.example"})
    store = MemoryStore()
    for _ in range(2):
        with pytest.raises(trioplay.ToolExecutionError, match="no such domain"):
            await call_once(store, registry(finder=tool))
    assert tool.calls == 1


async def test_a_tool_raising_anything_else_is_recorded_as_a_tool_execution_error() -> None:
    async def broken(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        raise KeyError("field")

    with pytest.raises(trioplay.ToolExecutionError, match="raised KeyError") as info:
        await call_once(MemoryStore(), registry(finder=broken))
    assert isinstance(info.value.__cause__, KeyError)


async def test_transient_failures_are_not_recorded() -> None:
    calls = {"n": 0}

    async def flaky(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        calls["n"] += 1
        raise trioplay.ProviderTransientError("rate_limit", "slow down", retry_after=0.01)

    store = MemoryStore()
    for _ in range(2):
        with pytest.raises(trioplay.ProviderTransientError) as info:
            await call_once(store, registry(finder=flaky))
        assert info.value.category == "rate_limit"
    assert calls["n"] == 2


async def test_tool_result_must_be_json() -> None:
    async def returns_a_set(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        return {1, 2}

    with pytest.raises(trioplay.ToolExecutionError, match="not JSON"):
        await call_once(MemoryStore(), registry(finder=returns_a_set))


async def test_tool_timeout_is_transient_and_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hangs(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep_forever()

    start = trio.current_time()
    with pytest.raises(trioplay.ToolTimeout, match="exceeded its timeout of 5s"):
        await call_once(MemoryStore(), registry(finder=hangs), timeout=5)
    assert trio.current_time() - start == pytest.approx(5, abs=0.05)


async def test_step_runs_once_per_run() -> None:
    store = MemoryStore()
    counter = {"n": 0}

    def started() -> int:
        counter["n"] += 1
        return 42

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.step("started", started)

    for _ in range(2):
        async with trioplay.open_runtime(store=store) as rt:
            assert await rt.run(play, {}, run_id="r") == 42
    assert counter["n"] == 1
    async with trioplay.open_runtime(store=store) as rt:
        assert await rt.run(play, {}, run_id="other") == 42
    assert counter["n"] == 2


async def test_receipt_held_by_a_live_owner_is_waited_on_then_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    clock = Clock()
    # Another live process holds the receipt for a long time.
    tool = CountingTool()
    await store.claim_many(
        [trioplay.ClaimRequest(key="k1", operation="tool", name="finder", run_id="x")],
        owner="elsewhere/1/1",
        lease_ttl=3600,
        now=clock(),
    )
    with pytest.raises(trioplay.ReceiptWaitTimeout):
        await call_once(store, registry(finder=tool), key="k1", receipt_wait=5, wall_clock=clock)
    assert tool.calls == 0


async def test_receipt_held_is_delivered_when_the_owner_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    clock = Clock()
    tool = CountingTool()
    (claim,) = await store.claim_many(
        [trioplay.ClaimRequest(key="k1", operation="tool", name="finder", run_id="x")],
        owner="elsewhere/1/1",
        lease_ttl=3600,
        now=clock(),
    )
    assert isinstance(claim, trioplay.Claimed)

    async def owner_finishes() -> None:
        await trio.sleep(2.5)
        await store.complete_many(
            [trioplay.Completion("k1", claim.lease_id, '{"email":"x"}')], now=clock()
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(owner_finishes)
        result = await call_once(store, registry(finder=tool), key="k1", wall_clock=clock)
    assert result == {"email": "x"}
    assert tool.calls == 0


async def test_expired_lease_is_reclaimed_after_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    clock = Clock()
    tool = CountingTool()
    await store.claim_many(
        [trioplay.ClaimRequest(key="k1", operation="tool", name="finder", run_id="x")],
        owner="elsewhere/1/1",
        lease_ttl=3,
        now=clock(),
    )

    async def time_passes() -> None:
        while True:
            await trio.sleep(1)
            clock.now += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(time_passes)
        result = await call_once(store, registry(finder=tool), key="k1", wall_clock=clock)
        nursery.cancel_scope.cancel()
    assert result == {"email": "info@a.example"}
    assert tool.calls == 1


async def test_lease_of_a_dead_local_process_is_taken_over_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import socket

    store = MemoryStore()
    tool = CountingTool()
    dead_owner = f"{socket.gethostname()}/999999999/1"
    await store.claim_many(
        [trioplay.ClaimRequest(key="k1", operation="tool", name="finder", run_id="x")],
        owner=dead_owner,
        lease_ttl=3600,
        now=Clock()(),
    )
    start = trio.current_time()
    assert await call_once(store, registry(finder=tool), key="k1", wall_clock=Clock()) == {
        "email": "info@a.example"
    }
    assert trio.current_time() - start < 0.5
    assert tool.calls == 1


class FailingCompletions(MemoryStore):
    async def complete_many(self, items: Any, *, now: float) -> list[bool]:
        raise trioplay.StoreError("memory://: complete_many: disk full")


async def test_persistence_latch_stops_further_provider_calls() -> None:
    tool = CountingTool()
    play = finder_map(500)

    with pytest.raises(trioplay.PersistenceLatchTripped, match="disk full"):
        async with trioplay.open_runtime(
            store=FailingCompletions(),
            tools=registry(finder=tool),
            limits=trioplay.Limits(max_concurrent_external_calls=4, max_concurrent_rows=8),
        ) as rt:
            await rt.run(play, {}, run_id="r")
    # Only calls admitted before the first failed completion ran.
    assert tool.calls <= 8


async def test_a_failed_completion_fails_the_run_even_with_no_later_call() -> None:
    # The run must not report success when the write of its one completion
    # failed.
    tool = CountingTool()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.tool("finder", {"domain": "a.example"})

    async with trioplay.open_runtime(store=FailingCompletions(), tools=registry(finder=tool)) as rt:
        with pytest.raises(trioplay.PersistenceLatchTripped, match="disk full"):
            await rt.run(play, {}, run_id="r")
        run = await rt.store.get_run("r")
    assert run is not None
    assert run.status == "failed"
    assert tool.calls == 1


async def test_a_call_whose_completion_cannot_be_recorded_gets_the_store_error() -> None:
    # Issue 11, point 1: the caller must not have a value its receipt does not
    # hold. It gets an error that is both a StoreError (the write failed) and
    # a PersistenceLatchTripped (the run stops calling providers).
    seen: list[BaseException] = []

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        try:
            return await ctx.tool("finder", {"domain": "a.example"})
        except trioplay.StoreError as exc:
            seen.append(exc)
            raise

    async with trioplay.open_runtime(
        store=FailingCompletions(), tools=registry(finder=CountingTool())
    ) as rt:
        with pytest.raises(trioplay.PersistenceLatchTripped, match="disk full"):
            await rt.run(play, {}, run_id="r")
    (error,) = seen
    assert isinstance(error, trioplay.PersistenceLatchTripped)
    assert "tool 'finder'" in str(error)
    assert "could not be recorded" in str(error)
    assert isinstance(error.__cause__, trioplay.StoreError)


async def test_a_row_whose_receipt_is_not_recorded_is_not_committed_as_completed() -> None:
    # Issue 11, point 1: every completion write fails, so no row may reach
    # the sheet as completed (a resume would skip it, its receipt "running").
    store = FailingCompletions()
    async with trioplay.open_runtime(store=store, tools=registry(finder=CountingTool())) as rt:
        with pytest.raises(trioplay.PersistenceLatchTripped):
            await rt.run(finder_map(20), {}, run_id="r")
    assert (await store.count_rows("r", "s")).get("completed", 0) == 0
    assert (await store.count_receipts("r")).get("completed", 0) == 0


class SlowCompletions(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.claims = 0

    async def claim_many(self, requests: Any, **kw: Any) -> Any:
        self.claims += len(requests)
        return await super().claim_many(requests, **kw)

    async def complete_many(self, items: Any, *, now: float) -> list[bool]:
        await trio.sleep(5.0)
        return await super().complete_many(items, now=now)


async def test_an_identical_call_while_the_receipt_is_written_follows_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The first call's receipt is still being written (5 s) when the second,
    # identical call comes: it follows the first instead of finding the
    # receipt leased and waiting receipt_wait_delay for it, and both have
    # their value when the write is done.
    tool = CountingTool()
    store = SlowCompletions()
    done: dict[str, float] = {}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def call(name: str) -> None:
            assert await ctx.tool("finder", {"domain": "a.example"}) == {"email": "info@a.example"}
            done[name] = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first")
            await trio.sleep(1)  # the tool has answered; its receipt is being written
            nursery.start_soon(call, "second")

    start = trio.current_time()
    async with trioplay.open_runtime(store=store, tools=registry(finder=tool)) as rt:
        await rt.run(play, {}, run_id="r")
        stats = rt.last_stats
    assert done["first"] == done["second"] == pytest.approx(start + 5.0)
    assert tool.calls == store.claims == 1
    assert stats is not None
    assert stats.followed == 1
    assert await store.count_receipts("r") == {"completed": 1}


class OrderedWrites(MemoryStore):
    """Checks at every sheet write that the rows' receipts are already completed."""

    def __init__(self) -> None:
        super().__init__()
        self.rows_written = 0
        self.violations = 0

    async def complete_many(self, items: Any, *, now: float) -> list[bool]:
        await trio.sleep(1.0)  # a slow completion write
        return await super().complete_many(items, now=now)

    async def write_terminal_rows(self, run_id: str, dataset: str, rows: Any, **kw: Any) -> Any:
        self.rows_written += len(rows)
        completed = (await self.count_receipts(run_id)).get("completed", 0)
        if completed < self.rows_written:
            self.violations += 1
        return await super().write_terminal_rows(run_id, dataset, rows, **kw)


async def test_a_row_commits_only_after_the_receipts_of_its_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A row must not reach the sheet before its receipts (the completion
    # writes are slow here): after a crash, a committed row is skipped, and
    # its receipts would stay "running" for good.
    store = OrderedWrites()
    async with trioplay.open_runtime(store=store, tools=registry(finder=CountingTool())) as rt:
        result = await rt.run(finder_map(300), {}, run_id="r")
    assert result.completed_count == 300
    assert store.rows_written == 300
    assert store.violations == 0


class Numbered:
    """A tool that answers with how many times it ran, so results tell executions apart."""

    def __init__(self) -> None:
        self.calls = 0
        self.idempotency_keys: list[str] = []

    async def __call__(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        self.calls += 1
        self.idempotency_keys.append(call.idempotency_key)
        return {"n": self.calls}


async def test_a_forced_call_does_not_follow_an_unforced_one_in_flight() -> None:
    # Issue 11, point 4: force=True made while an identical unforced call is
    # in flight must call again, not follow it to the cached value; calls
    # made after it follow the forced call and get its result.
    tool = Numbered()
    store = MemoryStore()
    await call_once(store, registry(finder=tool), key="k")  # the receipt holds {"n": 1}
    results: dict[str, Any] = {}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def one(name: str, force: bool) -> None:
            results[name] = await ctx.tool("finder", {"domain": "a.example"}, force=force, key="k")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "unforced", False)
            await trio.testing.wait_all_tasks_blocked()  # in flight, in the lane
            nursery.start_soon(one, "forced", True)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(one, "after", False)

    # A lane window keeps the calls in flight (queued in the lane) meanwhile.
    limits = trioplay.Limits(tool_batch_window=0.005)
    async with trioplay.open_runtime(store=store, tools=registry(finder=tool), limits=limits) as rt:
        await rt.run(play, {}, run_id="r2")
        stats = rt.last_stats
    assert tool.calls == 2
    assert results == {"unforced": {"n": 1}, "forced": {"n": 2}, "after": {"n": 2}}
    assert tool.idempotency_keys[0] != tool.idempotency_keys[1]
    assert stats is not None
    assert stats.followed == 1  # "after" followed the forced call
    (receipt,) = await store.get_many(["k"])
    assert receipt is not None
    assert receipt.result_json == '{"n":2}'


async def test_a_forced_call_waits_for_an_unforced_one_executing_then_calls_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The unforced call holds a live lease (ours) while its provider works:
    # the forced call never duplicates it, waits like any held receipt, and
    # then calls again.
    calls: list[float] = []

    async def slow(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        calls.append(trio.current_time())
        await trio.sleep(3)
        return {"n": len(calls)}

    results: dict[str, Any] = {}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def one(name: str, force: bool) -> None:
            results[name] = await ctx.tool("finder", {"domain": "a.example"}, force=force)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "unforced", False)
            await trio.sleep(1)  # the provider works
            nursery.start_soon(one, "forced", True)

    start = trio.current_time()
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry(finder=slow)) as rt:
        await rt.run(play, {}, run_id="r")
    assert results == {"unforced": {"n": 1}, "forced": {"n": 2}}
    assert len(calls) == 2
    assert calls[1] - start >= 3  # not before the unforced call was settled


async def test_a_context_kept_after_its_run_ended_raises_run_ended_at_once() -> None:
    # Issue 11, point 10: a context (or a resolver's row context) used after
    # its run ended hung, or raised a raw Trio error; it raises RunEnded at
    # once, and the store is not touched.
    kept: dict[str, Any] = {}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        kept["rc"] = rc
        return await rc.tool("finder", {"domain": row["domain"]})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        kept["ctx"] = ctx
        await ctx.tool("finder", {"domain": "a.example"})
        await ctx.step("s", lambda: 1)
        await ctx.dataset("d", [{"domain": "b.example"}]).with_column("x", resolver).run()

    async with trioplay.open_runtime(
        store=MemoryStore(), tools=registry(finder=CountingTool(), other=CountingTool())
    ) as rt:
        await rt.run(play, {}, run_id="r")
        ctx, rc = kept["ctx"], kept["rc"]
        late: list[Callable[[], Awaitable[Any]]] = [
            lambda: ctx.tool("finder", {"domain": "a.example"}),  # a lane the run used
            lambda: ctx.tool("finder", {"domain": "new.example"}),
            lambda: ctx.tool("other", {"domain": "a.example"}),  # a tool the run never called
            lambda: ctx.step("s2", lambda: 2),
            lambda: ctx.fetch("https://example.invalid/"),
            lambda: rc.tool("finder", {"domain": "c.example"}),
            lambda: rc.step("s3", lambda: 3),
            lambda: rc.fetch("https://example.invalid/"),
            lambda: ctx.dataset("d2", [{"domain": "d.example"}]).with_column("x", resolver).run(),
        ]
        receipts = await rt.store.count_receipts("r")
        for call in late:
            with trio.fail_after(1), pytest.raises(trioplay.RunEnded, match="run 'r' has ended"):
                await call()
        assert await rt.store.count_receipts("r") == receipts
        assert await rt.store.list_datasets("r") == ["d"]
    assert issubclass(trioplay.RunEnded, RuntimeError)
