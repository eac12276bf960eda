"""The map stall observer in virtual time."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import registry

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
        assert list(line) == KEYS
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
