"""Claims at their edges: corrupt receipts, the hydration turn's memory bound, batched waits
and coalesced claims of direct effects (issue 11, points 3, 5 and 6)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, LocalHttpServer, find_email, leads, registry

# -- point 3: a corrupt receipt fails its callers only ----------------------------------------


class Corruptible:
    """A store of either kind, and a way to overwrite one stored payload behind its back."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.memory = MemoryStore()
        self.path = tmp_path / "receipts.db"

    @property
    def store(self) -> Any:
        return self.memory if self.kind == "memory" else f"sqlite:///{self.path}"

    def corrupt(
        self, column: str, payload: str | bytes, *, status: str, containing: str = ""
    ) -> str:
        """Overwrite ``column`` of the one receipt with ``status`` (and text); return its key."""
        if self.kind == "memory":
            receipts = self.memory._receipts
            (key,) = [
                key
                for key, receipt in receipts.items()
                if receipt.status == status and containing in (getattr(receipt, column) or "")
            ]
            receipts[key] = attrs.evolve(receipts[key], **{column: payload})  # type: ignore[arg-type]
            return key
        with sqlite3.connect(self.path) as conn:
            rows = conn.execute(
                f"SELECT key FROM receipts WHERE status = ? AND {column} LIKE ?",
                (status, f"%{containing}%"),
            ).fetchall()
            (key,) = [row[0] for row in rows]
            conn.execute(f"UPDATE receipts SET {column} = ? WHERE key = ?", (payload, key))
        conn.close()
        return str(key)


@trioplay.play("corrupt")
async def fifty_rows(ctx: trioplay.PlayContext, _input: Any) -> Any:
    result = (
        await ctx.dataset("leads", leads(50)).with_column("email", find_email).run(key="domain")
    )
    failed = [row async for row in result.rows(status="failed")]
    return result.completed_count, failed


async def run_fifty(
    store: Any, tool: CountingTool, run_id: str
) -> tuple[int, list[dict[str, Any]]]:
    async with trioplay.open_runtime(store=store, tools=registry(finder=tool)) as rt:
        completed, failed = await rt.run(fifty_rows, {}, run_id=run_id)
    return completed, failed


async def rerun_with_one_corrupt_row(store: Any, tool: CountingTool, key: str, what: str) -> None:
    """Run the fifty rows again: only the row of the corrupt receipt ``key`` fails."""
    completed, failed = await run_fifty(store, tool, "two")
    assert tool.calls == 50  # the second run replayed every receipt, the corrupt one included
    assert completed == 49
    assert [row["domain"] for row in failed] == ["d7.example"]
    error = failed[0]["_error"]
    assert error.startswith(f"CorruptReceipt: {what} (receipt {key}) does not read back")
    assert error.endswith("call it with force=True to run it again, which replaces the receipt")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
# Cut short; or overwritten with bytes, which SQLite keeps as a BLOB and hands back as bytes.
@pytest.mark.parametrize("payload", ['{"email": "info@d7.exa', b"\xff\x00garbage"])
async def test_a_corrupt_result_fails_only_the_rows_that_replay_it(
    kind: str, payload: str | bytes, tmp_path: Path
) -> None:
    stores = Corruptible(kind, tmp_path)
    tool = CountingTool()
    assert (await run_fifty(stores.store, tool, "one"))[0] == 50
    key = stores.corrupt("result_json", payload, status="completed", containing="d7.")

    await rerun_with_one_corrupt_row(stores.store, tool, key, "the stored result of tool 'finder'")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"'])
async def test_a_corrupt_recorded_failure_fails_only_its_rows(
    kind: str, text: str, tmp_path: Path
) -> None:
    stores = Corruptible(kind, tmp_path)
    tool = CountingTool(fail_on={"d7.example"})
    assert (await run_fifty(stores.store, tool, "one"))[0] == 49
    key = stores.corrupt("error_json", text, status="failed")

    await rerun_with_one_corrupt_row(stores.store, tool, key, "the stored failure of tool 'finder'")


