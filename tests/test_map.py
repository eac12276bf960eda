"""Dataset execution on the memory store: columns, errors, resume, results."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, find_email, leads, map_with_hung_rows, registry


async def run_play(play: Any, store: MemoryStore, tools: trioplay.ToolRegistry, **kw: Any) -> Any:
    async with trioplay.open_runtime(store=store, tools=tools, **kw) as rt:
        return await rt.run(play, {}, run_id="r1")


async def test_columns_run_in_order_and_see_earlier_columns() -> None:
    tool = CountingTool()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await (
            ctx.dataset("sheet", leads(30))
            .with_column("email", find_email)
            .with_column("user", lambda row, rc: row["email"].split("@")[0])
            .run(key="domain")
        )

    result = await run_play(play, MemoryStore(), registry(finder=tool))
    assert (result.completed_count, result.failed_count, result.skipped_count) == (30, 0, 0)
    assert result.retained_rows_complete
    rows = [row async for row in result.rows()]
    assert [r["domain"] for r in rows] == [f"d{i}.example" for i in range(30)]
    assert rows[3] == {"domain": "d3.example", "email": "info@d3.example", "user": "info"}
    assert len(result.preview) == 5
    assert tool.calls == 30


async def test_rerun_skips_committed_rows_and_pays_nothing() -> None:
    tool = CountingTool()
    store = MemoryStore()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return (
            await ctx.dataset("sheet", leads(50)).with_column("email", find_email).run(key="domain")
        )

    first = await run_play(play, store, registry(finder=tool))
    second = await run_play(play, store, registry(finder=tool))
    assert first.completed_count == 50
    assert (second.completed_count, second.skipped_count) == (0, 50)
    assert tool.calls == 50
    assert not second.retained_rows_complete  # the rows were committed by the first attempt
    assert len([row async for row in second.rows()]) == 50


async def test_duplicate_keys_are_skipped_and_counted() -> None:
    rows = [*leads(10), *leads(3)]

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return (
            await ctx.dataset("s", rows)
            .with_column("email", find_email)
            .run(key="domain", page_size=4)
        )

    result = await run_play(play, MemoryStore(), registry(finder=CountingTool()))
    assert (result.completed_count, result.skipped_count, result.duplicate_count) == (10, 3, 3)


async def test_isolate_records_the_failed_row_and_siblings_go_on() -> None:
    tool = CountingTool(fail_on={"d2.example"})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(5)).with_column("email", find_email).run(key="domain")

    result = await run_play(play, MemoryStore(), registry(finder=tool))
    assert (result.completed_count, result.failed_count) == (4, 1)
    failed = [row async for row in result.rows(status="failed")]
    assert failed == [{"domain": "d2.example", "_error": "ToolExecutionError: no such domain"}]


async def test_fail_mode_persists_the_row_then_raises_its_error() -> None:
    store = MemoryStore()

    def explode(row: trioplay.Row, _rc: trioplay.RowContext) -> str:
        if row["domain"] == "d1.example":
            raise ValueError("boom")
        return "ok"

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (
            await ctx.dataset("s", leads(3))
            .with_column("x", explode)
            .run(key="domain", on_row_error="fail")
        )

    with pytest.raises(ValueError, match="boom") as info:
        await run_play(play, store, registry())
    assert any("row 'd1.example'" in note for note in info.value.__notes__)
    assert (await store.sheet_status("r1", "s", ["d1.example"]))["d1.example"].status == "failed"


async def test_resolver_output_that_is_not_json_fails_the_row_naming_the_column() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(2)).with_column("when", lambda r, rc: {1, 2}).run()

    result = await run_play(play, MemoryStore(), registry())
    assert result.failed_count == 2
    (row, _) = [row async for row in result.rows(status="failed")]
    assert row["_error"].startswith("RowOutputNotJsonSerializable: column 'when' holds a set")


async def test_unknown_tool_fails_the_run_naming_the_tool() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("findr", {"domain": row["domain"]})

        return await ctx.dataset("s", leads(3)).with_column("x", resolver).run()

    with pytest.raises(
        trioplay.UnknownToolError, match=r"unknown tool id 'findr'; registered tools: finder"
    ):
        await run_play(play, MemoryStore(), registry(finder=CountingTool()))


async def test_resolver_raising_is_recorded_with_type_and_message() -> None:
    def bad(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        return row["no_such_field"]

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(1)).with_column("x", bad).run()

    result = await run_play(play, MemoryStore(), registry())
    (row,) = [row async for row in result.rows(status="failed")]
    assert row["_error"] == "KeyError: 'no_such_field'"


async def test_rows_failed_in_an_earlier_attempt_run_again() -> None:
    store = MemoryStore()
    flaky = {"fail": True}

    def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> str:
        if flaky["fail"] and row["domain"] == "d0.example":
            raise RuntimeError("transient")
        return "ok"

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(3)).with_column("x", resolver).run(key="domain")

    first = await run_play(play, store, registry())
    flaky["fail"] = False
    second = await run_play(play, store, registry())
    assert (first.completed_count, first.failed_count) == (2, 1)
    assert (second.completed_count, second.skipped_count) == (1, 2)


async def test_identical_calls_in_flight_share_one_execution() -> None:
    tool = CountingTool(delay=0.05)
    rows = [{"id": str(i), "domain": "same.example"} for i in range(20)]

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", rows).with_column("email", find_email).run(key="id")

    result = await run_play(play, MemoryStore(), registry(finder=tool))
    assert result.completed_count == 20
    assert tool.calls == 1


async def test_retained_rows_budget_releases_the_cache_instead_of_failing() -> None:
    limits = trioplay.Limits(retained_rows_budget_bytes=2_000)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(200)).with_column("email", find_email).run(key="domain")

    result = await run_play(play, MemoryStore(), registry(finder=CountingTool()), limits=limits)
    assert result.completed_count == 200
    assert not result.retained_rows_complete
    rows = [row async for row in result.rows()]
    assert [r["domain"] for r in rows] == [f"d{i}.example" for i in range(200)]


async def test_rows_are_bounded_by_the_row_limiter() -> None:
    active = 0
    peak = 0

    async def slow(row: trioplay.Row, _rc: trioplay.RowContext) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await trio.sleep(0.01)
        active -= 1
        return "ok"

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(100)).with_column("x", slow).run(page_size=30)

    limits = trioplay.Limits(max_concurrent_rows=7)
    result = await run_play(play, MemoryStore(), registry(), limits=limits)
    assert result.completed_count == 100
    assert peak == 7


async def test_missing_key_field_fails_its_row() -> None:
    # Issue 14: a bad key is a row error (isolated here), no longer the map's.
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"domain": "a"}, {"name": "b"}]).run(key="domain")

    result = await run_play(play, MemoryStore(), registry())
    assert (result.completed_count, result.failed_count) == (1, 1)
    [failed] = [row async for row in result.rows(status="failed")]
    assert re.search(r"row 1: the key field 'domain' is missing", failed["_error"])


async def test_rows_added_to_a_finished_page_run_on_resume() -> None:
    store = MemoryStore()
    data = leads(5)
    tool = CountingTool()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await (
            ctx.dataset("s", list(data))
            .with_column("email", find_email)
            .run(key="domain", page_size=3)
        )

    first = await run_play(play, store, registry(finder=tool))
    data.extend(leads(7)[5:])  # two rows appended: the second page was not full
    second = await run_play(play, store, registry(finder=tool))
    assert first.completed_count == 5
    assert (second.completed_count, second.skipped_count) == (2, 5)
    assert tool.calls == 7


async def test_a_row_over_the_memory_budget_fails_keeping_its_input_fields() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> trioplay.MapResult:
        return await ctx.dataset("s", leads(2)).with_column("blob", lambda r, rc: "x" * 5000).run()

    limits = trioplay.Limits(active_rows_budget_bytes=4096)
    result = await run_play(play, MemoryStore(), registry(), limits=limits)
    assert result.failed_count == 2
    rows = [row async for row in result.rows(status="failed")]
    assert all(row["_error"].startswith("MapMemoryLimitError: the row is") for row in rows)
    assert all("blob" not in row for row in rows)
    # Its input fields stay, so that the failed row says which lead it was.
    assert sorted(row["domain"] for row in rows) == ["d0.example", "d1.example"]


@pytest.mark.deadline(300)
async def test_three_hung_rows_in_three_pages_do_not_stall_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One call hangs in each of the first three pages (page_size 1000).
    play, tools = map_with_hung_rows()

    progress: list[tuple[float, int]] = []

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            progress.append((event.at - start, event.data["completed"]))

    store = MemoryStore()
    start = trio.current_time()
    with trio.move_on_after(120):
        async with trioplay.open_runtime(store=store, tools=tools, on_event=on_event) as rt:
            await rt.run(play, {}, run_id="r")
    assert (await store.count_rows("r", "s")).get("completed", 0) == 4997
    # 256 rows at a time, 50 ms each: the row limit allows about 5,000 rows/s.
    done_at = min(at for at, completed in progress if completed == 4997)
    assert done_at < 5.0


async def test_the_same_dataset_twice_in_one_run_streams_the_whole_sheet() -> None:
    # Issue 14: the second map skipped the first one's keys as duplicates but
    # kept its cache "complete", so rows() missed the first map's rows.
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        await ctx.dataset("s", [{"k": 1}, {"k": 2}]).run(key="k")
        second = await ctx.dataset("s", [{"k": 2}, {"k": 3}]).run(key="k")
        return second, [row async for row in second.rows()]

    second, rows = await run_play(play, MemoryStore(), registry())
    assert (second.completed_count, second.duplicate_count) == (1, 1)
    assert not second.retained_rows_complete
    assert rows == [{"k": 1}, {"k": 2}, {"k": 3}]
