"""Tool lanes: group commit (the default), the window, early flushes, native batch tools."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore


class ClaimLog(MemoryStore):
    """Records when each claim batch reached the store, and its size."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[tuple[float, int]] = []

    async def claim_many(self, requests: Any, **kw: Any) -> Any:
        self.claims.append((round(trio.current_time(), 6), len(requests)))
        return await super().claim_many(requests, **kw)


async def echo(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
    return input


def tools() -> trioplay.ToolRegistry:
    registry = trioplay.ToolRegistry()
    registry.add("echo", echo)
    return registry


async def run_calls(
    store: ClaimLog, arrivals: list[tuple[float, dict[str, Any]]], **limits: Any
) -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> None:
        async def one(at: float, payload: dict[str, Any]) -> None:
            await trio.sleep_until(start + at)
            assert await ctx.tool("echo", payload) == payload

        async with trio.open_nursery() as nursery:
            for at, payload in arrivals:
                nursery.start_soon(one, at, payload)

    start = trio.current_time()
    async with trioplay.open_runtime(
        store=store, tools=tools(), limits=trioplay.Limits(**limits)
    ) as rt:
        await rt.run(play, {}, run_id="r")
    store.claims[:] = [(round(at - start, 6), n) for at, n in store.claims]


async def test_the_window_starts_with_the_first_call_and_never_resets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ClaimLog()
    arrivals = [(0.0, {"i": 0}), (0.003, {"i": 1}), (0.0049, {"i": 2}), (0.006, {"i": 3})]
    await run_calls(store, arrivals, tool_batch_window=0.005)
    assert store.claims == [(0.005, 3), (0.011, 1)]


async def test_a_batch_flushes_early_at_tool_batch_max(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ClaimLog()
    arrivals = [(0.0, {"i": i}) for i in range(250)]
    await run_calls(store, arrivals, tool_batch_max=100, tool_batch_window=0.005)
    assert store.claims == [(0.0, 100), (0.0, 100), (0.005, 50)]


async def test_a_batch_flushes_early_at_the_byte_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ClaimLog()
    payload = "x" * 90  # each input is ~100 bytes of canonical JSON
    arrivals = [(0.001 * i, {"i": i, "p": payload}) for i in range(4)]
    await run_calls(store, arrivals, tool_batch_max_bytes=250, tool_batch_window=0.005)
    # The third call would take the batch past 250 bytes: the first two go at
    # once, and the rest starts a window of its own.
    assert store.claims == [(0.002, 2), (0.007, 2)]


class SlowClaims(ClaimLog):
    """Each claim takes 10 ms (of the test's clock), as a store's round trip does."""

    async def claim_many(self, requests: Any, **kw: Any) -> Any:
        self.claims.append((round(trio.current_time(), 6), len(requests)))
        await trio.sleep(0.01)
        return await MemoryStore.claim_many(self, requests, **kw)


async def test_by_default_an_idle_lane_claims_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = ClaimLog()
    await run_calls(store, [(0.0, {"i": 0}), (1.0, {"i": 1})])
    assert store.claims == [(0.0, 1), (1.0, 1)]


async def test_by_default_calls_made_while_a_claim_is_out_are_the_next_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Group commit: batching grows with load, and a lone call waits for nothing."""
    store = SlowClaims()
    arrivals = [(0.0, {"i": 0})] + [(0.001 * i, {"i": i}) for i in range(1, 8)]
    arrivals += [(0.015, {"i": 8}), (0.05, {"i": 9})]
    await run_calls(store, arrivals)
    # Calls 1 to 7 arrived while call 0 was being claimed, call 8 while they were.
    assert store.claims == [(0.0, 1), (0.01, 7), (0.02, 1), (0.05, 1)]


async def test_by_default_a_batch_is_still_capped_at_tool_batch_max(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = SlowClaims()
    await run_calls(store, [(0.0, {"i": i}) for i in range(250)], tool_batch_max=100)
    assert store.claims == [(0.0, 100), (0.01, 100), (0.02, 50)]


class BatchProvider:
    """A native batch tool: counts provider requests, fails members named "bad"."""

    def __init__(self) -> None:
        self.requests: list[int] = []

    async def single(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        raise AssertionError("the lane must use the batch operation")

    async def batch(
        self, inputs: list[dict[str, Any]], calls: list[trioplay.ToolCall]
    ) -> list[Any]:
        self.requests.append(len(inputs))
        await trio.sleep(0.05)
        return [
            trioplay.ToolExecutionError("rejected")
            if item["id"].startswith("bad")
            else {"n": item["id"]}
            for item in inputs
        ]


@pytest.mark.parametrize(("rows", "batch_max"), [(1, 10), (95, 10), (250, 25), (1000, 100)])
async def test_a_native_batch_tool_gets_one_request_per_batch(
    autojump_clock: trio.testing.MockClock, rows: int, batch_max: int
) -> None:
    provider = BatchProvider()
    registry = trioplay.ToolRegistry()
    registry.add("lookup", provider.single, batch=provider.batch, batch_max=batch_max)
    data = [{"id": f"bad{i}" if i % 7 == 3 else str(i)} for i in range(rows)]

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("lookup", {"id": row["id"]}))["n"]

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        # All rows in flight at once, so every batch is full but the last.
        return await ctx.dataset("s", data).with_column("n", resolver).run(key="id")

    limits = trioplay.Limits(max_concurrent_rows=max(rows, 1), tool_batch_max=batch_max)
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry, limits=limits) as rt:
        result = await rt.run(play, {}, run_id="r")
    bad = sum(1 for row in data if row["id"].startswith("bad"))
    assert len(provider.requests) == math.ceil(rows / batch_max)
    assert sum(provider.requests) == rows
    assert (result.completed_count, result.failed_count) == (rows - bad, bad)
    async for row in result.rows():
        assert row["n"] == row["id"]
    failed = [row async for row in result.rows(status="failed")]
    assert all(row["_error"] == "ToolExecutionError: rejected" for row in failed)
