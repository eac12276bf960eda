"""The terminal-row writer in virtual time: flush latency, backpressure, failures."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._cleanup import CleanupBudget
from trioplay._cli._progress import MapProgress, RunOutcome, format_summary
from trioplay._groups import open_nursery
from trioplay._limits import Limits
from trioplay._map._pages import Page
from trioplay._map._plan import Plan
from trioplay._map._writer import TerminalRow, TerminalRowWriter
from trioplay._records import SheetRow, SheetWrite
from trioplay.stores.memory import MemoryStore

PAGE = Page(0, Plan([]), None)  # type: ignore[arg-type]  # the writer needs only its lease


def item(key: str, size: int = 10) -> TerminalRow:
    return TerminalRow(SheetRow(key, int(key), "completed", "{}"), size, PAGE, 0, None)


class Harness:
    def __init__(self, store: Any, **kw: Any) -> None:
        self.committed_at: dict[str, float] = {}
        self.refused_rows: list[tuple[TerminalRow, SheetWrite]] = []
        self.unconfirmed = 0
        limits = Limits(
            writer_buffer_bytes=kw.get("buffer_bytes", 1000),
            writer_max_flush=kw.get("max_flush", 0.1),
        )
        self.writer = TerminalRowWriter(
            store, "run", "ds", limits, cleanup=CleanupBudget(1.0), commits=self
        )

    def committed(self, batch: list[TerminalRow]) -> None:
        for row in batch:
            assert row.row.key not in self.committed_at
            self.committed_at[row.row.key] = trio.current_time()

    def refused(self, items: list[tuple[TerminalRow, SheetWrite]]) -> None:
        self.refused_rows += items

    def unconfirmed_rows(self, count: int) -> None:
        self.unconfirmed += count


async def test_trickling_rows_commit_within_max_flush_of_the_first_buffered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    h = Harness(store)
    admitted: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(h.writer.run)
        for i in range(40):
            await h.writer.admit(item(str(i)))
            admitted[str(i)] = trio.current_time()
            await trio.sleep(0.037)
        h.writer.close_input()
    assert set(h.committed_at) == set(admitted)
    # Each row commits at most max_flush after the first row of its batch,
    # so at most max_flush after its own admission.
    worst = max(h.committed_at[k] - admitted[k] for k in admitted)
    assert worst <= 0.1 + 1e-9
    assert len(await store.read_rows("run", "ds", limit=100)) == 40


async def test_a_batch_flushes_exactly_at_max_flush(autojump_clock: trio.testing.MockClock) -> None:
    h = Harness(MemoryStore(), max_flush=0.25)
    async with trio.open_nursery() as nursery:
        await nursery.start(h.writer.run)
        start = trio.current_time()
        await h.writer.admit(item("1"))
        await trio.sleep(1)
        assert h.committed_at["1"] - start == pytest.approx(0.25)
        h.writer.close_input()


async def test_a_full_byte_buffer_blocks_admission(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore(write_delay=5.0)
    h = Harness(store, buffer_bytes=100, max_flush=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(h.writer.run)
        start = trio.current_time()
        # 10 rows of 10 bytes fill the buffer; the flush then takes 5 s.
        for i in range(10):
            await h.writer.admit(item(str(i)))
        assert trio.current_time() == start
        # The next batch fills while the first is written; the one after must wait.
        for i in range(10, 20):
            await h.writer.admit(item(str(i)))
        assert h.writer.diagnostics().active_rows == 10
        blocked = trio.current_time()
        await h.writer.admit(item("20"))
        assert trio.current_time() - blocked == pytest.approx(5.0)
        h.writer.close_input()
    assert len(h.committed_at) == 21


async def test_a_failing_write_fails_the_map_and_reports_nothing_uncommitted() -> None:
    store = MemoryStore()
    reported: list[int] = []

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            reported.append(event.data["completed"])
            # The store fails from the first reported commit on.
            store.fail_writes(trioplay.StoreError("memory://: write_terminal_rows: disk full"))

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> str:
        await trio.sleep(0.001)
        return "ok"

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": str(i)} for i in range(5000)]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="id")

    limits = trioplay.Limits(writer_max_flush=0.01, progress_flush_interval=0.001)
    with pytest.raises(trioplay.StoreError, match="disk full"):
        async with trioplay.open_runtime(store=store, limits=limits, on_event=on_event) as rt:
            await rt.run(play, {}, run_id="r")
    in_store = (await store.count_rows("r", "s")).get("completed", 0)
    assert 0 < in_store < 5000
    assert 0 < max(reported) <= in_store


async def test_admit_after_a_failed_write_raises_the_same_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    error = trioplay.StoreError("memory://: write_terminal_rows: gone")
    store.fail_writes(error)
    h = Harness(store)

    async def write_one() -> None:
        async with open_nursery() as nursery:
            await nursery.start(h.writer.run)
            await h.writer.admit(item("1"))
            await trio.sleep(1)

    with pytest.raises(trioplay.StoreError) as info:
        await write_one()
    assert h.writer.error is error
    with pytest.raises(trioplay.StoreError):
        await h.writer.admit(item("2"))
    assert info.value is error


async def test_page_senders_block_on_a_full_buffer_and_their_end_ends_the_writer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore(write_delay=2.0)
    h = Harness(store, buffer_bytes=100, max_flush=0.5)
    finished_at: list[float] = []
    async with trio.open_nursery() as nursery:

        async def run_writer() -> None:
            await h.writer.run()
            finished_at.append(trio.current_time())

        nursery.start_soon(run_writer)
        first, second = h.writer.sender(), h.writer.sender()
        # The writer's own send side closes first: the clones keep it alive.
        h.writer.close_input()
        start = trio.current_time()
        for i in range(10):  # 100 bytes: the buffer is full, the first batch is written
            await first.send(item(str(i)))
        for i in range(10, 20):  # the next batch fills while the first is written
            await second.send(item(str(i)))
        assert trio.current_time() == start
        await second.send(item("20"))  # full: waits for the first write (2 s)
        assert trio.current_time() - start == pytest.approx(2.0)
        first.close()
        await trio.sleep(1)
        assert not finished_at, "a clone is still open: the writer must keep waiting"
        second.close()  # while the second batch is still being written
    # End of channel: the rows sent so far are committed, then the writer ends
    # (with no flush delay for the last batch: the input has ended).
    assert len(h.committed_at) == 21
    assert h.committed_at["20"] - start == pytest.approx(6.0)
    assert finished_at == [h.committed_at["20"]]
    with pytest.raises(RuntimeError, match="stopped"):
        await first.send(item("21"))


class _CommitsThenLosesTheAnswer(MemoryStore):
    """A store whose third write commits, then fails as a lost ``COMMIT`` answer does."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.lost = 0

    async def write_terminal_rows(self, run_id: str, dataset: str, rows: Any, **kw: Any) -> Any:
        written = await super().write_terminal_rows(run_id, dataset, rows, **kw)
        self.writes += 1
        if self.writes == 3:
            self.lost = len(rows)
            raise trioplay.StoreError(
                "memory://: write_terminal_rows: connection lost; the COMMIT was sent but"
                " never confirmed",
                outcome_unknown=True,
            )
        return written


