"""The event stream of real runs (virtual time): what a row and a call say, stalls,
determinism, the Chrome trace and the timeline picture."""

from __future__ import annotations

import io
import itertools
import json
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._pictures import render_timeline
from trioplay._trace import ChromeTraceSink, Event, JsonlSink, ListSink, Recorder, read_events
from trioplay._trace import _records as r
from trioplay._trio_private import seeded_scheduler
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, find_email, leads, map_with_hung_rows, registry


def _play(rows: int) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        ctx.log("start")
        return await (
            ctx.dataset("s", leads(rows)).with_column("email", find_email).run(key="domain")
        )

    return play


async def _record(play: Any, tools: trioplay.ToolRegistry, *sinks: Any, **kw: Any) -> ListSink:
    kept = ListSink()
    recorder = Recorder(kept, *sinks, batch=7)  # small batches: flushes mid-run too
    async with trioplay.open_runtime(
        store=MemoryStore(), tools=tools, recorder=recorder, **kw
    ) as rt:
        try:
            await rt.run(play, {}, run_id="r1")
        finally:
            recorder.close()
    return kept


async def test_each_row_and_call_goes_its_way_in_order(autojump_clock: trio.abc.Clock) -> None:
    kept = await _record(_play(20), registry(finder=CountingTool()))
    events = kept.events
    types = [e.TYPE for e in events]
    assert types[0] == "run.started"
    assert types[-1] == "run.finished"
    assert isinstance(events[-1], r.RunFinished)
    assert events[-1].status == "completed"
    counts = Counter(types)
    for name in ("row.admitted", "row.resolver_started", "row.terminal", "row.committed"):
        assert counts[name] == 20, name
    for name in ("call.queued", "receipt.claimed", "call.started"):
        assert counts[name] == 20, name
    assert counts["call.finished"] == counts["call.settled"] == 20
    assert counts["writer.batch_committed"] >= 1
    assert counts["play.log"] == 1
    # One row's way, in order; its call named by the receipt key.
    by_row: dict[str, list[str]] = defaultdict(list)
    call_row: dict[str, str] = {}
    for e in events:
        if isinstance(e, r.CallQueued):
            assert e.row is not None
            call_row[e.call] = e.row
        row = getattr(e, "row", None) or call_row.get(getattr(e, "call", ""))
        if row is not None and not isinstance(e, r.PlayLog):
            by_row[row].append(e.TYPE)
    assert by_row["d3.example"] == [
        "row.admitted",
        "row.resolver_started",
        "call.queued",
        "receipt.claimed",
        "call.started",
        "call.finished",
        "call.settled",
        "row.terminal",
        "row.writer_admitted",
        "row.committed",
    ]
    assert all(a.at <= b.at for a, b in itertools.pairwise(events))


async def test_a_rerun_replays_and_says_so(autojump_clock: trio.abc.Clock) -> None:
    store = MemoryStore()
    play = _play(5)
    tools = registry(finder=CountingTool())
    for _ in range(2):
        kept = ListSink()
        recorder = Recorder(kept)
        async with trioplay.open_runtime(store=store, tools=tools, recorder=recorder) as rt:
            await rt.run(play, {}, run_id=f"r{_}")  # another run id: its rows run again
        recorder.close()
    counts = Counter(e.TYPE for e in kept.events)
    assert counts["receipt.replayed"] == 5
    assert counts["call.started"] == 0


async def test_a_stall_is_an_event_with_its_cause(autojump_clock: trio.abc.Clock) -> None:
    play, tools = map_with_hung_rows(frozenset({"d5.example"}), rows=300)
    limits = trioplay.Limits(tool_timeout=20.0, stall_log_interval=5.0)
    kept = await _record(play, tools, limits=limits)
    stalls = [e for e in kept.events if isinstance(e, r.MapStall)]
    assert stalls
    first = stalls[0]
    assert (first.map, first.page, first.phase) == ("s", 0, "resolver")
    assert first.report["oldest_row_key"] == "d5.example"
    assert first.cause.startswith("resolver: provider finder")
    timeouts = [e for e in kept.events if isinstance(e, r.CallFinished) and e.outcome == "timeout"]
    assert len(timeouts) == 1


