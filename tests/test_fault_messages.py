"""Issue 24, point 4: telling the operator what happened.

A store that is slow call after call (a lock, statements waiting for their
timeout) is named as the stall's cause (``store``) in the first stall line,
although no one call lasts a whole interval; one error raised in many rows
is said once, with how many more failed the same way; a full disk and an
I/O error are told apart. Each test here failed before the fix.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._cli._common import describe_error
from trioplay._groups import collapse, note_counted
from trioplay.adapters import Latency
from trioplay.adapters.faults import SlowStore, StoreOutage, StoreWrapper, block_loop
from trioplay.stores.memory import MemoryStore
from trioplay.stores.sqlite import SqliteStore


def _stall_phases(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str | None]]:
    lines = []
    for record in caplog.records:
        if record.name == "trioplay.stall":
            line = json.loads(record.getMessage().removeprefix("[runtime.map_stall] "))
            lines.append((line["oldest_phase"], line["oldest_store_operation"]))
    return lines


def _tools() -> trioplay.ToolRegistry:
    tools = trioplay.ToolRegistry()

    @tools.tool("t")
    async def t(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        return input["n"]

    return tools


async def _three_calls(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    total = 0
    for n in range(3):
        total += await rc.tool("t", {"row": row["id"], "n": n})
    return total


@trioplay.play("slow-store")
async def _play(ctx: trioplay.PlayContext, _input: Any) -> Any:
    rows = [{"id": i} for i in range(2)]
    result = await ctx.dataset("s", rows).with_column("x", _three_calls).run(key="id")
    return result.completed_count


@pytest.mark.deadline(600)
async def test_a_store_slow_call_after_call_is_the_stalls_cause_in_the_first_line(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Every claim takes 25 s (a lock, say): no call lasts the 60 s interval,
    # but the store is busy for the whole of it, and no row commits.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")
    store = SlowStore(MemoryStore(), Latency.fixed(25.0), operations={"claim_many"})
    async with trioplay.open_runtime(store=store, tools=_tools()) as rt:
        with trio.move_on_after(61):
            await rt.run(_play, {}, run_id="r")
    phases = _stall_phases(caplog)
    assert phases, "no stall line"
    assert phases[0] == ("store", "claim_many")


@pytest.mark.deadline(600)
async def test_a_store_call_hung_since_mid_interval_is_named_in_that_intervals_line(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Row 1's write hangs from 10 s on; row 2 runs on. By the first line, at
    # 60 s, the write has been unanswered for 50 s: most of the interval,
    # although not all of it.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def slow(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        await trio.sleep(10 if row["id"] == 1 else 1000)
        return 1

    @trioplay.play("hung-write")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": 1}, {"id": 2}]
        return await ctx.dataset("s", rows).with_column("x", slow).run(key="id")

    store = StoreOutage(MemoryStore(), start=5.0, operations={"write_terminal_rows"})
    async with trioplay.open_runtime(store=store) as rt:
        with trio.move_on_after(61):
            await rt.run(play, {}, run_id="r")
    assert _stall_phases(caplog)[:1] == [("store", "write_terminal_rows")]


# -- one cause, said once ------------------------------------------------------------------


async def test_one_store_error_in_many_rows_is_said_once_and_counted() -> None:
    tools = _tools()

    async def one_call(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("t", {"n": row["id"]})

    @trioplay.play("outage")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": i} for i in range(40)]
        return await ctx.dataset("s", rows).with_column("x", one_call).run(key="id")

    store = StoreOutage(MemoryStore(), start=0.0, hang=False, operations={"claim_many"})
    async with trioplay.open_runtime(store=store, tools=tools) as rt:
        with pytest.raises(trioplay.StoreError) as caught:
            await rt.run(play, {}, run_id="r")
    line = describe_error(caught.value)
    assert re.fullmatch(
        r"StoreError: simulated store outage: claim_many refused \(dataset 's', row '\d+',"
        r" column 'x'; \d+ more rows failed the same way\)",
        line,
    ), line


def test_errors_beside_the_first_are_counted_not_listed() -> None:
    same = [ValueError("the first") for _ in range(26)]
    shared = OSError("one object raised in many tasks")
    group = ExceptionGroup("g", [*same, KeyError("other"), KeyError("another"), shared, shared])
    assert collapse(group) is same[0]
    assert same[0].__notes__ == [
        "trioplay: 28 further error(s) in the same scope: 25 failed the same way, 2 KeyError,"
        " 1 OSError"
    ]


def test_a_note_repeated_on_one_error_is_counted() -> None:
    error = RuntimeError("store gone")
    for row in range(26):
        note_counted(error, "rows", f"trioplay: row {row}")
    error.add_note("trioplay: something else")
    note_counted(error, "rows", "trioplay: row 26")
    assert error.__notes__ == [
        "trioplay: row 0",
        "trioplay: 26 more rows failed the same way",
        "trioplay: something else",
    ]


# -- a full disk, an I/O error ---------------------------------------------------------------


async def test_a_full_disk_is_told_from_an_io_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.open()
    try:
        # A real SQLITE_FULL: the database may not grow past its pages now.
        def cap(conn: sqlite3.Connection) -> None:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")

        await store._call("cap", cap)
        rows = [trioplay.SheetRow(f"k{i}", i, "completed", "x" * 2000, None, 1) for i in range(50)]
        with pytest.raises(trioplay.StoreError) as caught:
            await store.write_terminal_rows("r", "d", rows)
    finally:
        await store.aclose()
    message = str(caught.value)
    assert "database or disk is full; the disk is full (or the database reached its size" in (
        message
    )
    assert "free space, then run the same command again" in message
    assert "I/O" not in message


# -- a loop stall, named as such -----------------------------------------------------------


class _DeadlineStore(StoreWrapper):
    """Sheet writes wait 2 s for an answer, then fail as a store's own deadline does."""

    async def before(self, operation: str) -> None:
        if operation == "write_terminal_rows":
            await trio.sleep(2.0)
            raise trioplay.StoreError("no answer from the database within 2s (call_timeout)")


@pytest.mark.deadline(600)
async def test_a_store_call_that_fails_during_a_loop_stall_says_the_loop_was_blocked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hog(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        await trio.sleep(0.5 if row["id"] == 2 else 0)  # row 1's write is in flight then
        if row["id"] == 2:
            block_loop(5.0)  # a resolver that computes for 5 s without an await
        return row["id"]

    @trioplay.play("loop-stall")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": 1}, {"id": 2}]
        return await ctx.dataset("s", rows).with_column("x", hog).run(key="id")

    limits = trioplay.Limits(writer_max_flush=0.1)
    async with trioplay.open_runtime(store=_DeadlineStore(MemoryStore()), limits=limits) as rt:
        with pytest.raises(trioplay.StoreError) as caught:
            await rt.run(play, {}, run_id="r")
    assert any(
        note.startswith("trioplay: the event loop was blocked for ")
        and "while this store call was in flight (a loop stall" in note
        for note in caught.value.__notes__
    ), caught.value.__notes__
