"""The Chrome trace-event sink (``--trace FILE.json``): opens in Perfetto or chrome://tracing.

Slices are complete events (``"ph": "X"`` with ``dur``), written when they
end, so the file streams. Five processes group the tracks:

- **run** (pid 1): the run itself, child plays' calls, and loop-lag marks;
- **pages** (pid 2): each page from ``page.started`` to ``page.finished``
  (its status in ``args``: ``done``, ``lost``, ``failed``); its stall lines
  and its loss to a peer (``page lost to a peer``) are instant events on
  its track;
- **rows by slot** (pid 3): each row from its admission to its commit, with
  its phases nested inside (``resolver``, ``governor``, ``writer
  admission``, ``writer commit``...); a row of a page lost to a peer ends
  there, ``status`` ``lost``;
- **calls by provider** (pid 4): each provider call from its start to its
  end, named by tool; fetches with their ``headers`` and ``body`` phases;
- **writer** (pid 5): each sheet write, per map.

Slices on one track never overlap, and tracks are reused: a slice takes the
lowest track of its group free at its start. So the number of tracks is
bounded by what is in flight at once, never by how many rows a run has:
``slot 1`` ... ``slot N`` for rows, N the most rows in flight at once (the
row slots, ``max_concurrent_rows``, plus rows past writer admission waiting
for their commit, plus rows suspended on an event wait); ``leads pages``,
``leads pages #2``... for the pages of map ``leads``, as many as its pages
open at once; a provider's calls as many as it has at once (its governor
slots). A 10,000-row run at the default limits has at most 256 or so row
tracks, not 10,000. Times are microseconds since the first event.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

from . import _records as r
from ._records import event_of
from ._spans import Spans

if TYPE_CHECKING:
    from ._records import Raw
    from ._spans import Span

_RUN, _PAGES, _ROWS, _CALLS, _WRITER = 1, 2, 3, 4, 5
_PROCESSES = {
    _RUN: "run",
    _PAGES: "pages",
    _ROWS: "rows by slot",
    _CALLS: "calls by provider",
    _WRITER: "writer",
}
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class _Lanes:
    """Tracks (``tid``) of one process: per group, the lowest lane free at a slice's start.

    ``label`` names a group's track: the group itself, ``"<map> pages"``,
    ``"slot"``; its second lane and after get ``#2``, ``#3``...
    """

    def __init__(self, sink: ChromeTraceSink, pid: int, label: str = "{}") -> None:
        self._sink = sink
        self.pid = pid
        self._label = label
        self._busy: dict[str, set[int]] = {}
        self._tids: dict[tuple[str, int], int] = {}
        self._lane_of: dict[int, tuple[str, int]] = {}

    def take(self, group: str) -> int:
        busy = self._busy.setdefault(group, set())
        lane = next(n for n in range(len(busy) + 1) if n not in busy)
        busy.add(lane)
        tid = self._tids.get((group, lane))
        if tid is None:
            tid = self._tids[(group, lane)] = len(self._tids) + 1
            self._lane_of[tid] = (group, lane)
            name = self._label.format(group)
            self._sink.meta(self.pid, tid, name if lane == 0 else f"{name} #{lane + 1}")
        return tid

    def give(self, tid: int) -> None:
        group, lane = self._lane_of[tid]
        self._busy[group].discard(lane)

    def first(self, group: str) -> int:
        """The group's first track (instant events), made if need be."""
        tid = self._tids.get((group, 0))
        if tid is None:
            tid = self.take(group)
            self.give(tid)
        return tid


