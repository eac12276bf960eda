"""The fault adapters (trioplay.adapters.faults) do what they say, at exact virtual times."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing

import trioplay
from trioplay.adapters import Latency, SimulatedProvider
from trioplay.adapters.faults import (
    NEVER,
    CpuHog,
    HostileTransport,
    RateLimitStorm,
    Scheduled,
    SlowStore,
    StoreOutage,
    block_loop,
)
from trioplay.stores.memory import MemoryStore


async def _get(transport: HostileTransport, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(f"http://127.0.0.1{path}")
        await response.aread()
        return response


@pytest.mark.deadline(7200)
async def test_a_header_stall_waits_before_the_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = HostileTransport(header_delay=42.0, paths={"/slow"})
    start = trio.current_time()
    assert (await _get(transport, "/fast")).status_code == 200
    assert trio.current_time() == start
    await _get(transport, "/slow")
    assert trio.current_time() == start + 42.0
    with trio.move_on_after(3600) as scope:
        await _get(HostileTransport(header_delay=NEVER), "/")
    assert scope.cancelled_caught
    assert transport.requests == 2


async def test_a_slow_drip_sends_the_whole_body_one_chunk_per_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = HostileTransport(body=b"x" * 1000, chunk_size=100, chunk_delay=5.0)
    start = trio.current_time()
    response = await _get(transport, "/")
    assert response.content == b"x" * 1000
    assert trio.current_time() == start + 50.0


async def test_a_drip_longer_than_the_body_deadline_is_a_body_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.fetch("http://127.0.0.1/x")).status

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"id": "1"}]).with_column("x", resolver).run(key="id")

    store = MemoryStore()
    async with trioplay.open_runtime(
        store=store,
        http_transport=HostileTransport(body=b"y" * 100, chunk_size=10, chunk_delay=10.0),
        allow_networks=["127.0.0.0/8"],
        fetch_timeouts=trioplay.FetchTimeouts(headers=5, body=30, total=600),
    ) as rt:
        await rt.run(play, {}, run_id="r")
        [row] = await store.read_rows("r", "s", status="failed")
    assert row.error is not None
    assert row.error.startswith("FetchTimeout: [CTX_FETCH_TIMEOUT phase=body timeout_ms=30000]")


async def test_a_store_outage_hangs_then_answers_or_refuses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hanging = StoreOutage(MemoryStore(), start=10.0, duration=20.0)
    refusing = StoreOutage(MemoryStore(), start=0.0, duration=5.0, hang=False)
    await hanging.open()
    await refusing.open()
    start = trio.current_time()
    with pytest.raises(trioplay.StoreError, match="simulated store outage: list_runs refused"):
        await refusing.list_runs()
    assert await hanging.list_runs() == []  # before the outage
    await trio.sleep(15)
    assert await hanging.list_runs() == []  # answered when the outage ends
    assert trio.current_time() == start + 30.0
    assert (hanging.refused, refusing.refused) == (1, 1)
    assert await refusing.list_runs() == []  # after it


async def test_a_slow_store_sleeps_a_seeded_latency_per_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def timings(seed: int) -> list[float]:
        store = SlowStore(MemoryStore(), Latency(1.0, 5.0), seed=seed, operations={"list_runs"})
        await store.open()
        found = []
        for _ in range(3):
            start = trio.current_time()
            await store.list_runs()
            await store.count_receipts("r")  # not slowed
            found.append(trio.current_time() - start)
        return found

    first = await timings(1)
    assert first == await timings(1)
    assert first != await timings(2)
    assert all(t > 0 for t in first)


async def test_a_storm_answers_429_for_its_duration(autojump_clock: trio.testing.MockClock) -> None:
    finder = SimulatedProvider(tool_id="finder", latency=0)
    storm = RateLimitStorm(tool=finder, start=1.0, duration=10.0, retry_after=3.0)
    spec = storm.tool_spec()
    call = trioplay.ToolCall(tool_id="finder", idempotency_key="k", attempt=1, deadline=None)
    outcomes = []
    for at in (0.0, 1.0, 10.9, 11.0):
        await trio.sleep_until(at)
        try:
            await spec.fn({"domain": "a.example"}, call)
            outcomes.append("ok")
        except trioplay.ProviderTransientError as exc:
            outcomes.append(f"{exc.category} {exc.retry_after}")
    assert outcomes == ["ok", "rate_limit 3.0", "rate_limit 3.0", "ok"]
    assert storm.rejected == 2


async def test_a_scheduled_tool_slows_then_fails_on_its_schedule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    finder = SimulatedProvider(tool_id="finder", provider="acme", seed=0, latency=0.0)
    scheduled = Scheduled(tool=finder, latency=((5.0, 2.0),), failure_rate=((20.0, 1.0),))
    spec = scheduled.tool_spec()
    call = trioplay.ToolCall(tool_id="finder", idempotency_key="k", attempt=1, deadline=None)
    took = []
    for at in (0.0, 4.9, 5.0, 10.0):
        await trio.sleep_until(at)
        await spec.fn({"domain": "a.example"}, call)
        took.append(trio.current_time() - at)
    assert took == [0.0, 0.0, 2.0, 2.0]  # 2 s more from 5 s on
    await trio.sleep_until(20.0)
    with pytest.raises(trioplay.ProviderTransientError) as failed:
        await spec.fn({"domain": "a.example"}, call)
    assert failed.value.category == "upstream"
    assert trio.current_time() == 22.0  # it waited its extra first
    assert scheduled.failed == 1


async def test_block_loop_jumps_a_mock_clock_in_one_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hog = CpuHog(7.5, keys={"b"})
    start = trio.current_time()
    assert hog({"id": "a"}, None) == "computed"  # type: ignore[arg-type]
    assert trio.current_time() == start
    hog({"id": "b"}, None)  # type: ignore[arg-type]
    assert trio.current_time() == start + 7.5
    block_loop(0.5)
    assert (trio.current_time(), hog.blocked) == (start + 8.0, 1)
