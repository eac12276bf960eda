"""The pictures at scale and when pages are lost (issue 26, point 5, acceptance 4).

A 10,000-row, 100-page run whose every page stalls on a hung call (three
providers with long names, so that the causes do not fit their marks): its
timeline writes every lane name and every cause whole (or as a code the
legend spells out), and its Chrome trace keeps a bounded number of tracks.
Pages lost to a peer, and their rows, show as lost in both.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._pictures import render_timeline
from trioplay._pictures._text import place_labels, text_width
from trioplay._trace import ChromeTraceSink, ListSink, Recorder, replay
from trioplay._trace import _records as r
from trioplay._trace._cause import stall_blame
from trioplay._trace._spans import Spans
from trioplay.adapters.scenarios._common import leads, map_play
from trioplay.adapters.scenarios._common import registry as tools_of
from trioplay.adapters.simulated import SimulatedProvider
from trioplay.scenario import Cause, Expect, Rows, Scenario, Setup, run_scenario

from .support import registry
from .test_fencing import TTL, PeerCompletes
from .test_trace import check_chrome_trace

if TYPE_CHECKING:
    from trioplay._trace import Event

SVG = "{http://www.w3.org/2000/svg}"
PROVIDERS = ("company-enrichment-provider", "email-verification-provider", "phone-lookup-provider")
ROWS, PAGE = 10_000, 100


def _many_pages(seed: int) -> Setup:
    """10,000 rows in 100 pages; row 17 of each page calls a provider that never answers
    (the three in turn), the others resolve in 0.5 to 2.3 s without a call (cheap)."""
    tools = [
        SimulatedProvider(tool_id=f"lookup-{name}", provider=name, seed=seed, hang_rate=1.0)
        for name in PROVIDERS
    ]

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        n = int(str(row["domain"])[1:].split(".")[0])
        if n % PAGE == 17:
            name = PROVIDERS[(n // PAGE) % len(PROVIDERS)]
            return (await rc.tool(f"lookup-{name}", {"domain": row["domain"]})).get("email")
        await trio.sleep(0.5 + (n % 7) * 0.3)
        return "x"

    return Setup(
        play=map_play("many-pages", leads(ROWS), ("email", resolver), page_size=PAGE),
        tools=tools_of(*tools),
        limits=trioplay.Limits(tool_timeout=300),
    )


MANY_PAGES = Scenario(
    name="many-pages",
    description="10,000 rows in 100 pages, each stalled by one hung call",
    setup=_many_pages,
    expect=Expect(rows=Rows(completed=ROWS - PAGE, failed=PAGE), stall=Cause()),
)


@pytest.fixture(scope="module")
def many_pages() -> list[Event]:
    result = run_scenario(MANY_PAGES)
    assert not result.problems, result.problems
    return list(result.events)


def _texts(svg: str) -> list[tuple[float, float, str, int, str]]:
    """Each text of the picture but the rotated axis labels: x, y, anchor, size, body."""
    return [
        (
            float(t.get("x", 0)),
            float(t.get("y", 0)),
            t.get("text-anchor", "start"),
            int(t.get("font-size", 12)),
            t.text or "",
        )
        for t in ET.fromstring(svg).iter(f"{SVG}text")
        if t.get("transform") is None
    ]


def _lanes(svg: str) -> tuple[dict[str, list[tuple[float, str]]], dict[str, str], float]:
    """The stall lanes read back: each lane's labels ``(x, body)`` by lane name, the legend
    (code to cause), and the picture's width."""
    texts = _texts(svg)
    [(_, strip_top, *_)] = [t for t in texts if t[4].startswith("stall lines, by page")]
    names = [(y, body) for x, y, anchor, _s, body in texts if anchor == "end" and y > strip_top]
    names = [(y, body) for y, body in names if y < strip_top + 28 * 12]  # the lane names
    labels: dict[str, list[tuple[float, str]]] = {body: [] for _y, body in names}
    for x, y, anchor, _size, body in texts:
        for lane_y, name in names:
            if anchor == "start" and lane_y - 20 < y < lane_y - 2:
                labels[name].append((x, body))
    bold = {(x, y): body for x, y, _a, _s, body in texts if re.fullmatch(r"C\d+", body)}
    legend = {
        code: next(b for x2, y2, _a, _s, b in texts if y2 == y and x2 > x and b != code)
        for (x, y), code in bold.items()
        if y > max(lane_y for lane_y, _ in names)
    }
    width = float(ET.fromstring(svg).get("width", 0))
    return labels, legend, width


