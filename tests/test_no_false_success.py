"""Issue 24, point 3: no false success.

Play, resolver and tool code that raises ``SystemExit``, ``KeyboardInterrupt``,
``GeneratorExit`` or another ``BaseException`` fails its row and its run
with a :class:`trioplay.PlayAborted` naming the row and the resolver (the
command line exits 5, whatever code was asked for); only a real Ctrl-C is
an interrupt. An encoder error of any kind fails its call and settles its
receipt. A SQLite database deleted or replaced under a run fails the run at
its next write. Each test here failed before the fix.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trioplay
from trioplay.stores.sqlite import SqliteStore

from .support import cli

RAISED = {
    "SystemExit(0)": lambda: SystemExit(0),
    "SystemExit(3)": lambda: SystemExit(3),
    "KeyboardInterrupt()": KeyboardInterrupt,
    "GeneratorExit()": GeneratorExit,
    "BaseException('boom')": lambda: BaseException("boom"),
}


def _resolver_raising(make: Any) -> Any:
    def check(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        if row["i"] == 3:
            raise make()
        return row["i"] * 2

    return check


def _play_of(resolver: Any, on_row_error: str = "isolate") -> Any:
    @trioplay.play("aborts")
    async def play(ctx: trioplay.PlayContext, input: Any) -> Any:
        rows = [{"i": i} for i in range(8)]
        result = await (
            ctx.dataset("d", rows)
            .with_column("v", resolver)
            .run(key="i", on_row_error=on_row_error)  # type: ignore[arg-type]
        )
        return result.completed_count

    return play


@pytest.mark.parametrize("shown", list(RAISED))
async def test_a_resolver_raising_a_base_exception_fails_its_row_and_the_run(
    tmp_path: Path, shown: str
) -> None:
    store = SqliteStore(tmp_path / "s.db")
    async with trioplay.open_runtime(store=store) as rt:
        with pytest.raises(trioplay.PlayAborted) as caught:
            await rt.run(_play_of(_resolver_raising(RAISED[shown])), {}, run_id="r")
        record = await store.get_run("r")
        rows = await _rows(store)
    error = caught.value
    assert str(error).startswith(
        f"dataset 'd', row '3', resolver _resolver_raising.<locals>.check (column 'v')"
        f" raised {shown}, which is not an Exception, so the run failed"
    )
    assert error.raised == shown.partition("(")[0]
    assert type(error.__cause__).__name__ == error.raised
    assert record is not None
    assert record.status == "failed"
    assert (record.error or "").startswith("PlayAborted: dataset 'd'")
    assert rows["3"].status == "failed"
    assert (rows["3"].error or "").startswith("PlayAborted: ")


async def test_under_isolate_an_abort_still_fails_the_run(tmp_path: Path) -> None:
    """``on_row_error="isolate"`` isolates errors, not a request to stop the process."""
    play = _play_of(_resolver_raising(lambda: SystemExit(0)), on_row_error="isolate")
    async with trioplay.open_runtime(store=f"sqlite:///{tmp_path / 's.db'}") as rt:
        with pytest.raises(trioplay.PlayAborted):
            await rt.run(play, {})


async def test_a_tool_raising_system_exit_fails_the_call_and_releases_its_receipt(
    tmp_path: Path,
) -> None:
    tools = trioplay.ToolRegistry()

    @tools.tool("quits")
    async def quits(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        if input["i"] == 2:
            sys.exit(4)
        return input["i"]

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("quits", {"i": row["i"]})

    store = SqliteStore(tmp_path / "s.db")
    async with trioplay.open_runtime(store=store, tools=tools) as rt:
        with pytest.raises(trioplay.PlayAborted) as caught:
            await rt.run(_play_of(resolver), {}, run_id="r")
        receipts = await store.count_receipts("r")
    assert str(caught.value).startswith("tool 'quits' raised SystemExit(4), which is not")
    notes = getattr(caught.value, "__notes__", [])
    assert "trioplay: dataset 'd', row '2', resolver " in " ".join(notes)
    # Not recorded as the tool's answer, and never left running: a rerun calls again.
    assert "running" not in receipts
    assert "failed" not in receipts


async def test_a_play_raising_system_exit_fails_the_run(tmp_path: Path) -> None:
    @trioplay.play("quits")
    async def play(ctx: trioplay.PlayContext, input: Any) -> Any:
        await ctx.step("first", lambda: 1)
        raise SystemExit(0)

    store = SqliteStore(tmp_path / "s.db")
    async with trioplay.open_runtime(store=store) as rt:
        with pytest.raises(trioplay.PlayAborted, match=r"^play 'quits' raised SystemExit\(0\)"):
            await rt.run(play, {}, run_id="r")
        record = await store.get_run("r")
    assert record is not None
    assert record.status == "failed"


def test_a_real_ctrl_c_in_a_resolver_is_still_an_interrupt(tmp_path: Path) -> None:
    """Trio's SIGINT handler, landing in a resolver, raises a KeyboardInterrupt that stays one."""

    def interrupted(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        if row["i"] == 3:
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler)
            assert handler is not signal.default_int_handler  # Trio's
            handler(signal.SIGINT, sys._getframe())
        return row["i"]

    async def main() -> None:
        with trio.fail_after(10):
            async with trioplay.open_runtime(store=f"sqlite:///{tmp_path / 's.db'}") as rt:
                await rt.run(_play_of(interrupted), {}, run_id="r")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            trio.run(main)
    finally:
        signal.signal(signal.SIGINT, previous)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]