async def test_force_runs_a_corrupt_receipt_again_and_replaces_it() -> None:
    store = MemoryStore()
    tool = CountingTool()
    calls: list[Any] = []

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, force: bool) -> Any:
        return await ctx.tool("finder", {"domain": "a.example"}, force=force)

    async def run(run_id: str, force: bool) -> Any:
        async with trioplay.open_runtime(store=store, tools=registry(finder=tool)) as rt:
            return await rt.run(play, force, run_id=run_id)

    await run("one", False)
    (key,) = store._receipts
    store._receipts[key] = attrs.evolve(store._receipts[key], result_json="{")
    with pytest.raises(trioplay.CorruptReceipt) as info:
        await run("two", False)
    assert info.value.key == key
    assert info.value.code == "CORRUPT_RECEIPT"
    calls.append(await run("three", True))
    calls.append(await run("four", False))
    assert calls == [{"email": "info@a.example"}] * 2
    assert tool.calls == 2


async def test_a_corrupt_step_receipt_says_how_to_run_the_step_again() -> None:
    store = MemoryStore()

    # One run (a step's receipt is the run's), resumed with and without stale_after.
    option: dict[str, float | None] = {"stale_after": None}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: None) -> Any:
        return await ctx.step("started", lambda: 42, stale_after=option["stale_after"])

    async def run(stale_after: float | None = None) -> Any:
        option["stale_after"] = stale_after
        async with trioplay.open_runtime(store=store) as rt:
            return await rt.run(play, None, run_id="r")

    assert await run() == 42
    (key,) = store._receipts
    store._receipts[key] = attrs.evolve(store._receipts[key], result_json="4 2")
    with pytest.raises(trioplay.CorruptReceipt, match=r"step 'started'.*stale_after=0"):
        await run()
    assert await run(stale_after=0) == 42
    assert await run() == 42


async def test_a_replayed_fetch_of_the_wrong_shape_is_a_corrupt_receipt() -> None:
    server = LocalHttpServer()
    store = MemoryStore()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (await ctx.fetch(f"http://127.0.0.1:{server.port}/item")).status

    async def run() -> Any:
        async with trioplay.open_runtime(store=store, allow_networks=["127.0.0.0/8"]) as rt:
            return await rt.run(play, {}, run_id="r")

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        assert await run() == 200
        (key,) = store._receipts
        store._receipts[key] = attrs.evolve(store._receipts[key], result_json='{"status": 200}')
        with pytest.raises(trioplay.CorruptReceipt, match=r"fetch 'GET http.*KeyError.*force=True"):
            await run()
        nursery.cancel_scope.cancel()
    assert len(server.requests) == 1


# -- point 5: replay payloads are fetched and decoded one batch at a time ---------------------

PAYLOAD = 4096
BATCH = 50


class SlowClaims(MemoryStore):
    """A store whose claims take 10 ms, and a probe of the replay payloads in memory.

    ``held`` counts the bytes of completed payloads that a claim has answered
    with and no caller has received yet (fetched, maybe decoded, not
    delivered); ``peak`` is its maximum.
    """

    def __init__(self) -> None:
        super().__init__()
        self.probing = False
        self.held = 0
        self.peak = 0

    async def claim_many(self, requests: Any, **kw: Any) -> Any:
        await trio.sleep(0.01)
        outcomes = await super().claim_many(requests, **kw)
        if not self.probing:
            return outcomes
        for outcome in outcomes:
            if isinstance(outcome, trioplay.Settled) and outcome.receipt.result_json:
                self.held += len(outcome.receipt.result_json)
        self.peak = max(self.peak, self.held)
        return outcomes

    def received(self, value: Any) -> None:
        if self.probing:
            self.held -= len(json.dumps(value, separators=(",", ":")))


