"""The map stall observer in virtual time."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import map_with_hung_rows, registry

KEYS = [
    "map",
    "page_offset",
    "resolver_active",
    "fetch_active",
    "oldest_fetch_ms",
    "terminal_admission_waiting",
    "terminal_commit_waiting",
    "terminal_write_active",
    "terminal_queued",
    "terminal_committed",
    "oldest_unsettled_ms",
    "oldest_phase",
    "last_terminal_commit_ms",
]


def stall_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[float, dict[str, Any]]]:
    lines = []
    for record in caplog.records:
        if record.name == "trioplay.stall":
            text = record.getMessage()
            assert text.startswith("[runtime.map_stall] ")
            lines.append((record.created, json.loads(text.removeprefix("[runtime.map_stall] "))))
    return lines


@pytest.mark.deadline(2000)
async def test_a_hung_tool_logs_once_per_interval(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trioplay.stall")
    events: list[tuple[float, dict[str, Any]]] = []

    async def hangs(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(200)
        return {"ok": True}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("slow", {"id": row["id"]})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"id": "1"}]).with_column("x", resolver).run(key="id")

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.stall":
            events.append((event.at - start, event.data))

    start = trio.current_time()
    async with trioplay.open_runtime(
        store=MemoryStore(),
        tools=registry(slow=hangs),
        limits=trioplay.Limits(stall_log_interval=60),
        on_event=on_event,
    ) as rt:
        result = await rt.run(play, {}, run_id="r")
    assert result.completed_count == 1
    lines = stall_lines(caplog)
    assert len(lines) == 3
    assert [round(at) for at, _ in events] == [60, 120, 180]
    for (_, line), (_, data) in zip(lines, events, strict=True):
        assert list(line)[: len(KEYS)] == KEYS  # the reference's keys, in order, then ours
        assert line == data
        assert line["resolver_active"] == 1
        assert line["oldest_phase"] == "resolver"
        assert line["map"] == "s"
        assert line["terminal_committed"] == 0
    assert [line["oldest_unsettled_ms"] for _, line in lines] == pytest.approx(
        [60_000, 120_000, 180_000], abs=20
    )


@pytest.mark.deadline(2000)
async def test_a_map_committing_every_ten_seconds_is_silent(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> int:
        await trio.sleep(10 * (int(row["id"]) + 1))
        return 1

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": str(i)} for i in range(30)]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="id")

    async with trioplay.open_runtime(
        store=MemoryStore(), limits=trioplay.Limits(stall_log_interval=60)
    ) as rt:
        result = await rt.run(play, {}, run_id="r")
    assert result.completed_count == 30
    assert trio.current_time() >= 300
    assert stall_lines(caplog) == []


@pytest.mark.deadline(2000)
async def test_fetch_phase_is_reported(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The observer attributes a resolver waiting in ``fetch`` to phase "fetch"."""
    from trioplay._map._stall import MapStallObserver

    reports: list[dict[str, Any]] = []
    observer = MapStallObserver(
        map_name="m",
        page_offset=0,
        interval=60,
        writer_diagnostics=lambda: None,
        emit=reports.append,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(observer.run)
        token = observer.resolver_started()
        await trio.sleep(10)
        observer.set_phase(token, "fetch")
        await trio.sleep(55)
        observer.resolver_finished(token)
        await trio.sleep(200)
        nursery.cancel_scope.cancel()
    assert len(reports) == 1
    assert reports[0]["fetch_active"] == 1
    assert reports[0]["oldest_fetch_ms"] == 50_000
    assert reports[0]["oldest_phase"] == "fetch"


NEW_KEYS = [
    "governor_waiting",
    "oldest_governor_ms",
    "oldest_tool",
    "oldest_provider",
    "oldest_row_key",
    "store_active",
    "oldest_store_ms",
    "oldest_store_operation",
    "loop_lag_ms",
    "oldest_receipt_owner",
    "oldest_awaiting",
    "slow_progress",
]


def by_page(lines: list[tuple[float, dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """The first stall line of each page."""
    first: dict[int, dict[str, Any]] = {}
    for _, line in lines:
        assert list(line) == KEYS + NEW_KEYS
        first.setdefault(line["page_offset"], line)
    return first


def one_row_play(resolver: Any) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": "r1"}, {"id": "r2"}]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="id")

    return play


@pytest.mark.deadline(2000)
async def test_a_row_in_a_hung_tool_call_names_the_tool_provider_and_row(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Phase resolver: r2's call hangs after it was admitted.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def finder(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        if input["id"] == "r2":
            await trio.sleep(200)
        return {"ok": True}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("finder", {"id": row["id"]})

    tools = trioplay.ToolRegistry()
    tools.add("finder", finder, provider="acme")
    async with trioplay.open_runtime(store=MemoryStore(), tools=tools) as rt:
        with trio.move_on_after(130):
            await rt.run(one_row_play(resolver), {}, run_id="r")
    line = by_page(stall_lines(caplog))[0]
    assert line["oldest_phase"] == "resolver"
    assert (line["oldest_tool"], line["oldest_provider"], line["oldest_row_key"]) == (
        "finder",
        "acme",
        "r2",
    )
    assert (line["governor_waiting"], line["oldest_governor_ms"]) == (0, 0)


@pytest.mark.deadline(2000)
async def test_a_row_waiting_for_a_rate_turn_is_in_phase_governor(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Phase governor: Rate(1, per=1000) admits one row's call at once, the
    # other's only at 1000 s.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def finder(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        return {"ok": True}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("finder", {"id": row["id"]})

    tools = trioplay.ToolRegistry()
    tools.add("finder", finder, provider="acme", rate=trioplay.Rate(1, per=1000.0))
    async with trioplay.open_runtime(store=MemoryStore(), tools=tools) as rt:
        with trio.move_on_after(130):
            await rt.run(one_row_play(resolver), {}, run_id="r")
    line = by_page(stall_lines(caplog))[0]
    assert line["oldest_phase"] == "governor"
    assert (line["oldest_tool"], line["oldest_provider"]) == ("finder", "acme")
    assert line["oldest_row_key"] in {"r1", "r2"}
    assert (line["resolver_active"], line["terminal_committed"]) == (1, 1)
    assert line["governor_waiting"] == 1
    assert line["oldest_governor_ms"] == pytest.approx(120_000, abs=50)
    assert (line["fetch_active"], line["oldest_fetch_ms"]) == (0, 0)


@pytest.mark.deadline(2000)
async def test_a_fetch_is_in_phase_fetch_only_once_admitted(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # One global slot: r1's fetch has it and hangs (phase fetch), r2's fetch
    # waits for it (phase governor, not fetch).
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def hangs(request: httpx.Request) -> httpx.Response:
        await trio.sleep(1000)
        return httpx.Response(200, text="late")

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.fetch(f"http://127.0.0.1/{row['id']}")).text

    async with trioplay.open_runtime(
        store=MemoryStore(),
        allow_networks=["127.0.0.0/8"],
        http_transport=httpx.MockTransport(hangs),
        limits=trioplay.Limits(max_concurrent_external_calls=1),
        fetch_timeouts=trioplay.FetchTimeouts(headers=5000, body=5000, total=5000),
    ) as rt:
        with trio.move_on_after(70):
            await rt.run(one_row_play(resolver), {}, run_id="r")
    line = by_page(stall_lines(caplog))[0]
    assert line["resolver_active"] == 2
    assert (line["fetch_active"], line["governor_waiting"]) == (1, 1)
    assert line["oldest_phase"] == "fetch"
    assert (line["oldest_tool"], line["oldest_provider"]) == ("fetch", "fetch")
    assert line["oldest_row_key"] in {"r1", "r2"}
    assert line["oldest_fetch_ms"] == pytest.approx(60_000, abs=50)
    assert line["oldest_governor_ms"] == pytest.approx(60_000, abs=50)


class SlowThenHungWrites(MemoryStore):
    """The first sheet write takes 10 s, every later one never returns."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def write_terminal_rows(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.writes > 1:
            await trio.sleep_forever()
        await trio.sleep(10)
        return await super().write_terminal_rows(*args, **kwargs)


@pytest.mark.deadline(2000)
async def test_rows_waiting_for_the_writer_are_named_by_phase_and_key(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # One row per page, finishing at 1, 2, 3 and 4 s; the writer's buffer
    # holds one row. r0 is written from 1 s to 11 s (and commits); r1 waits
    # in the buffer from 2 s, then in the second write, which never ends; r2
    # and r3 wait for admission from 3 s and 4 s, and at 11 s one of them
    # gets the buffer's place while the other still waits.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def resolver(row: trioplay.Row, _rc: trioplay.RowContext) -> Any:
        await trio.sleep(int(row["id"][1:]) + 1)
        return 1

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"id": f"r{i}"} for i in range(4)]
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="id", page_size=1)

    async with trioplay.open_runtime(
        store=SlowThenHungWrites(), limits=trioplay.Limits(writer_buffer_bytes=1)
    ) as rt:
        with trio.move_on_after(70):
            await rt.run(play, {}, run_id="r")
    pages = by_page(stall_lines(caplog))
    assert {offset: line["oldest_row_key"] for offset, line in pages.items()} == {
        1: "r1",
        2: "r2",
        3: "r3",
    }
    assert pages[1]["oldest_phase"] == "writer_commit"
    assert {pages[2]["oldest_phase"], pages[3]["oldest_phase"]} == {
        "writer_commit",
        "writer_admission",
    }
    assert all(line["oldest_tool"] is None for line in pages.values())


@pytest.mark.deadline(300)
async def test_the_stall_lines_name_three_hung_rows_in_three_pages(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 12, acceptance 1b, second half: 5,000 rows, one call hanging in
    # each of the first three pages; each page's stall line names its row.
    caplog.set_level(logging.WARNING, logger="trioplay.stall")
    play, tools = map_with_hung_rows()

    async with trioplay.open_runtime(store=MemoryStore(), tools=tools) as rt:
        with trio.move_on_after(125):
            await rt.run(play, {}, run_id="r")
    pages = by_page(stall_lines(caplog))
    assert {offset: line["oldest_row_key"] for offset, line in pages.items()} == {
        0: "d5.example",
        1000: "d1005.example",
        2000: "d2005.example",
    }
    for line in pages.values():
        assert (line["oldest_phase"], line["oldest_tool"], line["oldest_provider"]) == (
            "resolver",
            "finder",
            "finder",
        )
        assert line["resolver_active"] == 1