async def test_rows_of_a_write_whose_outcome_is_unknown_are_reported_as_such() -> None:
    """They are not counted committed, nor silently dropped: the sheet may hold them."""
    store = _CommitsThenLosesTheAnswer()
    last: dict[str, Any] = {}

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            last.update(event.data)

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> str:
        await trio.sleep(0.001)
        return "ok"

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": str(i)} for i in range(2000)]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="id")

    limits = trioplay.Limits(writer_max_flush=0.01)
    with trio.fail_after(20), pytest.raises(trioplay.StoreError, match="never confirmed"):
        async with trioplay.open_runtime(store=store, limits=limits, on_event=on_event) as rt:
            await rt.run(play, {}, run_id="r")
    in_store = (await store.count_rows("r", "s")).get("completed", 0)
    assert store.lost > 0
    assert last["unconfirmed"] == store.lost
    assert last["completed"] + last["unconfirmed"] == in_store

    summary = format_summary(RunOutcome(run_id="r", status="failed"), [_progress(last)])
    assert (
        f"  s: {last['completed']:,} completed, 0 failed, 0 skipped; {store.lost:,} more in a"
        " write whose outcome is unknown (the sheet may hold them; a rerun skips those it finds)"
    ) in summary.splitlines()


def _progress(data: dict[str, Any]) -> MapProgress:
    state = MapProgress(name=data["map"], started_at=0.0)
    state.update(data, at=1.0)
    return state


async def test_a_map_does_not_wait_out_the_flush_deadline_after_its_last_row(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Rows whose tool waits 1 s: once the last row is sent, no row can come,
    # so the batch is written then, not writer_max_flush (0.5 s here) later.
    tools = trioplay.ToolRegistry()

    async def wait(input: dict[str, Any], _call: trioplay.ToolCall) -> Any:
        await trio.sleep(1.0)
        return input["i"]

    tools.add("wait", wait)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("wait", {"i": row["i"]})

        rows = [{"i": i} for i in range(8)]
        result = await ctx.dataset("s", rows).with_column("v", resolver).run(key="i")
        return result.completed_count

    limits = Limits(writer_max_flush=0.5)
    async with trioplay.open_runtime(store="memory://", tools=tools, limits=limits) as rt:
        started = trio.current_time()
        assert await rt.run(play, {}, run_id="r") == 8
        assert trio.current_time() - started < 1.1
