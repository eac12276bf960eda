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

    def corrupt(self, column: str, text: str, *, status: str, containing: str = "") -> str:
        """Overwrite ``column`` of the one receipt with ``status`` (and text); return its key."""
        if self.kind == "memory":
            receipts = self.memory._receipts
            (key,) = [
                key
                for key, receipt in receipts.items()
                if receipt.status == status and containing in (getattr(receipt, column) or "")
            ]
            receipts[key] = attrs.evolve(receipts[key], **{column: text})  # type: ignore[arg-type]
            return key
        with sqlite3.connect(self.path) as conn:
            rows = conn.execute(
                f"SELECT key FROM receipts WHERE status = ? AND {column} LIKE ?",
                (status, f"%{containing}%"),
            ).fetchall()
            (key,) = [row[0] for row in rows]
            conn.execute(f"UPDATE receipts SET {column} = ? WHERE key = ?", (text, key))
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
async def test_a_corrupt_result_fails_only_the_rows_that_replay_it(
    kind: str, tmp_path: Path
) -> None:
    stores = Corruptible(kind, tmp_path)
    tool = CountingTool()
    assert (await run_fifty(stores.store, tool, "one"))[0] == 50
    key = stores.corrupt(
        "result_json", '{"email": "info@d7.exa', status="completed", containing="d7."
    )

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

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, stale_after: float | None) -> Any:
        return await ctx.step("started", lambda: 42, stale_after=stale_after)

    async def run(stale_after: float | None = None) -> Any:
        async with trioplay.open_runtime(store=store) as rt:
            return await rt.run(play, stale_after, run_id="r")

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