def _call_ends(events: list[Event]) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Per call: its ``call.started``, ``call.finished`` and ``call.settled`` records."""
    kinds = (r.CallStarted, r.CallFinished, r.CallSettled)
    return tuple(Counter(e.call for e in events if isinstance(e, kind)) for kind in kinds)  # type: ignore[return-value]


async def test_a_run_cancelled_mid_call_ends_each_started_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Rows 5 and 9 hang in their call when the run is cancelled: each call
    # ends, once, cancelled, and its receipt is released, not recorded.
    play, tools = map_with_hung_rows(frozenset({"d5.example", "d9.example"}), rows=12)
    kept = ListSink()
    recorder = Recorder(kept, batch=7)
    store = MemoryStore()
    async with trioplay.open_runtime(store=store, tools=tools, recorder=recorder) as rt:
        with trio.move_on_after(30.0) as scope:
            await rt.run(play, {}, run_id="r1")
        recorder.close()
        assert scope.cancelled_caught
        receipts = await store.count_receipts("r1")
    started, finished, settled = _call_ends(kept.events)
    assert len(started) == 12
    assert finished == started == settled
    ends = [e for e in kept.events if isinstance(e, r.CallFinished | r.CallSettled)]
    cancelled = [e for e in ends if e.outcome == "cancelled"]
    assert len(cancelled) == 4  # two calls, each finished and settled
    assert {e.at for e in cancelled} == {30.0}
    assert {getattr(e, "error", None) for e in cancelled} == {"Cancelled", None}
    # The cancelled calls recorded nothing: their leases released, their receipts pending.
    assert receipts == {"completed": 10, "pending": 2}


async def test_the_calls_of_rows_cancelled_by_their_maps_failure_end_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    # d3's resolver fails at 10 s with on_row_error="fail": the map fails and
    # cancels its other rows, whose calls (hung) end cancelled there.
    async def finder(input: dict[str, Any], _call: trioplay.ToolCall) -> Any:
        if input["domain"] in ("d5.example", "d9.example"):
            await trio.sleep_forever()
        return {"email": "x@" + input["domain"]}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        if row["domain"] == "d3.example":
            await trio.sleep(10.0)
            raise ValueError("no")
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = ctx.dataset("s", leads(12)).with_column("email", resolver)
        return await rows.run(key="domain", on_row_error="fail")

    kept = ListSink()
    recorder = Recorder(kept, batch=7)
    async with trioplay.open_runtime(
        store=MemoryStore(), tools=registry(finder=finder), recorder=recorder
    ) as rt:
        with pytest.raises(ValueError, match="no"):
            await rt.run(play, {}, run_id="r1")
        recorder.close()
    started, finished, settled = _call_ends(kept.events)
    assert len(started) == 11
    assert finished == started == settled
    cancelled = [
        e for e in kept.events if isinstance(e, r.CallSettled) and e.outcome == "cancelled"
    ]
    assert len(cancelled) == 2
    assert {e.at for e in cancelled} == {10.0}


async def test_a_call_cancelled_while_it_waits_to_retry_ends_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Its first try finished ``retry`` (rate limited for 60 s); the run is
    # cancelled during the wait: the call settles once, cancelled.
    async def limited(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        raise trioplay.ProviderTransientError("rate_limit", "429", retry_after=60.0)

    tools = trioplay.ToolRegistry()
    tools.add("t", limited, retries=3)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.tool("t", {"x": 1})

    kept = ListSink()
    recorder = Recorder(kept)
    async with trioplay.open_runtime(store=MemoryStore(), tools=tools, recorder=recorder) as rt:
        with trio.move_on_after(30.0):
            await rt.run(play, {}, run_id="r1")
        recorder.close()
    ends = [
        (e.TYPE, e.outcome, e.at)
        for e in kept.events
        if isinstance(e, r.CallFinished | r.CallSettled)
    ]
    assert ends == [("call.finished", "retry", 0.0), ("call.settled", "cancelled", 30.0)]


async def _jsonl_of_a_run() -> str:
    text = io.StringIO()
    play, tools = map_with_hung_rows(frozenset({"d7.example"}), rows=120)
    await _record(play, tools, JsonlSink(text), limits=trioplay.Limits(tool_timeout=50.0))
    return text.getvalue()


def test_the_same_run_in_virtual_time_records_the_same_bytes() -> None:
    # Trio runs each batch of woken tasks in a random order (its scheduler's
    # own Random): the same run is the same only with that order seeded too.
    runs = []
    for _ in range(2):
        with seeded_scheduler(13):
            clock = trio.testing.MockClock(autojump_threshold=0)
            runs.append(trio.run(_jsonl_of_a_run, clock=clock))
    assert runs[0] == runs[1]
    assert runs[0].count("\n") > 120 * 5


async def test_the_jsonl_file_reads_back_as_the_records(
    autojump_clock: trio.abc.Clock, tmp_path: Any
) -> None:
    path = tmp_path / "events.jsonl"
    with path.open("w", encoding="utf-8") as file:
        kept = await _record(_play(12), registry(finder=CountingTool()), JsonlSink(file))
    assert list(read_events(path)) == kept.events
    path.write_text('{"type": "row.nope"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        list(read_events(path))


def check_chrome_trace(data: Any) -> list[dict[str, Any]]:
    """Fails unless ``data`` is Chrome trace-event JSON whose slices never overlap on a track."""
    assert isinstance(data, dict)
    assert isinstance(data["traceEvents"], list)
    events = data["traceEvents"]
    open_b: Counter[tuple[int, int]] = Counter()
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for item in events:
        assert {"ph", "pid", "tid", "name"} <= set(item), item
        assert isinstance(item["pid"], int)
        assert isinstance(item["tid"], int)
        if item["ph"] == "M":
            continue
        assert isinstance(item["ts"], int | float)
        assert item["ts"] >= 0
        track = (item["pid"], item["tid"])
        if item["ph"] == "X":
            assert item["dur"] >= 0
            slices[track].append((item["ts"], item["ts"] + item["dur"]))
        elif item["ph"] == "B":
            open_b[track] += 1
        elif item["ph"] == "E":
            open_b[track] -= 1
        else:
            assert item["ph"] == "i", item
    assert not +open_b
    for spans in slices.values():  # nested or apart, never crossing
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6
            stack.append(end)
    return events


async def test_the_chrome_trace_is_valid_and_has_tracks_per_page_and_provider(
    autojump_clock: trio.abc.Clock,
) -> None:
    text = io.StringIO()
    play, tools = map_with_hung_rows(frozenset({"d5.example"}), rows=300)
    limits = trioplay.Limits(tool_timeout=20.0, stall_log_interval=5.0, max_concurrent_rows=40)
    await _record(play, tools, ChromeTraceSink(text), limits=limits)
    events = check_chrome_trace(json.loads(text.getvalue()))
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"s pages", "slot", "slot #2", "finder", "run", "s"} <= names
    rows = [e for e in events if e["ph"] == "X" and e["pid"] == 3 and e["name"].endswith("example")]
    assert len(rows) == 300
    assert {e["name"] for e in events if e["ph"] == "X" and e["pid"] == 3} >= {
        "resolver",
        "writer admission",
        "writer commit",
    }
    stalls = [e for e in events if e["ph"] == "i"]
    assert stalls
    assert stalls[0]["name"].startswith("stall: resolver")


def _timeline_events() -> list[Event]:
    async def main() -> list[Event]:
        play, tools = map_with_hung_rows(frozenset({"d5.example"}), rows=300)
        limits = trioplay.Limits(tool_timeout=20.0, stall_log_interval=5.0)
        return (await _record(play, tools, limits=limits)).events

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_timeline_is_an_svg_with_axes_legend_and_stall_causes() -> None:
    events = _timeline_events()
    svg = render_timeline(events)
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for wanted in (
        "rows in flight, by phase",
        "provider concurrency (calls holding a slot)",
        "resolver",
        "governor",
        "fetch",
        "writer admission",
        "writer commit",
        "stall line (band: its page without a commit)",
        "provider finder",
        "time since the first event (s)",
        "rows",
    ):
        assert wanted in texts, wanted
    # The stall lines' lane of page 0, the cause written on its first mark.
    assert "stall lines, by page, and the cause each names" in texts
    assert "page 0" in texts
    assert any(t.startswith("resolver: provider finder") for t in texts)
    assert any(t.startswith("rows committed per") for t in texts)
    assert render_timeline(events) == svg  # the same events, the same picture


def test_a_timeline_needs_events() -> None:
    with pytest.raises(ValueError, match="no events"):
        render_timeline([])