def test_at_10000_rows_every_lane_name_and_cause_is_whole(many_pages: list[Event]) -> None:
    svg = render_timeline(many_pages)
    labels, legend, width = _lanes(svg)
    # Every lane name whole: the 7 first pages, and the 93 others in the last lane.
    pages = sorted({e.page for e in many_pages if isinstance(e, r.MapStall)})
    assert len(pages) == 100
    assert list(labels) == [*(f"page {p:,}" for p in pages[:7]), "93 more pages"]
    for x, _y, anchor, size, body in _texts(svg):
        assert "…" not in body, body  # nothing cut
        extent = text_width(body, size)
        left = {"start": x, "middle": x - extent / 2, "end": x - extent}[anchor]
        assert left >= 0, (anchor, x, body)
        assert left + extent <= width, (anchor, x, body)
    # Every cause each lane's lines name is written in that lane, whole or as a code
    # that the legend spells out whole; the legend lists every cause and only those.
    causes: dict[str, set[str]] = defaultdict(set)
    for e in many_pages:
        if isinstance(e, r.MapStall):
            lane = f"page {e.page:,}" if e.page in pages[:7] else "93 more pages"
            causes[lane].add(stall_blame(e.report))
    every = set().union(*causes.values())
    assert len(every) == 6  # three providers, each in the resolver and the governor
    assert set(legend.values()) == every
    for lane, written in labels.items():
        named = {legend.get(body, body) for _x, body in written}
        assert named == causes[lane], lane
        # and no label runs into the next one
        spans = sorted((x, x + text_width(body, 11)) for x, body in written)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), lane
    # Many stall lines, no hatching: no line per stall line across the panels.
    stalls = sum(isinstance(e, r.MapStall) for e in many_pages)
    assert stalls > 400
    assert svg.count("stroke-dasharray") <= 2  # the store panel's writes and their legend
    assert svg.count('fill="#fbe4e4"') < 20  # the stall bands, merged


def test_at_10000_rows_the_chrome_trace_has_a_bounded_number_of_tracks(
    many_pages: list[Event],
) -> None:
    text = io.StringIO()
    replay(many_pages, ChromeTraceSink(text))
    events = check_chrome_trace(json.loads(text.getvalue()))
    tracks = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    rows = [name for pid, name in tracks if pid == 3]
    pages = [name for pid, name in tracks if pid == 2]
    # A row takes the lowest slot track free: as many tracks as rows in flight at once
    # (256 row slots by default, plus rows past the writer's admission waiting for their
    # commit), not one per row.
    level = [0, 0]  # rows in flight, the most at once, in the order of the events

    def step(by: int) -> None:
        level[0] += by
        level[1] = max(level)

    spans = Spans(
        lambda s: step(-1) if s.kind == "row" else None,
        lambda kind, _key, _group: step(1) if kind == "row" else None,
    )
    for e in many_pages:
        spans.feed(e)
    spans.close(many_pages[-1].at)
    peak = level[1]
    assert len(rows) == peak
    assert 256 <= peak < 400
    assert len(pages) <= 100
    sliced = [e for e in events if e["ph"] == "X" and e["pid"] == 3 and "example" in e["name"]]
    assert len(sliced) == ROWS
    assert sum(e["ph"] == "i" and e["name"].startswith("stall:") for e in events) > 400


def _lost_page(keys: bool = True) -> list[Event]:
    """Page 0 of map ``m``: row ``a`` commits, then a peer takes the page over while ``b`` and
    ``c`` are in flight; ``b``'s cancelled resolver still records its end afterwards.
    ``keys=False``: the ``page.lost`` of an older file, without the rows it left."""
    rows = ("a", "b", "c")
    return [
        r.RunStarted(0.0, "r", "p", 1),
        r.PageStarted(0.0, "m", 0, 3),
        *(r.RowAdmitted(0.0, "m", 0, row) for row in rows),
        *(r.RowResolverStarted(0.0, "m", row) for row in rows),
        r.RowTerminal(1.0, "m", "a", "completed"),
        r.RowWriterAdmitted(1.0, "m", "a"),
        r.RowCommitted(2.0, "m", "a", "completed"),
        r.PageLost(5.0, "m", 0, "r", 2, ["b", "c"]) if keys else r.PageLost(5.0, "m", 0, "r"),
        r.RowTerminal(6.0, "m", "b", "failed"),
        r.PageFinished(7.0, "m", 0, "lost"),
        r.RunFinished(10.0, "r", "completed", None),
    ]


@pytest.mark.parametrize("keys", [True, False])
def test_the_rows_of_a_page_lost_to_a_peer_end_lost_where_it_was_lost(keys: bool) -> None:
    # Seen failing: they ran on, "unfinished", to the end of the recording.
    ended: list[tuple[str, Any, float, dict[str, Any]]] = []
    spans = Spans(lambda s: ended.append((s.kind, s.name, s.end, s.args)))
    for e in _lost_page(keys):
        spans.feed(e)
    spans.close(10.0)
    rows = {name: (end, args.get("status")) for kind, name, end, args in ended if kind == "row"}
    assert rows == {"a": (2.0, "completed"), "b": (5.0, "lost"), "c": (5.0, "lost")}
    phases = [(name, end) for kind, name, end, _ in ended if kind == "phase"]
    assert ("writer admission", 10.0) not in phases  # b's late record opened nothing
    pages = [(name, end, args["status"]) for kind, name, end, args in ended if kind == "page"]
    assert pages == [("page 0", 7.0, "lost")]


