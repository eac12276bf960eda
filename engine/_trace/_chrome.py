"""The Chrome trace-event sink (``--trace FILE.json``): opens in Perfetto or chrome://tracing.

Slices are complete events (``"ph": "X"`` with ``dur``), written when they
end, so the file streams. Four processes group the tracks:

- **run** (pid 1): the run itself, and loop-lag marks;
- **rows by page** (pid 2): each row from its admission to its commit, with
  its phases nested inside (``resolver``, ``writer admission``, ``writer
  commit``); stall lines are instant events on their page's track;
- **calls by provider** (pid 3): each provider call from its start to its
  end, named by tool; fetches with their ``headers`` and ``body`` phases;
- **writer** (pid 4): each sheet write, per map.

Slices on one track never overlap: a page (or provider) whose rows (calls)
overlap gets as many tracks as it has at once at most, ``page 0 #1``,
``page 0 #2``... (a lane is reused once free). Times are microseconds since
the first event.
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

_RUN, _ROWS, _CALLS, _WRITER = 1, 2, 3, 4
_PROCESSES = {_RUN: "run", _ROWS: "rows by page", _CALLS: "calls by provider", _WRITER: "writer"}
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class _Lanes:
    """Tracks (``tid``) of one process: per group, the lowest lane free at a slice's start."""

    def __init__(self, sink: ChromeTraceSink, pid: int) -> None:
        self._sink = sink
        self._pid = pid
        self._busy: dict[str, set[int]] = {}
        self._tids: dict[tuple[str, int], int] = {}
        self._lane_of: dict[int, int] = {}

    def take(self, group: str) -> int:
        busy = self._busy.setdefault(group, set())
        lane = next(n for n in range(len(busy) + 1) if n not in busy)
        busy.add(lane)
        tid = self._tids.get((group, lane))
        if tid is None:
            tid = self._tids[(group, lane)] = len(self._tids) + 1
            self._lane_of[tid] = lane
            name = group if lane == 0 else f"{group} #{lane + 1}"
            self._sink.meta(self._pid, tid, name)
        return tid

    def give(self, group: str, tid: int) -> None:
        self._busy[group].discard(self._lane_of[tid])

    def first(self, group: str) -> int:
        """The group's first track (instant events), made if need be."""
        tid = self._tids.get((group, 0))
        if tid is None:
            tid = self.take(group)
            self.give(group, tid)
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
            "row": _Lanes(self, _ROWS),
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
            self._tids[key] = lanes.take(group)

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
            self._slice(lanes._pid, tid, span.name, span.start, span.end, span.args)
            lanes.give(span.group, tid)

    def write(self, batch: list[Raw]) -> None:
        for raw in batch:
            e = event_of(raw)
            if self._t0 is None:
                self._t0 = e.at
            self._last = max(self._last, e.at)
            self._spans.feed(e)
            if isinstance(e, r.MapStall):
                tid = self._lanes["row"].first(f"{e.map} page {e.page}")
                self._instant(_ROWS, tid, f"stall: {e.cause}", e.at, e.report)
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