async def test_a_replay_holds_at_most_one_batch_of_payloads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = SlowClaims()
    executed = 0

    async def big(input: dict[str, Any], _call: trioplay.ToolCall) -> Any:
        nonlocal executed
        executed += 1
        return {"i": f"{input['i']:05d}", "blob": "x" * PAYLOAD}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            value = await rc.tool("big", {"i": row["i"]})
            store.received(value)
            return value["i"]

        rows = [{"i": i} for i in range(2000)]
        result = await ctx.dataset("s", rows).with_column("v", resolver).run(key="i")
        return result.completed_count

    limits = trioplay.Limits(
        max_concurrent_rows=1000, max_concurrent_external_calls=1000, tool_batch_max=BATCH
    )
    for run_id in ("first", "replay"):
        store.probing = run_id == "replay"
        async with trioplay.open_runtime(store=store, tools=registry(big=big), limits=limits) as rt:
            assert await rt.run(play, {}, run_id=run_id) == 2000
    assert executed == 2000  # the second run replayed them all
    assert store.held == 0
    one_batch = BATCH * len(
        json.dumps({"i": "00000", "blob": "x" * PAYLOAD}, separators=(",", ":"))
    )
    assert one_batch // 2 < store.peak <= one_batch


# -- point 6: batched waits, coalesced direct effects ------------------------------------------


class CountingClaims(MemoryStore):
    """Counts ``claim_many`` calls (store transactions) and the keys they claim."""

    def __init__(self) -> None:
        super().__init__()
        self.claim_calls = 0
        self.claimed_keys = 0

    async def claim_many(self, requests: Any, **kw: Any) -> Any:
        self.claim_calls += 1
        self.claimed_keys += len(requests)
        return await super().claim_many(requests, **kw)


async def hold_elsewhere(store: MemoryStore, keys: list[str]) -> list[trioplay.Claimed]:
    """Claim ``keys`` for another live process, for an hour."""
    requests = [
        trioplay.ClaimRequest(key=key, operation="tool", name="finder", run_id="x") for key in keys
    ]
    claims = await store.claim_many(requests, owner="elsewhere/1/1", lease_ttl=3600, now=1e6)
    assert all(isinstance(claim, trioplay.Claimed) for claim in claims)
    return claims  # type: ignore[return-value]


@trioplay.play("waits")
async def call_keys(ctx: trioplay.PlayContext, spec: dict[str, Any]) -> Any:
    results: dict[str, Any] = {}

    async def one(key: str) -> None:
        try:
            results[key] = await ctx.tool(
                "finder", {"domain": key}, key=key, receipt_wait=spec["wait"]
            )
        except trioplay.ReceiptWaitTimeout as exc:
            results[key] = exc.waited

    async with trio.open_nursery() as nursery:
        for key in spec["keys"]:
            nursery.start_soon(one, key)
    return results


async def test_waits_on_held_receipts_poll_in_one_store_call_per_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingClaims()
    keys = [f"k{i}" for i in range(20)]
    claims = await hold_elsewhere(store, keys)
    store.claim_calls = 0
    tool = CountingTool()

    async def owner_finishes() -> None:
        await trio.sleep(2.5)
        done = [trioplay.Completion(c.key, c.lease_id, f'"done {c.key}"') for c in claims]
        await store.complete_many(done, now=1e6)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(owner_finishes)
        async with trioplay.open_runtime(
            store=store, tools=registry(finder=tool), wall_clock=lambda: 1e6
        ) as rt:
            results = await rt.run(call_keys, {"keys": keys, "wait": 10}, run_id="r")
    assert results == {key: f"done {key}" for key in keys}
    assert tool.calls == 0
    # One claim of the lane's batch, then one per poll (at 1 s, 2 s, 3 s).
    assert store.claim_calls <= 4


async def test_waits_that_time_out_poll_together_and_report_how_long_they_waited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingClaims()
    keys = [f"k{i}" for i in range(20)]
    await hold_elsewhere(store, keys)
    store.claim_calls = 0
    async with trioplay.open_runtime(
        store=store, tools=registry(finder=CountingTool()), wall_clock=lambda: 1e6
    ) as rt:
        results = await rt.run(call_keys, {"keys": keys, "wait": 3}, run_id="r")
    assert results == {key: pytest.approx(3) for key in keys}
    assert store.claim_calls <= 1 + 4