class ChromeTraceSink:
    """Writes the Chrome trace-event JSON of the events to ``file`` (left open on close)."""

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._t0: float | None = None
        self._last = 0.0
        self._count = 0
        self._file.write('{"traceEvents":[\n')
        for pid, name in _PROCESSES.items():
            self._put(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
            )
            self._put(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": pid},
                }
            )
        calls = _Lanes(self, _CALLS)  # fetches share the calls' process
        runs = _Lanes(self, _RUN)  # a child play's call on its caller's run tracks
        self._lanes = {
            "run": runs,
            "child": runs,
            "page": _Lanes(self, _PAGES, "{} pages"),
            "row": _Lanes(self, _ROWS, "slot"),
            "call": calls,
            "fetch": calls,
            "batch": _Lanes(self, _WRITER),
        }
        self._tids: dict[Any, int] = {}  # the track of each open span
        self._spans = Spans(self._ended, self._begun)

    # -- output -------------------------------------------------------------
    def _put(self, item: dict[str, Any]) -> None:
        self._file.write(("," if self._count else "") + _encode(item) + "\n")
        self._count += 1

    def meta(self, pid: int, tid: int, name: str) -> None:
        self._put(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        )
        self._put(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )

    def _us(self, at: float) -> float:
        assert self._t0 is not None
        return round((at - self._t0) * 1e6, 3)

    def _slice(
        self, pid: int, tid: int, name: str, start: float, end: float, args: dict[str, Any]
    ) -> None:
        ts = self._us(start)  # dur from the rounded ends: adjacent slices stay adjacent
        self._put(
            {
                "ph": "X",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": round(max(0.0, self._us(end) - ts), 3),
                "args": args,
            }
        )

    def _instant(self, pid: int, tid: int, name: str, at: float, args: dict[str, Any]) -> None:
        self._put(
            {
                "ph": "i",
                "s": "t",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": self._us(at),
                "args": args,
            }
        )

    # -- spans ------------------------------------------------------------
    def _begun(self, kind: str, key: Any, group: str) -> None:
        lanes = self._lanes.get(kind)
        if lanes is not None:  # a governor slot is the timeline's, not a track here
            # Every row shares one group: a row takes the lowest slot track free.
            self._tids[key] = lanes.take("rows" if kind == "row" else group)

    def _ended(self, span: Span) -> None:
        if span.kind == "phase":  # on its row's or fetch's track, while that is open
            tid = self._tids.get(span.key)
            if tid is not None:
                pid = _ROWS if span.key[0] == "row" else _CALLS
                self._slice(pid, tid, span.name, span.start, span.end, span.args)
            return
        lanes = self._lanes.get(span.kind)
        tid = self._tids.pop(span.key, None)
        if lanes is not None and tid is not None:
            name = span.name
            if span.kind == "row" and span.args.get("status") == "lost":
                name += " (lost to a peer)"
            elif span.kind == "page":
                name += f" ({span.args.get('status', 'unfinished')})"
            self._slice(lanes.pid, tid, name, span.start, span.end, span.args)
            lanes.give(tid)

    def _page_track(self, name: str, page: int) -> int:
        """The track of page ``page`` of map ``name`` (its map's first if it is not open)."""
        tid = self._tids.get(("page", (name, page)))
        return tid if tid is not None else self._lanes["page"].first(name)

    def write(self, batch: list[Raw]) -> None:
        for raw in batch:
            e = event_of(raw)
            if self._t0 is None:
                self._t0 = e.at
            self._last = max(self._last, e.at)
            self._spans.feed(e)
            if isinstance(e, r.MapStall):
                tid = self._page_track(e.map, e.page)
                self._instant(_PAGES, tid, f"stall: {e.cause}", e.at, e.report)
            elif isinstance(e, r.PageLost):  # its track is still open: the page ends after
                tid = self._page_track(e.map, e.page)
                args = {"map": e.map, "page": e.page}
                self._instant(_PAGES, tid, "page lost to a peer", e.at, args)
            elif isinstance(e, r.LoopLag):
                tid = self._lanes["run"].first("run")
                self._instant(
                    _RUN,
                    tid,
                    f"loop lag {e.lag_ms:.0f} ms",
                    e.at,
                    {"lag_ms": e.lag_ms, "threshold_ms": e.threshold_ms},
                )

    def close(self) -> None:
        """End what is still open at the last event's time, and close the JSON."""
        if self._t0 is not None:
            self._spans.close(self._last)
        self._file.write(
            f'],"displayTimeUnit":"ms","otherData":{{"trioplay_events_version":{r.VERSION}}}}}\n'
        )
        self._file.flush()