def test_a_page_lost_to_a_peer_shows_in_the_timeline_and_the_trace() -> None:
    svg = render_timeline(_lost_page())
    bodies = [body for *_, body in _texts(svg)]
    assert "1 rows completed, 0 failed, 2 lost with 1 page(s) taken by a peer" in bodies[1]
    assert "page 0" in bodies
    assert "lost to a peer, 2 rows" in bodies
    assert "lost to a peer" in bodies  # the legend's colour of lost rows
    text = io.StringIO()
    replay(_lost_page(), ChromeTraceSink(text))
    events = check_chrome_trace(json.loads(text.getvalue()))
    rows = {
        e["name"]: (e["ts"] + e["dur"]) / 1e6 for e in events if e["ph"] == "X" and e["pid"] == 3
    }
    assert rows["b (lost to a peer)"] == rows["c (lost to a peer)"] == 5.0
    assert rows["a"] == 2.0
    [lost] = [e for e in events if e["ph"] == "i"]
    assert (lost["name"], lost["ts"], lost["pid"]) == ("page lost to a peer", 5e6, 2)
    [page] = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert (page["name"], page["dur"]) == ("page 0 (lost)", 7e6)
    assert page["tid"] == lost["tid"]  # the loss on its page's track


def test_labels_without_room_move_or_shorten_but_are_never_dropped() -> None:
    codes = {"first cause": "C1", "second cause": "C2", "third cause": "C3"}
    marks = [(100.0 + 3 * n, label, "red") for n, label in enumerate(codes)]
    marks += [(109.0, "first cause", "red"), (112.0, "second cause", "red")]
    placed = place_labels(marks, codes, 80.0, 1000.0, 11)
    # Each cause named the first time, moved right of the one before; the change back to
    # the first has no room even for C1 (named already); the last has room whole.
    assert [label.body for label in placed] == ["C1", "C2", "C3", "second cause"]
    ends = [label.x + text_width(label.body, 11) for label in placed]
    assert all(end <= nxt.x for end, nxt in zip(ends, placed[1:], strict=False))
    # At the lane's end, a whole label that has room before its mark ends there.
    [last] = place_labels([(990.0, "first cause", "red")], codes, 80.0, 1000.0, 11)
    assert (last.body, round(last.x + text_width(last.body, 11))) == ("first cause", 990)


def test_long_map_names_get_a_short_name_in_the_lanes_and_in_full_in_the_legend() -> None:
    long = ("enrichment-of-every-lead-we-bought-in-2025-from-the-fair", "verification-pass")
    report = {"oldest_phase": "resolver", "oldest_provider": "acme"}
    events: list[Event] = [
        r.RunStarted(0.0, "r", "p", 1),
        *(r.MapStall(60.0, name, 9_900, "resolver", "", report) for name in long),
        r.RunFinished(120.0, "r", "completed", None),
    ]
    svg = render_timeline(events)
    texts = _texts(svg)
    names = [body for _x, _y, anchor, _s, body in texts if anchor == "end" and " p9" in body]
    assert names == ["M1 p9,900", "M2 p9,900"]
    assert set(long) <= {body for *_, body in texts}


async def test_a_real_takeover_shows_its_page_and_rows_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A peer takes page 0 over and completes its five rows (tests/test_fencing.py): the
    # picture and the trace of this process's run say the page and its rows were lost,
    # not that they ran on to the end of the recording.
    keys = [str(i) for i in range(5)]
    store = PeerCompletes(keys)
    kept = ListSink()
    text = io.StringIO()
    recorder = Recorder(kept, ChromeTraceSink(text))
    async with trioplay.open_runtime(
        store=store,
        tools=registry(),
        limits=trioplay.Limits(lease_ttl=TTL),
        wall_clock=trio.current_time,
        recorder=recorder,
    ) as rt:
        await rt.run(store.play(), {}, run_id="r")
    recorder.close()
    [lost_at] = [e.at for e in kept.events if isinstance(e, r.PageLost)]
    bodies = [body for *_, body in _texts(render_timeline(kept.events))]
    assert "0 rows completed, 0 failed, 5 lost with 1 page(s) taken by a peer" in bodies[1]
    assert "lost to a peer, 5 rows" in bodies
    events = check_chrome_trace(json.loads(text.getvalue()))
    rows = [e for e in events if e["ph"] == "X" and e["pid"] == 3 and "(lost" in e["name"]]
    assert sorted(e["name"] for e in rows) == [f"{key} (lost to a peer)" for key in keys]
    t0 = kept.events[0].at
    assert {round(t0 + (e["ts"] + e["dur"]) / 1e6, 6) for e in rows} == {lost_at}
    assert [e["name"] for e in events if e["ph"] == "i"] == ["page lost to a peer"]