# -- encoder errors ------------------------------------------------------------------------


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


async def test_a_result_too_deep_to_encode_fails_its_call_and_settles_its_receipt(
    tmp_path: Path,
) -> None:
    tools = trioplay.ToolRegistry()

    @tools.tool("deep")
    async def deep(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        return _deep(200_000) if input["i"] == 1 else input["i"]

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("deep", {"i": row["i"]})

    store = SqliteStore(tmp_path / "s.db")
    async with trioplay.open_runtime(store=store, tools=tools) as rt:
        with trio.fail_after(20):
            assert await rt.run(_play_of(resolver), {}, run_id="r") == 7
        receipts = await store.count_receipts("r")
        rows = await _rows(store)
    assert receipts == {"completed": 7, "failed": 1}
    error = rows["1"].error
    assert error is not None
    assert error.startswith(
        "ToolExecutionError: tool 'deep' returned a value that cannot be stored as JSON:"
        " RecursionError: maximum recursion depth exceeded"
    )


async def test_a_row_too_deep_to_encode_fails_the_row(tmp_path: Path) -> None:
    def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return _deep(200_000) if row["i"] == 5 else row["i"]

    store = SqliteStore(tmp_path / "s.db")
    async with trioplay.open_runtime(store=store) as rt:
        assert await rt.run(_play_of(resolver), {}, run_id="r") == 7
        rows = await _rows(store)
    error = rows["5"].error
    assert error is not None
    assert error.startswith(
        "RowOutputNotJsonSerializable: column 'v' holds a list that cannot be stored as JSON"
        " (maximum recursion depth exceeded"
    )


async def _rows(store: SqliteStore) -> dict[str, trioplay.SheetRow]:
    return {row.key: row for row in await store.read_rows("r", "d")}


# -- the SQLite file deleted or replaced ----------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "replaced", "folder deleted"])
async def test_a_sqlite_file_deleted_or_replaced_fails_the_run_at_its_next_write(
    tmp_path: Path, how: str
) -> None:
    folder = tmp_path / "store"
    db = folder / "s.db"

    def vandal(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        if row["i"] == 3:
            for name in ("s.db", "s.db-wal", "s.db-shm"):
                (folder / name).unlink(missing_ok=True)
            if how == "replaced":
                sqlite3.connect(db).close()  # another, empty, database by the same name
            elif how == "folder deleted":
                folder.rmdir()
        return row["i"]

    @trioplay.play("vandal")
    async def play(ctx: trioplay.PlayContext, input: Any) -> Any:
        first = await ctx.dataset("a", [{"i": i} for i in range(8)]).run(key="i")
        await ctx.dataset("b", [{"i": i} for i in range(8)]).with_column("v", vandal).run(key="i")
        return first.completed_count

    async with trioplay.open_runtime(store=f"sqlite:///{db}") as rt:
        with pytest.raises(trioplay.StoreError) as caught:
            await rt.run(play, {}, run_id="r")
    assert f"the database file {db} was deleted or replaced while the run was writing to it" in str(
        caught.value
    )


async def test_the_same_file_reopened_is_not_taken_for_a_replaced_one(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    for _ in range(2):
        async with trioplay.open_runtime(store=f"sqlite:///{db}") as rt:
            assert await rt.run(_play_of(lambda row, rc: row["i"]), {}, run_id="r") >= 0
    assert os.path.exists(db)


# -- the command line ----------------------------------------------------------------------

PLAY = """
import trioplay

def check(row, rc):
    if row["i"] == 3:
        raise {raised}
    return row["i"]

@trioplay.play("aborts")
async def aborts(ctx, input):
    result = await ctx.dataset("d", [{{"i": i}} for i in range(6)]).with_column(
        "v", check).run(key="i")
    return result.completed_count
"""


@pytest.mark.parametrize("raised", ["SystemExit(0)", "SystemExit(3)", "KeyboardInterrupt"])
def test_the_command_line_exits_5_with_the_summary(tmp_path: Path, raised: str) -> None:
    play = tmp_path / "aborts.py"
    play.write_text(PLAY.format(raised=raised))
    done = cli("run", str(play), "--store", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert "run aborts-" in done.stdout  # the summary
    assert ": failed" in done.stdout
    last = done.stderr.strip().splitlines()
    assert any(
        line.startswith("error: PlayAborted: dataset 'd', row '3', resolver check (column 'v')")
        for line in last
    ), done.stderr
    assert "interrupted" not in done.stderr
    assert "Traceback" not in done.stderr
