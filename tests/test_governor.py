"""The governor in virtual time: rates, concurrency, slots held until settled."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trioplay
from trioplay.stores.memory import MemoryStore


class Probe:
    """Records every provider start and the concurrency seen, per provider and overall."""

    def __init__(self) -> None:
        self.starts: dict[str, list[float]] = {}
        self.active: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.total_active = 0
        self.total_peak = 0

    def tool(self, provider: str, latency: float) -> Any:
        async def call(input: dict[str, Any], _call: trioplay.ToolCall) -> Any:
            self.starts.setdefault(provider, []).append(trio.current_time())
            self.active[provider] = self.active.get(provider, 0) + 1
            self.total_active += 1
            self.peak[provider] = max(self.peak.get(provider, 0), self.active[provider])
            self.total_peak = max(self.total_peak, self.total_active)
            await trio.sleep(latency)
            self.active[provider] -= 1
            self.total_active -= 1
            return input

        return call


def max_in_window(times: list[float], width: float) -> int:
    times = sorted(times)
    best = 0
    j = 0
    for i, t in enumerate(times):
        while times[j] <= t - width + 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best


@settings(max_examples=25)
@given(
    arrivals=st.lists(st.floats(0, 5), min_size=1, max_size=80),
    n=st.integers(1, 10),
    per=st.sampled_from([0.5, 1.0, 2.0]),
    burst=st.one_of(st.none(), st.integers(1, 5)),
    concurrency=st.integers(1, 6),
    global_limit=st.integers(1, 8),
    latency=st.floats(0, 1),
)
def test_rate_and_concurrency_are_never_exceeded(
    arrivals: list[float],
    n: int,
    per: float,
    burst: int | None,
    concurrency: int,
    global_limit: int,
    latency: float,
) -> None:
    probe = Probe()
    registry = trioplay.ToolRegistry()
    rate = trioplay.Rate(n, per=per, burst=burst)
    registry.add(
        "a", probe.tool("acme", latency), provider="acme", rate=rate, concurrency=concurrency
    )
    registry.add("b", probe.tool("other", latency), provider="other")

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> None:
        async def one(i: int, at: float) -> None:
            await trio.sleep(at)
            await ctx.tool("a" if i % 2 else "b", {"i": i})

        async with trio.open_nursery() as nursery:
            for i, at in enumerate(arrivals):
                nursery.start_soon(one, i, at)

    async def main() -> None:
        limits = trioplay.Limits(max_concurrent_external_calls=global_limit)
        with trio.fail_after(100_000):
            async with trioplay.open_runtime(
                store=MemoryStore(), tools=registry, limits=limits
            ) as rt:
                await rt.run(play, {}, run_id="r")

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    acme = probe.starts.get("acme", [])
    assert len(acme) == sum(1 for i in range(len(arrivals)) if i % 2)
    assert max_in_window(acme, per) <= n + (burst if burst is not None else n)
    assert probe.peak.get("acme", 0) <= concurrency
    assert probe.total_peak <= global_limit


class SlowCompletions(MemoryStore):
    def __init__(self, probe: dict[str, int]) -> None:
        super().__init__()
        self.probe = probe

    async def complete_many(self, items: Any, **kw: Any) -> list[bool]:
        await trio.sleep(1.0)
        result = await super().complete_many(items, **kw)
        self.probe["settled"] += len(items)
        return result


@pytest.mark.deadline(1000)  # 2,000 calls, 16 at a time, each write 1 virtual second
async def test_decoded_results_waiting_for_their_write_stay_within_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = {"returned": 0, "settled": 0, "peak": 0}

    async def fast(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        probe["returned"] += 1
        probe["peak"] = max(probe["peak"], probe["returned"] - probe["settled"])
        return {"blob": "x" * 1000}

    registry = trioplay.ToolRegistry()
    registry.add("t", fast)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return len((await rc.tool("t", {"i": row["i"]}))["blob"])

        rows = [{"i": i} for i in range(2000)]
        return await ctx.dataset("s", rows).with_column("n", resolver).run(key="i")

    limits = trioplay.Limits(max_concurrent_external_calls=16)
    async with trioplay.open_runtime(
        store=SlowCompletions(probe), tools=registry, limits=limits
    ) as rt:
        result = await rt.run(play, {}, run_id="r")
    assert result.completed_count == 2000
    assert 0 < probe["peak"] <= 16


class CrashingClaims(MemoryStore):
    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    async def claim_many(self, requests: Any, **kw: Any) -> Any:
        self.after -= 1
        if self.after < 0:
            raise RuntimeError("dispatcher crashed")
        return await super().claim_many(requests, **kw)


@pytest.mark.parametrize("after", [0, 2, 5])
async def test_a_dispatcher_failure_reaches_every_waiting_caller(after: int) -> None:
    async def tool(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(0.001)
        return input

    registry = trioplay.ToolRegistry()
    registry.add("t", tool)
    errors: list[str] = []

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            try:
                return await rc.tool("t", {"i": row["i"]})
            except RuntimeError as exc:
                errors.append(str(exc))
                raise

        rows = [{"i": i} for i in range(1000)]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="i")

    with trio.fail_after(30):
        async with trioplay.open_runtime(store=CrashingClaims(after), tools=registry) as rt:
            result = await rt.run(play, {}, run_id="r")
    assert result.completed_count + result.failed_count == 1000
    assert result.failed_count == len(errors) > 0
    assert set(errors) == {"dispatcher crashed"}


async def test_a_rate_limited_tool_with_retries_slows_down_instead_of_failing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tries: list[tuple[float, int, str]] = []

    async def limited(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        tries.append((trio.current_time(), call.attempt, call.idempotency_key))
        if len(tries) < 3:
            raise trioplay.ProviderTransientError("rate_limit", "429", retry_after=2.0)
        return {"ok": True}

    registry = trioplay.ToolRegistry()
    registry.add("t", limited, rate=trioplay.Rate(100, per=1.0), retries=3)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.tool("t", {"x": 1})

    async with trioplay.open_runtime(store=MemoryStore(), tools=registry) as rt:
        start = trio.current_time()
        assert await rt.run(play, {}, run_id="r") == {"ok": True}
    times = [round(at - start, 3) for at, _, _ in tries]
    # At once (an idle lane claims without a window), then retry_after
    # twice; after each pause the bucket starts empty, so the next call
    # waits one token (1/100 s) more.
    assert times == [0.0, 2.01, 4.02]
    assert [attempt for _, attempt, _ in tries] == [1, 2, 3]
    assert len({key for _, _, key in tries}) == 1  # one receipt, one idempotency key


async def test_retries_run_out_and_the_error_surfaces(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    async def down(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        nonlocal calls
        calls += 1
        raise trioplay.ProviderTransientError("upstream", "503")

    registry = trioplay.ToolRegistry()
    registry.add("t", down, retries=2)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.tool("t", {"x": 1})

    async with trioplay.open_runtime(store=MemoryStore(), tools=registry) as rt:
        start = trio.current_time()
        with pytest.raises(trioplay.ProviderTransientError, match="503"):
            await rt.run(play, {}, run_id="r")
        assert trio.current_time() - start == pytest.approx(0.1 + 0.2)
    assert calls == 3


async def test_queued_borrowers_get_released_slots_in_order_and_nothing_leaks() -> None:
    from trioplay._governor import Governor

    governor = Governor(2)
    granted: list[str] = []

    def grant(name: str, wanted: bool = True) -> Any:
        def granted_fn(borrower: Any) -> bool:
            assert borrower == name
            granted.append(name)
            return wanted

        return granted_fn

    assert governor.acquire_or_queue("a", grant("a"))
    assert governor.acquire_or_queue("b", grant("b"))
    assert not governor.acquire_or_queue("c", grant("c"))
    assert not governor.acquire_or_queue("gone", grant("gone", wanted=False))
    assert not governor.acquire_or_queue("e", grant("e"))
    governor.release(None, "a")
    assert granted == ["c"]
    # The next slot goes to "gone", which no longer wants it: "e" gets it at once.
    governor.release(None, "b")
    assert granted == ["c", "gone", "e"]
    assert governor.external.borrowed_tokens == 2
    assert set(governor.external._borrowers) == {"c", "e"}  # type: ignore[attr-defined]

    # A task waiting in acquire() goes first; its release serves the queue.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(governor.acquire, None, "task")
        await trio.testing.wait_all_tasks_blocked()
        assert not governor.acquire_or_queue("f", grant("f"))
        governor.release(None, "c")
        await trio.testing.wait_all_tasks_blocked()
    assert granted == ["c", "gone", "e"]
    governor.release(None, "task")
    assert granted == ["c", "gone", "e", "f"]
    governor.release(None, "e")
    governor.release(None, "f")
    assert governor.external.borrowed_tokens == 0


def test_only_a_provider_without_limits_of_its_own_is_unlimited() -> None:
    from trioplay._governor import Governor

    governor = Governor(4)
    assert governor.is_unlimited(None)  # fetches
    assert governor.is_unlimited(governor.gate("plain", None, None))
    assert not governor.is_unlimited(governor.gate("narrow", None, 2))
    assert not governor.is_unlimited(governor.gate("paced", trioplay.Rate(5), None))


async def test_a_cancelled_run_leaves_no_governor_slot_taken() -> None:
    # Calls queue for the two slots while two hang; cancelling the run must
    # give back the held slots and forget the queued calls.
    hang = trio.Event()

    async def tool(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        if input["i"] < 1000:
            await hang.wait()
        return input

    registry = trioplay.ToolRegistry()
    registry.add("t", tool)

    def play_over(rows: list[dict[str, int]]) -> Any:
        @trioplay.play("p")
        async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
            async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
                return await rc.tool("t", {"i": row["i"]})

            return await ctx.dataset("s", rows).with_column("x", resolver).run(key="i")

        return play

    limits = trioplay.Limits(max_concurrent_external_calls=2)
    async with trioplay.open_runtime(store="memory://", tools=registry, limits=limits) as rt:
        with trio.move_on_after(0.5) as scope:
            await rt.run(play_over([{"i": i} for i in range(50)]), {}, run_id="a")
        assert scope.cancelled_caught
        assert rt.governor.external.borrowed_tokens == 0
        result = await rt.run(play_over([{"i": 1000 + i} for i in range(50)]), {}, run_id="b")
        assert result.completed_count == 50
        assert rt.governor.external.borrowed_tokens == 0


@pytest.mark.deadline(100)
async def test_a_hung_provider_does_not_starve_a_healthy_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 12, acceptance 1a. Default limits (64 global slots, no concurrency
    # of its own for either provider): 200 rows on a provider that never
    # answers come first, then 100 rows on a healthy one.
    async def stuck(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep_forever()

    async def fine(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(0.05)
        return {"ok": input["i"]}

    registry = trioplay.ToolRegistry()
    registry.add("stuck", stuck, provider="stuck")
    registry.add("fine", fine, provider="fine")

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("stuck" if row["i"] < 200 else "fine", {"i": row["i"]})

        rows = [{"i": i} for i in range(300)]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="i")

    store = MemoryStore()
    async with trioplay.open_runtime(store=store, tools=registry) as rt:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(rt.run, play, {}, run_id="r"))
            await trio.sleep(1.0)
            # The stuck provider holds its share of the slots (half), no more...
            held = rt.governor.external.borrowed_tokens
            nursery.cancel_scope.cancel()
    assert held == 32
    # ...and every healthy row committed within 1 s of virtual time.
    assert (await store.count_rows("r", "s")).get("completed", 0) == 100


def rate_play(calls: int, tool: str = "t") -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(calls):
                nursery.start_soon(ctx.tool, tool, {"i": i})

    return play


@pytest.mark.deadline(100)
async def test_a_rate_holds_in_every_window_the_first_included(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 12, acceptance 1c: Rate(20, per=1) over 200 calls, no 1 s window
    # holds more than 20 (a full bucket and its refill let 39 through).
    probe = Probe()
    registry = trioplay.ToolRegistry()
    registry.add("t", probe.tool("acme", 0.0), rate=trioplay.Rate(20, per=1.0))
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry) as rt:
        await rt.run(rate_play(200), {}, run_id="r")
    starts = probe.starts["acme"]
    assert len(starts) == 200
    assert max_in_window(starts, 1.0) == 20
    # Spread evenly: one call every 50 ms, 200 calls in about 10 s.
    assert starts[-1] - starts[0] == pytest.approx(199 * 0.05)


@pytest.mark.deadline(100)
async def test_a_rate_holds_for_calls_that_waited_for_a_global_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The rate counts call starts: calls that queued behind another provider
    # for the global slots do not all start at once when the slots free up.
    probe = Probe()
    registry = trioplay.ToolRegistry()
    registry.add("hog", probe.tool("hog", 5.0), provider="hog")
    registry.add("t", probe.tool("acme", 0.0), provider="acme", rate=trioplay.Rate(5, per=1.0))

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(ctx.tool, "hog", {"i": i})
            await trio.sleep(0.1)  # the hog holds every slot from here to t = 5
            for i in range(40):
                nursery.start_soon(ctx.tool, "t", {"i": i})

    limits = trioplay.Limits(max_concurrent_external_calls=4, max_provider_share=1.0)
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry, limits=limits) as rt:
        await rt.run(play, {}, run_id="r")
    starts = probe.starts["acme"]
    assert len(starts) == 40
    assert min(starts) >= 5.0
    assert max_in_window(starts, 1.0) == 5


@pytest.mark.deadline(100)
async def test_burst_is_an_opt_in_that_exceeds_the_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Rate(5, per=1, burst=3): an idle provider takes 3 calls at once, then one
    # every 0.2 s; a window of 1 s may then hold up to n + burst - 1 = 7.
    probe = Probe()
    registry = trioplay.ToolRegistry()
    registry.add("t", probe.tool("acme", 0.0), rate=trioplay.Rate(5, per=1.0, burst=3))
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry) as rt:
        await rt.run(rate_play(30), {}, run_id="r")
    starts = sorted(probe.starts["acme"])
    first = starts[0]
    assert [round(at - first, 3) for at in starts[:5]] == [0.0, 0.0, 0.0, 0.2, 0.4]
    assert max_in_window(starts, 1.0) == 7


@pytest.mark.deadline(100)
async def test_a_rate_limit_answer_pauses_a_provider_without_a_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 12, acceptance 1d: a 429 with Retry-After 10 s from a provider
    # without rate=: no call to it for 10 s, other providers unaffected.
    starts: dict[str, list[float]] = {"a": [], "b": []}

    async def limited(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        starts["a"].append(trio.current_time())
        if len(starts["a"]) == 1:
            raise trioplay.ProviderTransientError("rate_limit", "429", retry_after=10.0)
        return input

    async def other(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        starts["b"].append(trio.current_time())
        return input

    registry = trioplay.ToolRegistry()
    registry.add("a", limited, provider="a")
    registry.add("b", other, provider="b")

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> None:
        async def both(k: int) -> None:
            await trio.sleep(k)
            with contextlib.suppress(trioplay.ProviderTransientError):
                await ctx.tool("a", {"k": k})
            await ctx.tool("b", {"k": k})

        async with trio.open_nursery() as nursery:
            for k in range(15):
                nursery.start_soon(both, k)

    async with trioplay.open_runtime(store=MemoryStore(), tools=registry) as rt:
        start = trio.current_time()
        await rt.run(play, {}, run_id="r")
    a = [round(at - start, 3) for at in starts["a"]]
    b = [round(at - start, 3) for at in starts["b"]]
    # The first call at 0 s (claimed at once: an idle lane has no window) was
    # answered 429: the calls of 1 s to 9 s wait for the pause to end at 10 s.
    assert a == [0.0] + [10.0] * 10 + [11.0, 12.0, 13.0, 14.0]
    # The other provider went on: each call at once (or right after the
    # paused call it follows).
    assert b[0] == 0.0
    assert b[10:] == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert len(b) == 15


@pytest.mark.deadline(100)
async def test_a_rate_limit_answer_pauses_calls_already_queued_for_a_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two slots: the first call holds one for 1 s, the second is answered 429
    # (retry after 10 s) at 0.5 s; four more calls queued for a slot meanwhile
    # must not start when the slots free up, only once the pause is over.
    starts: list[float] = []

    async def limited(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        starts.append(trio.current_time())
        if len(starts) == 1:
            await trio.sleep(1.0)
        elif len(starts) == 2:
            await trio.sleep(0.5)
            raise trioplay.ProviderTransientError("rate_limit", "429", retry_after=10.0)
        return input

    registry = trioplay.ToolRegistry()
    registry.add("a", limited)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> None:
        async def one(i: int) -> None:
            with contextlib.suppress(trioplay.ProviderTransientError):
                await ctx.tool("a", {"i": i})

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)

    limits = trioplay.Limits(max_concurrent_external_calls=2)
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry, limits=limits) as rt:
        start = trio.current_time()
        await rt.run(play, {}, run_id="r")
    assert [round(at - start, 3) for at in starts] == [0.0, 0.0] + [10.5] * 2 + [10.5] * 2