async def test_concurrent_steps_are_claimed_in_bulk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingClaims()
    ran = 0

    def work(i: int) -> Any:
        nonlocal ran
        ran += 1
        return i

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        results: dict[int, Any] = {}

        async def one(i: int) -> None:
            results[i] = await ctx.step(f"s{i}", lambda: work(i))

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(one, i)
        return sorted(results.values())

    for run_id in ("r", "r"):  # the second attempt replays the steps
        store.claim_calls = 0
        async with trioplay.open_runtime(store=store) as rt:
            assert await rt.run(play, {}, run_id=run_id) == list(range(50))
        # The first claim leaves at once; the calls made meanwhile form the next one.
        assert store.claim_calls <= 2
    assert ran == 50


async def test_row_steps_of_a_map_are_claimed_in_bulk() -> None:
    store = CountingClaims()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.step("double", lambda: row["i"] * 2)

        rows = [{"i": i} for i in range(200)]
        return (
            await ctx.dataset("s", rows).with_column("d", resolver).run(key="i")
        ).completed_count

    async with trioplay.open_runtime(store=store) as rt:
        assert await rt.run(play, {}, run_id="r") == 200
    assert store.claimed_keys == 200
    assert store.claim_calls <= 20


async def test_one_step_is_claimed_at_once(autojump_clock: trio.testing.MockClock) -> None:
    store = CountingClaims()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        start = trio.current_time()
        value = await ctx.step("one", lambda: 1)
        return value, trio.current_time() - start

    async with trioplay.open_runtime(store=store) as rt:
        assert await rt.run(play, {}, run_id="r") == (1, 0)
    assert store.claim_calls == 1


async def test_concurrent_fetches_are_claimed_in_bulk() -> None:
    server = LocalHttpServer()
    store = CountingClaims()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        # The first fetch opens the runtime's client; those made meanwhile
        # would pass its lock one by one.
        statuses = [(await ctx.fetch(f"http://127.0.0.1:{server.port}/first")).status]

        async def one(i: int) -> None:
            response = await ctx.fetch(f"http://127.0.0.1:{server.port}/item/{i}")
            statuses.append(response.status)

        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(one, i)
        return statuses

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with trioplay.open_runtime(store=store, allow_networks=["127.0.0.0/8"]) as rt:
            assert await rt.run(play, {}, run_id="r") == [200] * 31
        nursery.cancel_scope.cancel()
    assert len(server.requests) == 31
    assert store.claimed_keys == 31
    assert store.claim_calls <= 1 + 2


async def test_a_wait_whose_caller_left_is_polled_no_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingClaims()
    await hold_elsewhere(store, ["k1"])
    store.claim_calls = 0

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        with trio.move_on_after(2.5):
            await ctx.tool("finder", {}, key="k1")
        polled = store.claim_calls
        await trio.sleep(10)
        return polled, store.claim_calls

    async with trioplay.open_runtime(
        store=store, tools=registry(finder=CountingTool()), wall_clock=lambda: 1e6
    ) as rt:
        polled, later = await rt.run(play, {}, run_id="r")
    assert polled == 1 + 2  # the claim, then polls at 1 s and 2 s
    assert later == polled


async def test_steps_cancelled_while_their_claim_waits_leave_no_receipt_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class SlowClaims(CountingClaims):
        async def claim_many(self, requests: Any, **kw: Any) -> Any:
            await trio.sleep(1.0)
            return await super().claim_many(requests, **kw)

    store = SlowClaims()
    ran: list[int] = []

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def one(i: int) -> None:
            await ctx.step(f"s{i}", lambda: ran.append(i))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, 0)  # its claim is out for a second
            await trio.sleep(0.1)
            with trio.move_on_after(0.4) as late:
                async with trio.open_nursery() as queued:  # they wait for the next claim
                    for i in range(1, 10):
                        queued.start_soon(one, i)
            assert late.cancelled_caught
            cancelled_at = trio.current_time()
        await trio.sleep(5)  # time for any claim still to come
        return cancelled_at

    async with trioplay.open_runtime(store=store) as rt:
        cancelled_at = await rt.run(play, {}, run_id="r")
    assert cancelled_at == pytest.approx(0.5)  # the cancelled callers left at once
    assert ran == [0]
    assert store.claimed_keys == 1  # the steps cancelled while queued were never claimed
    assert await store.count_receipts("r") == {"completed": 1}
