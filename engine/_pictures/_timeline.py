"""The timeline picture of a recorded run: an SVG drawn from its events, no dependency.

Panels share one time axis (seconds since the first event, or milliseconds,
minutes or hours, whichever reads best):

0. **stall lines by page** (when there are any, or pages lost to a peer): a
   lane per page whose stall observer spoke (the first seven; the pages
   after share an eighth, ``93 more pages``), a tick where each line fired,
   and what the line blames (``governor: provider stuck-co, tool stuck``)
   written where a lane's blame changes: whole, or as a code (``C1``) when
   it has no room, never cut or dropped (:func:`._text.place_labels`).
   Below the lanes a legend spells out every cause in full by its code. A
   page lost to a peer gets a purple tick, ``lost to a peer, N rows``;
   loop-lag events get a lane of their own (``event loop``). The label
   column is as wide as the longest lane name (a map whose name would not
   fit gets a short name, ``M1``, spelled out in the legend);
1. **rows in flight by phase**, stacked: ``resolver``, ``governor`` (a
   claimed call waiting for its slot), ``fetch``, ``writer admission``
   (finished, waiting to be taken by the writer), ``writer commit`` (taken,
   waiting for its batch to commit); each the mean number of rows in that
   phase over the interval;
2. **rows ended per interval** (a round length: 15 s, 2 min...), stacked
   bars: committed completed, committed failed, and lost to a peer (the
   rows a lost page left to the peer, ``page.lost``'s ``rows``, at the
   loss);
3. **provider concurrency**: calls of each provider holding a governor slot
   (from admission to settlement), mean per interval;
4. **the store**: sheet writes in flight (writer batches, mean per
   interval), and at each stall line the store calls it saw in flight (a
   dot, red when the line blames the store); above it the oldest store call
   a stall line saw unanswered, and how many lines blame the store.

Behind the panels' data, light red bands show the stretches the stall lines
speak for (from the page's last commit to the line), merged: a run with
hundreds of stall lines gets a few bands, not a line each; loop lags are an
orange strip along each panel's top. A legend names every colour.
:func:`render_timeline` returns the SVG text.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from .._trace import _records as r
from .._trace._cause import stall_blame
from .._trace._spans import PHASES, Spans
from ._text import place_labels, text_width

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._trace._spans import Span

_PHASE_COLOURS = (
    "#4e79a7",
    "#e15759",
    "#f28e2b",
    "#b07aa1",
    "#76b7b2",
    "#59a14f",
    "#bab0ac",
)
_PROVIDER_COLOURS = (
    "#6a3d9a",
    "#1b9e77",
    "#b15928",
    "#e7298a",
    "#666666",
    "#a6761d",
    "#1f78b4",
    "#d95f02",
    "#7570b3",
    "#66a61e",
)
_COMMITS, _FAILED, _LOST = "#8c6d31", "#b2182b", "#7b3294"
_STALL, _LAG = "#d62728", "#ff7f0e"
_WRITES, _STORE = "#333333", "#2166ac"
_LIGHT = {_STALL: "#fbe4e4", _LAG: "#fdc68a"}  # the bands behind the panels' data
_STRIP = 8  # pixels: the loop-lag strip along a panel's top
_ENDED = ("completed", "failed", "lost")
_ENDED_COLOURS = {"completed": _COMMITS, "failed": _FAILED, "lost": _LOST}
_BINS = 240
_BARS = 60  # at most
_LANES = 8  # stall lanes at most: the pages beyond share the last one
_LANE = 28  # pixels: a row of labels over a row of ticks
_ROUND = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200)
_WIDTH = 1100  # at least: wider when a legend line needs it
_LEFT, _RIGHT = 80, 30  # the left margin grows to the longest lane name
_NAME_ROOM = 300  # pixels at most for a lane's name: longer map names get a short one
_FONT = "font-family:DejaVu Sans,Helvetica,Arial,sans-serif"


class _Occupancy:
    """Mean count over each bin of intervals ``[a, b)``: a difference array, O(1) per interval."""

    def __init__(self, t0: float, width: float, bins: int) -> None:
        self.t0, self.width, self.bins = t0, width, bins
        self._full = [0.0] * (bins + 1)
        self._part = [0.0] * bins

    def add(self, start: float, end: float) -> None:
        if end <= start:
            return
        a = (start - self.t0) / self.width
        b = min((end - self.t0) / self.width, float(self.bins))
        first, last = int(a), min(int(b), self.bins - 1)
        if first == last:
            self._part[first] += b - a
            return
        self._part[first] += first + 1 - a
        if first + 1 <= last - 1:
            self._full[first + 1] += 1
            self._full[last] -= 1
        if last < self.bins:
            self._part[last] += b - last

    def means(self) -> list[float]:
        out, running = [], 0.0
        for index in range(self.bins):
            running += self._full[index]
            out.append(running + self._part[index])
        return out


class _Run:
    """What the picture needs, gathered from the events in one pass."""

    def __init__(self, events: list[r.Event]) -> None:
        self.t0 = min(e.at for e in events)
        self.t1 = max(e.at for e in events)
        # The time axis ends with the last commit bar: a round number of bars.
        self.bar = _bar_length(max(self.t1 - self.t0, 1e-3))
        bars = math.ceil(max(self.t1 - self.t0, 1e-3) / self.bar - 1e-9)
        # Rows that ended in each bar: committed completed, committed failed, lost to a peer.
        self.ended = {status: [0] * bars for status in _ENDED}
        self.span = bars * self.bar
        self._width = self.span / _BINS
        self.phases = {p: _Occupancy(self.t0, self._width, _BINS) for p in PHASES}
        self.providers: dict[str, _Occupancy] = {}
        self.writes = _Occupancy(self.t0, self._width, _BINS)  # sheet writes in flight
        self.failed_writes: list[float] = []
        # (at, lane, what the line blames): a lane per page, "event loop" for lags.
        self.stalls: list[tuple[float, tuple[str, int], str]] = []
        self.lags: list[tuple[float, str]] = []
        self.losses: list[tuple[float, tuple[str, int], str]] = []  # pages lost to a peer
        self.bands: dict[str, list[tuple[float, float]]] = {_STALL: [], _LAG: []}
        # At each stall line: (at, store calls in flight, its oldest's ms, operation, phase).
        self.store: list[tuple[float, int, float, str | None, str]] = []
        self.title = "trioplay timeline"
        self.waited = False  # did a row wait for an outside event (a phase of its own)
        self.counts = dict.fromkeys(_ENDED, 0)
        self._lost_rows: dict[tuple[str, int], int] = {}
        spans = Spans(self._span)
        for e in events:
            spans.feed(e)
            if isinstance(e, r.RunStarted):
                self.title = f"trioplay timeline: run {e.run} (play {e.play}, attempt {e.attempt})"
            elif isinstance(e, r.RowWaiting):
                self.waited = True
            elif isinstance(e, r.RowCommitted):
                self._count(e.status if e.status in _ENDED else "failed", e.at)
            elif isinstance(e, r.MapStall):
                self._stall(e)
            elif isinstance(e, r.LoopLag):
                self.lags.append((e.at, f"lag {e.lag_ms:,.0f} ms"))
                self.bands[_LAG].append((e.at - e.lag_ms / 1000, e.at))
            elif isinstance(e, r.PageLost):
                # The rows it left to the peer (an older record: those in flight).
                rows = self._lost_rows.pop((e.map, e.page), 0)
                rows = e.rows if e.rows or e.keys else rows
                self._count("lost", e.at, rows)
                self.losses.append((e.at, (e.map, e.page), f"lost to a peer, {rows:,} rows"))
            elif isinstance(e, r.WriterBatchFailed):
                self.failed_writes.append(e.at)
        spans.close(self.t1)  # what is still in flight at the end

    @property
    def committed(self) -> int:
        return self.counts["completed"] + self.counts["failed"]

    def _count(self, status: str, at: float, rows: int = 1) -> None:
        self.counts[status] += rows
        bars = self.ended[status]
        bars[min(int((at - self.t0) / self.bar), len(bars) - 1)] += rows

    def _stall(self, e: r.MapStall) -> None:
        report = e.report
        self.stalls.append((e.at, (e.map, e.page), stall_blame(report)))
        # The page made no commit since its last one: the stretch the line speaks for.
        quiet = float(report.get("last_terminal_commit_ms") or 0) / 1000
        self.bands[_STALL].append((max(e.at - quiet, self.t0), e.at))
        operation = report.get("oldest_store_operation")
        self.store.append(
            (
                e.at,
                int(report.get("store_active") or 0),
                float(report.get("oldest_store_ms") or 0),
                str(operation) if operation else None,
                str(report.get("oldest_phase")),
            )
        )

    def _span(self, span: Span) -> None:
        """A row's phase, a row, a governor slot or a sheet write ended: count it."""
        if span.kind == "phase" and span.key[0] == "row":
            self.phases[span.name].add(span.start, span.end)
        elif span.kind == "row" and span.args.get("status") == "lost":
            page = (span.args["map"], span.args["page"])
            self._lost_rows[page] = self._lost_rows.get(page, 0) + 1
        elif span.kind == "slot":
            if span.group not in self.providers:
                self.providers[span.group] = _Occupancy(self.t0, self._width, _BINS)
            self.providers[span.group].add(span.start, span.end)
        elif span.kind == "batch":
            self.writes.add(span.start, span.end)


