"""Lease heartbeats in virtual time: loss cancels the call, completion races are no loss."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._receipts._call import _Call
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, finder_map, registry

TTL = 10.0  # heartbeats every 5 s


class Store(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reject_heartbeats = False
        self.heartbeats: list[float] = []
        self.complete_delay = 0.0

    async def heartbeat_many(self, leases: Any, **kw: Any) -> list[float | None]:
        self.heartbeats.append(trio.current_time())
        if self.reject_heartbeats:
            return [None] * len(leases)
        return await super().heartbeat_many(leases, **kw)

    async def complete_many(self, items: Any, **kw: Any) -> list[bool]:
        await trio.sleep(self.complete_delay)
        return await super().complete_many(items, **kw)


async def call_tool(store: Store, tool: Any) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.tool("t", {"x": 1})

    async with trioplay.open_runtime(
        store=store,
        tools=registry(t=tool),
        limits=trioplay.Limits(lease_ttl=TTL),
        wall_clock=trio.current_time,
    ) as rt:
        return await rt.run(play, {}, run_id="r")


@pytest.mark.deadline(5000)
async def test_a_long_call_keeps_its_lease(autojump_clock: trio.testing.MockClock) -> None:
    store = Store()

    async def slow(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(99)  # ten lease lifetimes
        return {"ok": True}

    assert await call_tool(store, slow) == {"ok": True}
    assert len(store.heartbeats) == 19  # at 5 s, 10 s, ... 95 s


@pytest.mark.deadline(5000)
async def test_a_rejected_heartbeat_cancels_the_call_within_one_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Store()
    cancelled_at: list[float] = []

    async def hangs(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        try:
            await trio.sleep(1000)
        except trio.Cancelled:
            cancelled_at.append(trio.current_time())
            raise

    async def lose_the_lease() -> None:
        await trio.sleep(7)
        store.reject_heartbeats = True

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lose_the_lease)
        with pytest.raises(trioplay.LeaseLost):
            await call_tool(store, hangs)
    # Claimed at once: heartbeats at 5 (ok) and 10 (rejected).
    assert cancelled_at == [pytest.approx(start + 10.0)]
    assert cancelled_at[0] - (start + 7) <= TTL / 2


@pytest.mark.deadline(5000)
async def test_a_completion_racing_a_heartbeat_is_not_a_lease_loss(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Store()
    store.complete_delay = 3.0  # the completion write spans the heartbeat at t=5

    async def answers(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(4)
        return {"ok": True}

    async def heartbeats_now_fail() -> None:
        await trio.sleep(4.5)
        store.reject_heartbeats = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeats_now_fail)
        assert await call_tool(store, answers) == {"ok": True}
    # The call was settling at t=5: its key was not even sent.
    assert store.heartbeats == []


@pytest.mark.deadline(5000)
async def test_no_provider_call_after_the_lease_is_known_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call that waited for a slot longer than its lease never reaches the provider."""
    store = Store()
    store.reject_heartbeats = True  # the store no longer confirms our leases
    calls: list[int] = []

    async def blocker(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        calls.append(input["x"])
        await trio.sleep(30)
        return {"x": input["x"]}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def one(x: int) -> None:
            try:
                await ctx.tool("t", {"x": x})
            except trioplay.LeaseLost:
                lost.append(x)

        async with trio.open_nursery() as nursery:
            for x in range(2):
                nursery.start_soon(one, x)

    lost: list[int] = []
    reg = trioplay.ToolRegistry()
    reg.add("t", blocker, concurrency=1)
    async with trioplay.open_runtime(
        store=store, tools=reg, limits=trioplay.Limits(lease_ttl=TTL), wall_clock=trio.current_time
    ) as rt:
        await rt.run(play, {}, run_id="r")
    # Both leases are reported gone at the 5 s heartbeat: the first call is
    # cancelled, and the second, still waiting for the only slot, is refused
    # when it gets it, without calling the provider.
    assert len(calls) == 1
    assert sorted(lost) == [0, 1]


class SilentHeartbeats(MemoryStore):
    """Heartbeats do not get through (the store does not answer them)."""

    async def heartbeat_many(self, leases: Any, **kw: Any) -> list[float | None]:
        raise trioplay.StoreError("memory://: heartbeat_many: no answer")


@pytest.mark.deadline(5000)
async def test_a_caller_whose_lease_was_taken_over_gets_lease_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 11, point 2: our heartbeats fail, the lease expires, another owner
    # claims the key and records its own result while our provider still
    # works. Our completion is fenced off: the caller (and its follower) must
    # get LeaseLost, never the value the receipt does not hold.
    store = SilentHeartbeats()
    outcomes: list[Any] = []

    async def slow(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(30)  # three lease lifetimes
        return {"by": "us"}

    async def other_owner_takes_over() -> None:
        await trio.sleep(TTL + 1)  # our lease has expired, unrenewed
        (claim,) = await store.claim_many(
            [trioplay.ClaimRequest(key="k", operation="tool", name="t", run_id="other")],
            owner="elsewhere/1/1",
            lease_ttl=TTL,
            now=trio.current_time(),
        )
        assert isinstance(claim, trioplay.Claimed)
        (done,) = await store.complete_many(
            [trioplay.Completion("k", claim.lease_id, '{"by":"them"}')], now=trio.current_time()
        )
        assert done

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def one() -> None:
            try:
                outcomes.append(await ctx.tool("t", {"x": 1}, key="k"))
            except trioplay.LeaseLost as exc:
                outcomes.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            await trio.sleep(1)
            nursery.start_soon(one)  # follows the first

    async with (
        trioplay.open_runtime(
            store=store,
            tools=registry(t=slow),
            limits=trioplay.Limits(lease_ttl=TTL),
            wall_clock=trio.current_time,
        ) as rt,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(other_owner_takes_over)
        await rt.run(play, {}, run_id="r")
    assert len(outcomes) == 2
    assert all(isinstance(outcome, trioplay.LeaseLost) for outcome in outcomes), outcomes
    assert "taken over" in str(outcomes[0])
    (receipt,) = await store.get_many(["k"])
    assert receipt is not None
    assert receipt.result_json == '{"by":"them"}'


async def test_settled_calls_are_not_kept_alive_until_their_renewal_falls_due() -> None:
    # The heartbeat watches each cohort until its renewal is due (lease_ttl / 2,
    # 30 s by default), so it must not hold the cohort's calls once they have
    # all settled: a run of a few seconds would keep every call it made (and
    # its claim, cancel scope and row phase) alive to the end, and the cyclic
    # garbage collector would scan them all again and again.
    alive: list[int] = []

    async def finder(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        if input["domain"] == "d390":
            gc.collect()
            alive.append(sum(type(o) is _Call for o in gc.get_objects()))
        return {"ok": True}

    async with trioplay.open_runtime(
        store=MemoryStore(),
        tools=registry(finder=finder),
        limits=trioplay.Limits(max_concurrent_rows=4),
    ) as rt:
        await rt.run(finder_map(400), {}, run_id="r")
    # Only the few calls in flight (4 rows) may be alive, not the 390 before.
    assert len(alive) == 1
    assert alive[0] <= 16, alive


@pytest.mark.deadline(5000)
@pytest.mark.parametrize(("limits", "noticed_within"), [({}, 0.1), ({"page_wait_delay": 0.5}, 0.5)])
async def test_a_page_a_peer_finishes_is_noticed_within_page_wait_delay(
    autojump_clock: trio.testing.MockClock, limits: dict[str, float], noticed_within: float
) -> None:
    # A process that has run its own pages waits for the pages a live peer
    # holds before its map returns. It must notice the peer's finish within
    # page_wait_delay (0.1 s by default), not a receipt wait's 1 s: at the end
    # of a run shared by several processes that poll was a fifth of the time.
    store = MemoryStore()
    finished_at: list[float] = []

    async def peer() -> None:
        claim = await store.claim_page(
            "r", "s", 0, owner="elsewhere/1/1", lease_ttl=60.0, now=trio.current_time()
        )
        assert claim.lease_id is not None
        await trio.sleep(3.33)
        lease = trioplay.PageLease("r", "s", 0, claim.lease_id)
        await store.finish_page(lease, attempt=1, failed=0, now=trio.current_time())
        finished_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer)
        await trio.testing.wait_all_tasks_blocked()
        async with trioplay.open_runtime(
            store=store,
            tools=registry(finder=CountingTool()),
            limits=trioplay.Limits(page_size=10, **limits),
            wall_clock=trio.current_time,
        ) as rt:
            await rt.run(finder_map(40), {}, run_id="r")
            returned_at = trio.current_time()
    assert finished_at
    # The peer wrote no sheet rows, so the page's rows run here after it is
    # noticed: one writer flush (writer_max_flush, 0.1 s) more.
    assert finished_at[0] < returned_at <= finished_at[0] + noticed_within + 0.1 + 0.01
