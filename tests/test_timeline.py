"""The timeline picture read as a person reads it: stall causes on their marks, nothing
cut off, and the picture in docs/scenarios.md is what the project draws now (issue 13)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from trioplay._pictures._text import text_width
from trioplay._pictures._timeline import _FAILED, _STALL, render_timeline
from trioplay._trace._cause import stall_blame, stall_cause
from trioplay.adapters.scenarios import BUILT_IN, find
from trioplay.events import MapStall, RunFinished, RunStarted
from trioplay.scenario import run_scenario

ROOT = Path(__file__).resolve().parent.parent
DOCS_PICTURE = ROOT / "docs" / "img" / "provider-starvation.svg"
REGENERATE = (
    "trioplay scenario run provider-starvation --out out/ps && "
    "cp out/ps/timeline.svg docs/img/provider-starvation.svg"
)
SVG = "{http://www.w3.org/2000/svg}"


def _drawn(name: str, seed: int = 0) -> str:
    scenario = find(name)
    assert scenario is not None
    return render_timeline(run_scenario(scenario, seed=seed).events)


def _texts(svg: str) -> list[tuple[float, float, str, str]]:
    """Each text of the picture: x, y, anchor, body."""
    return [(x, y, anchor, body) for x, y, anchor, _size, body in _sized(svg)]


def _sized(svg: str) -> list[tuple[float, float, str, int, str]]:
    """Each text of the picture: x, y, anchor, font size, body."""
    root = ET.fromstring(svg)
    return [
        (
            float(t.get("x", 0)),
            float(t.get("y", 0)),
            t.get("text-anchor", "start"),
            int(t.get("font-size", 12)),
            t.text or "",
        )
        for t in root.iter(f"{SVG}text")
        if t.get("transform") is None  # the rotated y-axis labels
    ]


def test_the_picture_in_the_docs_is_what_the_project_draws_now() -> None:
    assert DOCS_PICTURE.read_text(encoding="utf-8") == _drawn("provider-starvation"), (
        f"docs/img/provider-starvation.svg is stale; regenerate it: {REGENERATE}"
    )


@pytest.mark.parametrize("name", [s.name for s in BUILT_IN])
def test_no_text_runs_off_the_picture(name: str) -> None:
    svg = _drawn(name)
    width = float(ET.fromstring(svg).get("width", 0))
    for x, _y, anchor, size, body in _sized(svg):
        assert "…" not in body, body  # nothing cut short
        extent = text_width(body, size)
        left = {"start": x, "middle": x - extent / 2, "end": x - extent}[anchor]
        assert left >= 0, (anchor, x, body)
        assert left + extent <= width, (anchor, x, body)


def test_provider_starvation_says_which_page_waits_for_what() -> None:
    # Acceptance 4, as a picture: each page's lane names the stuck provider,
    # first in the governor (waiting for its share), then in the resolver
    # (its own calls hold the share and hang); the healthy provider is named
    # only in the legend.
    texts = _texts(_drawn("provider-starvation"))
    lanes = {body: y for x, y, anchor, body in texts if anchor == "end" and body.startswith("page")}
    assert list(lanes) == ["page 0", "page 40", "page 80"]
    codes = {
        "C1": "resolver: provider stuck-co, tool stuck",
        "C2": "governor: provider stuck-co, tool stuck",
    }
    legend = [(y, body) for _x, y, _a, body in texts if body in codes.values() and y > 170]
    assert [body for _y, body in legend] == list(codes.values())  # in full, in the legend
    causes = [
        (y, codes.get(body, body))
        for _x, y, _anchor, body in texts
        if y < 170 and (body in codes or body.startswith(("governor", "resolver")))
    ]
    by_lane = {
        lane: [body for y, body in causes if lane_y - 20 < y < lane_y]
        for lane, lane_y in lanes.items()
    }
    # Page 40's governor cause has no room before its resolver one: its code (C2) is written.
    assert by_lane == {
        "page 0": ["resolver: provider stuck-co, tool stuck"],
        "page 40": [
            "governor: provider stuck-co, tool stuck",
            "resolver: provider stuck-co, tool stuck",
        ],
        "page 80": [
            "governor: provider stuck-co, tool stuck",
            "resolver: provider stuck-co, tool stuck",
        ],
    }
    assert [body for *_, body in texts if "healthy-co" in body] == ["provider healthy-co"]


def test_the_starved_loop_has_its_own_lane() -> None:
    bodies = [body for *_, body in _texts(_drawn("loop-starvation"))]
    assert "event loop" in bodies
    assert "loop: event loop blocked 89,750 ms" in bodies
    assert "lag 44,750 ms" in bodies  # the first block (45 s) less the watchdog's half threshold


def test_many_stalled_pages_share_the_last_lane() -> None:
    report = {"oldest_phase": "resolver", "oldest_provider": "acme", "oldest_unsettled_ms": 60_000}
    events = [
        RunStarted(0.0, "r", "p", 1),
        *[MapStall(60.0 + page, "m", page * 100, "resolver", "", report) for page in range(10)],
        RunFinished(120.0, "r", "completed", None),
    ]
    texts = _texts(render_timeline(events))
    lanes = [body for *_, anchor, body in texts if anchor == "end" and "page" in body]
    assert lanes == [*(f"page {page * 100:,}" for page in range(7)), "3 more pages"]


@pytest.mark.parametrize(
    ("report", "blame", "cause"),
    [
        (
            {"oldest_phase": "governor", "oldest_provider": "p", "oldest_tool": "t"},
            "governor: provider p, tool t",
            "governor: provider p, tool t, oldest 60,000 ms",
        ),
        (
            {"oldest_phase": "resolver", "oldest_provider": "t", "oldest_tool": "t"},
            "resolver: provider t",
            "resolver: provider t, oldest 60,000 ms",
        ),
        (
            {"oldest_phase": "fetch", "oldest_provider": "fetch", "oldest_row_key": "k"},
            "fetch: row k",
            "fetch: row k, oldest 60,000 ms",
        ),
        (
            {"oldest_phase": "writer_admission", "oldest_row_key": "k", "loop_lag_ms": 700},
            "writer_admission: row k",
            "writer_admission: row k, oldest 60,000 ms, loop lag 700 ms",
        ),
        (
            {"oldest_phase": "store", "oldest_store_operation": "claim_many"},
            "store: claim_many",
            "store: claim_many unanswered for 61,000 ms",
        ),
        (
            {"oldest_phase": "loop", "loop_lag_ms": 4750},
            "loop: event loop blocked 4,750 ms",
            "loop: event loop blocked 4,750 ms, oldest 60,000 ms",
        ),
    ],
)
def test_a_stall_line_read_in_one_phrase(report: dict[str, Any], blame: str, cause: str) -> None:
    report = {"oldest_unsettled_ms": 60_000, "oldest_store_ms": 61_000, **report}
    assert (stall_blame(report), stall_cause(report)) == (blame, cause)


def test_the_title_counts_failed_rows_apart_from_completed_ones() -> None:
    # Issue 26, point 5: a failed row is committed too, but was counted as if
    # it had completed ("200 rows committed" for 199 completed and 1 failed).
    bodies = [body for *_, body in _texts(_drawn("hung-provider"))]
    assert "199 rows completed, 1 failed (200 committed) over 5.0 min; 4 stall line(s)" in bodies


def test_failed_rows_are_their_own_colour_in_the_commits_panel() -> None:
    # One failed row among 199 completed: its own (dark red) segment, at least 2 px high.
    svg = _drawn("hung-provider")
    failed = [rect for rect in ET.fromstring(svg).iter(f"{SVG}rect") if rect.get("fill") == _FAILED]
    assert len(failed) == 2  # the bar and its legend swatch
    assert min(float(rect.get("height", 0)) for rect in failed) >= 2


def test_the_store_panel_names_the_oldest_store_call_a_stall_line_saw() -> None:
    svg = _drawn("store-outage")
    bodies = [body for *_, body in _texts(svg)]
    assert "store: sheet writes in flight, store calls in flight at each stall line" in bodies
    [note] = [body for body in bodies if body.startswith("oldest store call")]
    assert re.fullmatch(
        r"oldest store call unanswered at a stall line: complete_many, [\d,]+ ms; "
        r"2 stall line\(s\) blame the store",
        note,
    ), note
    # Each of those lines is a red dot: the store calls it saw in flight.
    dots = [c for c in ET.fromstring(svg).iter(f"{SVG}circle") if c.get("fill") == _STALL]
    assert len(dots) == 2