def _bar_length(span: float) -> float:
    """A round interval (seconds) that cuts ``span`` into at most :data:`_BARS` bars."""
    wanted = span / _BARS
    if wanted < 1:
        power = 10 ** math.floor(math.log10(wanted))
        return float(next(m * power for m in (1, 2, 5, 10) if m * power >= wanted))
    return float(next((n for n in _ROUND if n >= wanted), math.ceil(wanted / 3600) * 3600))


def _length(seconds: float) -> str:
    """``seconds`` in the unit that reads best: ``15 s``, ``2 min``, ``500 ms``."""
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            return f"{_number(seconds / size)} {unit}"
    return f"{_number(seconds * 1000)} ms"


def _unit(span: float) -> tuple[str, float]:
    if span < 2:
        return "ms", 1000.0
    if span < 180:
        return "s", 1.0
    if span < 3 * 3600:
        return "min", 1 / 60
    return "h", 1 / 3600


def _ticks(top: float, count: int = 6, whole: bool = False) -> list[float]:
    """Round tick values from 0 to at least ``top`` (1, 2 or 5 times a power of ten apart;
    ``whole``: at least 1 apart)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = max(top / count, 1.0) if whole else top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:g}"


def _text(
    x: float,
    y: float,
    body: str,
    size: int = 12,
    anchor: str = "start",
    colour: str = "#222",
    weight: str = "normal",
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{colour}" font-weight="{weight}" style="{_FONT}">{escape(body)}</text>'
    )


class _Canvas:
    """The SVG being drawn: its parts, its margins, and the x of a time."""

    def __init__(self, run: _Run, left: float, width: float) -> None:
        self.run = run
        self.parts: list[str] = []
        self.unit, self.scale = _unit(run.span)
        self.left, self.width = left, width
        self.plot = width - left - _RIGHT

    def x(self, at: float) -> float:
        return self.left + (at - self.run.t0) / self.run.span * self.plot

    def frame(self, top: float, height: float, title: str, note: str = "") -> None:
        """A panel's frame and title, with a grey ``note`` between them if any."""
        self.parts.append(
            f'<rect x="{self.left:.1f}" y="{top}" width="{self.plot:.1f}" height="{height}" '
            'fill="#fafafa" stroke="#999"/>'
        )
        self.parts.append(
            _text(self.left, top - 6 - (_NOTE if note else 0), title, 13, "start", "#222", "bold")
        )
        if note:
            self.parts.append(_text(self.left, top - 6, note, 11, colour="#555"))

    def panel(
        self,
        top: float,
        height: float,
        title: str,
        ylabel: str,
        ymax: float,
        whole: bool = False,
        note: str = "",
    ) -> float:
        """Frame, y ticks and labels of one panel; returns its y scale (pixels per unit).
        ``whole``: the panel counts, its ticks are whole numbers."""
        ticks = _ticks(ymax, 4, whole)
        scale = height / ticks[-1]
        self.frame(top, height, title, note)
        self.bands(top, height)
        for tick in ticks:
            y = top + height - tick * scale
            self.parts.append(
                f'<line x1="{self.left - 4:.1f}" y1="{y:.1f}" x2="{self.left + self.plot:.1f}" '
                f'y2="{y:.1f}" stroke="#e3e3e3"/>'
            )
            self.parts.append(_text(self.left - 7, y + 4, _number(tick), 11, "end"))
        middle = top + height / 2
        self.parts.append(
            f'<text x="18" y="{middle:.1f}" font-size="11" text-anchor="middle" '
            f'transform="rotate(-90 18 {middle:.1f})" fill="#444" '
            f'style="{_FONT}">{escape(ylabel)}</text>'
        )
        return scale

    def _points(self, top: float, values: list[float], scale: float) -> list[str]:
        step = self.plot / _BINS
        return [
            f"{self.left + (i + k) * step:.1f},{top - values[i] * scale:.1f}"
            for i in range(_BINS)
            for k in (0, 1)
        ]

    def stacked(
        self, bottom: float, series: list[list[float]], colours: tuple[str, ...], scale: float
    ) -> None:
        base = [0.0] * _BINS
        for values, colour in zip(series, colours, strict=False):
            upper = [b + v for b, v in zip(base, values, strict=True)]
            if any(values):
                points = self._points(bottom, upper, scale)
                back = self._points(bottom, base, scale)[::-1]
                self.parts.append(
                    f'<polygon points="{" ".join(points + back)}" fill="{colour}" '
                    'fill-opacity="0.85" stroke="none"/>'
                )
            base = upper

    def lines(
        self, bottom: float, series: list[list[float]], colours: list[str], scale: float
    ) -> None:
        for values, colour in zip(series, colours, strict=True):
            points = self._points(bottom, values, scale)
            self.parts.append(
                f'<polyline points="{" ".join(points)}" fill="none" '
                f'stroke="{colour}" stroke-width="1.8"/>'
            )

    def bars(self, bottom: float, scale: float) -> None:
        """One bar per ``run.bar`` seconds: completed, failed and lost rows stacked."""
        run = self.run
        for index in range(len(run.ended["completed"])):
            left = self.x(run.t0 + index * run.bar)
            right = self.x(run.t0 + (index + 1) * run.bar)
            base = bottom
            for status in _ENDED:
                count = run.ended[status][index]
                if count:
                    h = max(count * scale, 2.0)  # one failed row among thousands still shows
                    self.parts.append(
                        f'<rect x="{left + 0.5:.1f}" y="{base - h:.1f}" '
                        f'width="{max(right - left - 1, 0.5):.1f}" '
                        f'height="{h:.1f}" fill="{_ENDED_COLOURS[status]}" stroke="none"/>'
                    )
                    base -= h

    def store_panel(self, top: float, height: float) -> None:
        """Sheet writes in flight (a dashed line), the store calls in flight at each stall
        line (a dot, filled red when the line blames the store), failed writes (a red ×);
        above it, the oldest store call a stall line saw unanswered."""
        run = self.run
        writes = run.writes.means()
        peak = max([*writes, *(active for _, active, *_ in run.store), 1.0])
        title = "store: sheet writes in flight, store calls in flight at each stall line"
        scale = self.panel(top, height, title, "calls", peak + 0.5, True, _store_note(run))
        bottom = top + height
        points = self._points(bottom, writes, scale)
        self.parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{_WRITES}" '
            'stroke-width="1.5" stroke-dasharray="5,3"/>'
        )
        seen: set[tuple[int, int]] = set()  # one dot per pixel
        for at, active, _ms, _operation, phase in run.store:
            x, y = self.x(at), bottom - active * scale
            if (round(x), round(y)) in seen:
                continue
            seen.add((round(x), round(y)))
            fill = _STALL if phase == "store" else "white"
            self.parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{fill}" stroke="{_STORE}"/>'
            )
        for at in run.failed_writes:
            self.parts.append(_text(self.x(at), top + 12, "×", 13, "middle", _FAILED, "bold"))

    def stall_lanes(
        self,
        top: float,
        lanes: list[tuple[str, list[tuple[float, str, str]]]],
        codes: dict[str, str],
    ) -> None:
        """Panel 0: a lane per page, a tick per stall line (or page loss), what it blames above.

        A label is written where a lane's label changes: whole, or as its
        code from the legend below (see :func:`place_labels`).
        """
        parts = self.parts
        title = "stall lines, by page, and the cause each names"
        if self.run.losses:
            title += "; pages lost to a peer"
        self.frame(top, _LANE * len(lanes), title)
        right = self.left + self.plot - 2
        for index, (name, marks) in enumerate(lanes):
            y = top + index * _LANE
            if index:
                parts.append(
                    f'<line x1="{self.left:.1f}" y1="{y}" x2="{right + 2:.1f}" y2="{y}" '
                    'stroke="#e3e3e3"/>'
                )
            parts.append(_text(self.left - 7, y + 18, name, 11, "end"))
            ticks: set[tuple[str, int]] = set()  # one tick per colour and pixel
            for at, _label, colour in marks:
                x = self.x(at)
                if (colour, round(x)) not in ticks:
                    ticks.add((colour, round(x)))
                    parts.append(
                        f'<line x1="{x:.1f}" y1="{y + 15}" x2="{x:.1f}" y2="{y + _LANE - 2}" '
                        f'stroke="{colour}" stroke-width="2.5"/>'
                    )
            changes = [
                (self.x(at), label, colour)
                for n, (at, label, colour) in enumerate(marks)
                if n == 0 or label != marks[n - 1][1]
            ]
            for label in place_labels(changes, codes, self.left + 2, right, 11):
                parts.append(_text(label.x, y + 12, label.body, 11, colour=label.colour))

    def causes(self, top: float, codes: dict[str, str], names: dict[str, str]) -> None:
        """The legend of the lanes: each code and what it stands for, in full."""
        for n, (full, code) in enumerate([*codes.items(), *names.items()]):
            y = top + n * _CAUSE
            self.parts.append(_text(self.left, y, code, 11, weight="bold"))
            self.parts.append(_text(self.left + _CODE, y, full, 11))

    def bands(self, top: float, height: float) -> None:
        """The stretches stall lines speak for (a page without a commit, up to its line),
        merged, as light bands behind a panel's data, never one line per stall line; loop
        lags as a strip along the panel's top."""
        for colour, stretches in self.run.bands.items():
            high = height if colour == _STALL else _STRIP
            for start, end in _merged(stretches, self.run.span / self.plot * 2):
                left = self.x(start)
                self.parts.append(
                    f'<rect x="{left:.1f}" y="{top}" width="{max(self.x(end) - left, 1.5):.1f}" '
                    f'height="{high}" fill="{_LIGHT[colour]}" stroke="none"/>'
                )

    def time_axis(self, y: float) -> None:
        run = self.run
        ticks = _ticks(run.span * self.scale, 8)
        for tick in ticks:
            if tick > run.span * self.scale * 1.0001:
                break
            x = self.left + tick / (run.span * self.scale) * self.plot
            self.parts.append(
                f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#444"/>'
            )
            self.parts.append(_text(x, y + 18, _number(tick), 11, "middle"))
        title = f"time since the first event ({self.unit})"
        self.parts.append(_text(self.left + self.plot / 2, y + 36, title, 12, "middle"))

    def legend(self, y: float, items: list[tuple[str, str, str]]) -> float:
        """Swatches (``box``), lines (``line``) and bands (``band``) with their names, in
        lines as wide as the picture; returns the y below the last line."""
        x = self.left
        for name, colour, shape in items:
            room = 22 + text_width(name, 12) + 14
            if x + room > self.width - _RIGHT and x > self.left:
                x, y = self.left, y + 20
            if shape in ("line", "dash"):
                dash = ' stroke-dasharray="5,3"' if shape == "dash" else ""
                self.parts.append(
                    f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 14:.1f}" y2="{y - 4}" '
                    f'stroke="{colour}" stroke-width="2"{dash}/>'
                )
            elif shape == "dot":
                self.parts.append(
                    f'<circle cx="{x + 7:.1f}" cy="{y - 4}" r="3" fill="white" stroke="{colour}"/>'
                )
            else:
                fill, stroke = (_LIGHT[colour], colour) if shape == "band" else (colour, "none")
                self.parts.append(
                    f'<rect x="{x:.1f}" y="{y - 10}" width="14" height="12" '
                    f'fill="{fill}" stroke="{stroke}"/>'
                )
            self.parts.append(_text(x + 19, y, name, 12))
            x += room
        return y + 20


