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

if TYPE_CHECKING:
    from ._records import Event, Raw

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
        self._rows = _Lanes(self, _ROWS)
        self._calls = _Lanes(self, _CALLS)
        self._writer = _Lanes(self, _WRITER)
        self._run_lanes = _Lanes(self, _RUN)
        # Open slices: key -> (start, tid, group, name, args), and open row phases.
        self._open: dict[Any, tuple[float, int, str, str, dict[str, Any]]] = {}
        self._phase: dict[Any, tuple[float, str]] = {}
        self._tool: dict[str, str] = {}  # call key -> tool, for fetch calls' names

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

    # -- slices -------------------------------------------------------------
    def _begin(
        self, lanes: _Lanes, key: Any, group: str, name: str, at: float, args: dict[str, Any]
    ) -> None:
        if key in self._open:  # begun again without an end (a retried call): end the first
            self._end(lanes, key, at, {})
        self._open[key] = (at, lanes.take(group), group, name, args)

    def _end(self, lanes: _Lanes, key: Any, at: float, more: dict[str, Any]) -> int | None:
        opened = self._open.pop(key, None)
        if opened is None:
            return None
        start, tid, group, name, args = opened
        self._slice(lanes._pid, tid, name, start, at, {**args, **more})
        lanes.give(group, tid)
        return tid

    def _row_phase(self, row: tuple[str, str], at: float, phase: str | None) -> None:
        """End the row's current phase slice (if any) and begin ``phase``."""
        current = self._phase.pop(row, None)
        opened = self._open.get(("row", row))
        if current is not None and opened is not None:
            self._slice(_ROWS, opened[1], current[1], current[0], at, {})
        if phase is not None and opened is not None:
            self._phase[row] = (at, phase)

    def write(self, batch: list[Raw]) -> None:
        for raw in batch:
            event = event_of(raw)
            if self._t0 is None:
                self._t0 = event.at
            self._last = max(self._last, event.at)
            self._one(event)

    def _one(self, e: Event) -> None:
        at = e.at
        if isinstance(e, r.RunStarted):
            self._begin(
                self._run_lanes,
                ("run", e.run),
                "run",
                f"run {e.run}",
                at,
                {"play": e.play, "attempt": e.attempt},
            )
        elif isinstance(e, r.RunFinished):
            self._end(self._run_lanes, ("run", e.run), at, {"status": e.status, "error": e.error})
        elif isinstance(e, r.RowAdmitted):
            self._begin(
                self._rows,
                ("row", (e.map, e.row)),
                f"{e.map} page {e.page}",
                e.row,
                at,
                {"map": e.map, "page": e.page},
            )
        elif isinstance(e, r.RowResolverStarted):
            self._row_phase((e.map, e.row), at, "resolver")
        elif isinstance(e, r.RowTerminal):
            self._row_phase((e.map, e.row), at, "writer admission")
        elif isinstance(e, r.RowWriterAdmitted):
            self._row_phase((e.map, e.row), at, "writer commit")
        elif isinstance(e, r.RowWaiting):  # suspended on an event: its own state, to the end
            self._row_phase((e.map, e.row), at, "waiting")
        elif isinstance(e, r.RowCommitted):
            self._row_phase((e.map, e.row), at, None)
            self._end(self._rows, ("row", (e.map, e.row)), at, {"status": e.status})
        elif isinstance(e, r.CallQueued):
            self._tool[e.call] = e.tool
        elif isinstance(e, r.CallStarted):
            self._begin(
                self._calls,
                ("call", e.call),
                e.provider or e.tool,
                e.tool,
                at,
                {"call": e.call, "attempt": e.attempt},
            )
        elif isinstance(e, r.CallFinished):
            self._end(self._calls, ("call", e.call), at, {"outcome": e.outcome, "error": e.error})
        elif isinstance(e, r.CallSettled):
            self._tool.pop(e.call, None)
        elif isinstance(e, r.FetchStarted):
            self._begin(
                self._calls,
                ("fetch", e.fetch),
                "fetches",
                f"{e.method} {e.url}",
                at,
                {"row": e.row},
            )
        elif isinstance(e, r.FetchPhase):
            self._fetch_phase(e.fetch, at, e.phase)
        elif isinstance(e, r.FetchFinished):
            self._fetch_phase(e.fetch, at, None)
            self._end(
                self._calls,
                ("fetch", e.fetch),
                at,
                {"status": e.status, "bytes": e.bytes, "error": e.error},
            )
        elif isinstance(e, r.WriterBatchStarted):
            self._begin(
                self._writer,
                ("batch", e.map),
                e.map,
                f"write {e.rows} rows",
                at,
                {"rows": e.rows, "bytes": e.bytes},
            )
        elif isinstance(e, r.WriterBatchCommitted):
            self._end(self._writer, ("batch", e.map), at, {"outcome": "committed"})
        elif isinstance(e, r.WriterBatchFailed):
            self._end(
                self._writer,
                ("batch", e.map),
                at,
                {"outcome": "failed", "error": e.error, "unknown": e.unknown},
            )
        elif isinstance(e, r.MapStall):
            tid = self._rows.first(f"{e.map} page {e.page}")
            self._instant(_ROWS, tid, f"stall: {e.cause}", at, e.report)
        elif isinstance(e, r.LoopLag):
            tid = self._run_lanes.first("run")
            self._instant(
                _RUN,
                tid,
                f"loop lag {e.lag_ms:.0f} ms",
                at,
                {"lag_ms": e.lag_ms, "threshold_ms": e.threshold_ms},
            )

    def _fetch_phase(self, fetch: int, at: float, phase: str | None) -> None:
        key = ("fetch", fetch)
        current = self._phase.pop(key, None)
        opened = self._open.get(key)
        if opened is None:
            return
        if current is not None:
            self._slice(_CALLS, opened[1], current[1], current[0], at, {})
        if phase in ("headers", "body"):
            self._phase[key] = (at, phase)

    def close(self) -> None:
        """End what is still open at the last event's time, and close the JSON."""
        if self._t0 is not None:
            for key in list(self._open):
                start, tid, _group, name, args = self._open.pop(key)
                phase = self._phase.pop(key[1] if key[0] == "row" else key, None)
                pid = {"run": _RUN, "row": _ROWS, "batch": _WRITER}.get(key[0], _CALLS)
                self._slice(pid, tid, name, start, self._last, {**args, "unfinished": True})
                if phase is not None:
                    self._slice(pid, tid, phase[1], phase[0], self._last, {"unfinished": True})
        self._file.write(
            f'],"displayTimeUnit":"ms","otherData":{{"trioplay_events_version":{r.VERSION}}}}}\n'
        )
        self._file.flush()