_CAUSE = 16  # pixels: a line of the lanes' legend
_NOTE = 16  # pixels: the store panel's note, a line above its title
_CODE = 34  # pixels: a code's column in it


def _store_note(run: _Run) -> str:
    """The oldest store call the stall lines saw unanswered, and how many blame the store."""
    oldest = max(run.store, key=lambda s: s[2], default=None)
    if oldest is not None and oldest[2] > 0:
        note = (
            f"oldest store call unanswered at a stall line: {oldest[3] or 'a call'}, "
            f"{oldest[2]:,.0f} ms"
        )
    else:
        note = "no store call was unanswered at a stall line"
    stalls = sum(1 for *_, phase in run.store if phase == "store")
    return note + (f"; {stalls:,} stall line(s) blame the store" if stalls else "")


def _merged(stretches: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """``stretches`` merged where they overlap or lie less than ``gap`` apart."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(stretches):
        if out and start <= out[-1][1] + gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _lanes(run: _Run) -> tuple[list[tuple[str, list[tuple[float, str, str]]]], dict[str, str]]:
    """The stall lanes: a name, and its marks ``(at, label, colour)`` in order of time; and
    the short names given to maps whose names would not fit the lane names' room."""
    pages = sorted({lane for _, lane, _ in run.stalls} | {lane for _, lane, _ in run.losses})
    maps = sorted({name for name, _ in pages})
    short: dict[str, str] = {}
    if len(maps) > 1 and any(text_width(f"{m} p0,000", 11) > _NAME_ROOM for m in maps):
        short = {m: f"M{n}" for n, m in enumerate(maps, 1)}
    names = {
        lane: f"page {lane[1]:,}"
        if len(maps) == 1
        else f"{short.get(lane[0], lane[0])} p{lane[1]:,}"
        for lane in pages
    }
    if len(pages) > _LANES:  # the last lane holds the rest
        rest = f"{len(pages) - _LANES + 1:,} more pages"
        names.update({lane: rest for lane in pages[_LANES - 1 :]})
    lanes: dict[str, list[tuple[float, str, str]]] = {names[lane]: [] for lane in pages}
    for at, lane, blame in run.stalls:
        lanes[names[lane]].append((at, blame, _STALL))
    for at, lane, label in run.losses:
        lanes[names[lane]].append((at, label, _LOST))
    for marks in lanes.values():
        marks.sort(key=lambda mark: mark[0])
    if run.lags:
        lanes["event loop"] = [(at, label, _LAG) for at, label in run.lags]
    return list(lanes.items()), short


def _codes(lanes: list[tuple[str, list[tuple[float, str, str]]]]) -> dict[str, str]:
    """A short code (``C1``, ``C2``...) for every label of the lanes, in order of first use."""
    codes: dict[str, str] = {}
    for _name, marks in lanes:
        for _at, label, _colour in marks:
            if label not in codes:
                codes[label] = f"C{len(codes) + 1}"
    return codes


def render_timeline(events: Iterable[r.Event]) -> str:
    """The SVG text of the timeline of ``events`` (see the module docstring)."""
    listed = list(events)
    if not listed:
        raise ValueError("no events to draw")
    run = _Run(listed)
    lanes, short = _lanes(run)
    # The lanes' legend: every label of the lanes in full, and the maps' short names.
    legend, names = _codes(lanes), short
    left = max([float(_LEFT), *(text_width(name, 11) + 14 for name, _ in lanes)])
    widest = max([text_width(full, 11) + _CODE for full in [*legend, *names]], default=0.0)
    width = max(float(_WIDTH), math.ceil(left + widest + _RIGHT))
    canvas = _Canvas(run, left, width)
    strip = _LANE * len(lanes)
    listed_causes = (len(legend) + len(names)) * _CAUSE
    top = 80 + (strip + 24 + listed_causes + 30 if lanes else 0)
    heights = (230, 110, 140, 110)
    gap = 46
    tops = [top]
    for height in heights[:-1]:
        tops.append(tops[-1] + height + gap)
    tops[-1] += _NOTE  # the store panel's note above its title
    bottom = tops[-1] + heights[-1]

    parts = canvas.parts
    parts.append(_text(left, 24, run.title, 15, weight="bold"))
    counts = run.counts
    summary = f"{counts['completed']:,} rows completed, {counts['failed']:,} failed"
    if run.losses:
        summary += f", {counts['lost']:,} lost with {len(run.losses):,} page(s) taken by a peer"
    summary += (
        f" ({run.committed:,} committed) over {(run.t1 - run.t0) * canvas.scale:,.1f} "
        f"{canvas.unit}; {len(run.stalls):,} stall line(s)"
    )
    parts.append(_text(left, 44, summary, 12, colour="#555"))
    # 1. rows in flight by phase
    series = [run.phases[p].means() for p in PHASES]
    peak = max((sum(v) for v in zip(*series, strict=True)), default=0.0)
    scale = canvas.panel(tops[0], heights[0], "rows in flight, by phase", "rows", max(peak, 1))
    canvas.stacked(tops[0] + heights[0], series, _PHASE_COLOURS, scale)
    # 2. rows ended per interval: committed completed, committed failed, lost
    ended = [sum(bar) for bar in zip(*run.ended.values(), strict=True)]
    title = f"rows committed per {_length(run.bar)}: completed, failed" + (
        ", and rows lost to a peer" if run.losses else ""
    )
    scale = canvas.panel(tops[1], heights[1], title, "rows", max(max(ended), 1), True)
    canvas.bars(tops[1] + heights[1], scale)
    # 3. provider concurrency
    providers = sorted(run.providers)
    colours = [_PROVIDER_COLOURS[i % len(_PROVIDER_COLOURS)] for i in range(len(providers))]
    values = [run.providers[n].means() for n in providers]
    peak = max((max(v) for v in values), default=0.0)
    title = "provider concurrency (calls holding a slot)"
    scale = canvas.panel(tops[2], heights[2], title, "calls", max(peak, 1))
    canvas.lines(tops[2] + heights[2], values, colours, scale)
    # 4. the store
    canvas.store_panel(tops[3], heights[3])
    canvas.time_axis(bottom)
    if lanes:
        canvas.stall_lanes(80, lanes, legend)
        canvas.causes(80 + strip + 24, legend, names)
    items = [
        (p, c, "box")
        for p, c in zip(PHASES, _PHASE_COLOURS, strict=True)
        if p != "waiting" or run.waited
    ]
    items += [(status, _ENDED_COLOURS[status], "box") for status in _ENDED[:2]]
    if run.losses:
        items.append(("lost to a peer", _LOST, "box"))
    items += [(f"provider {n}", c, "line") for n, c in zip(providers, colours, strict=True)]
    items += [("sheet writes", _WRITES, "dash"), ("store calls at a stall line", _STORE, "dot")]
    if run.stalls:
        items.append(("stall line (band: its page without a commit)", _STALL, "band"))
    if run.lags:
        items.append(("loop lag (strip: the loop blocked)", _LAG, "band"))
    end = canvas.legend(bottom + 66, items)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{end:.0f}" '
        f'viewBox="0 0 {width} {end:.0f}">'
        f'<rect width="100%" height="100%" fill="white"/>'
    )
    return head + "\n".join(parts) + "</svg>\n"
