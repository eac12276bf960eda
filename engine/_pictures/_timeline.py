"""The timeline picture of a recorded run: an SVG drawn from its events, no dependency.

Up to four panels share one time axis (seconds since the first event, or
milliseconds, minutes or hours, whichever reads best):

0. **stall lines by page** (when there are any): a lane per page whose
   stall observer spoke, a tick where each line fired, and written beside
   the tick what the line blames (``governor: provider stuck-co, tool
   stuck``), once for each run of lines that blame the same; loop-lag
   events get a lane of their own (``event loop``);
1. **rows in flight by phase**, stacked: ``resolver``, ``governor`` (a
   claimed call waiting for its slot), ``fetch``, ``writer admission``
   (finished, waiting to be taken by the writer), ``writer commit`` (taken,
   waiting for its batch to commit); each the mean number of rows in that
   phase over the interval;
2. **commits per interval**: rows committed in each interval (a round
   length: 15 s, 2 min...), as bars;
3. **provider concurrency**: calls of each provider holding a governor slot
   (from admission to settlement), mean per interval.

Each tick also draws a dashed line across the panels below (red for stall
lines, orange for loop lag), so what the rows did at that moment lines up
with what the line said. A legend names every colour.
:func:`render_timeline` returns the SVG text.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from .._trace import _records as r
from .._trace._cause import stall_blame
from .._trace._spans import PHASES, Spans

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._trace._spans import Span

_PHASE_COLOURS = ("#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f", "#bab0ac")
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
_COMMITS = "#8c6d31"
_STALL, _LAG = "#d62728", "#ff7f0e"
_BINS = 240
_BARS = 60  # at most
_LANES = 8  # stall lanes at most: the pages beyond share the last one
_LANE = 28  # pixels: a row of labels over a row of ticks
_CHAR = 6.2  # the mean width of a character at 11 px, in pixels
_ROUND = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200)
_WIDTH = 1100
_LEFT, _RIGHT = 80, 30
_PLOT = _WIDTH - _LEFT - _RIGHT
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
        self.commits = [0] * math.ceil(max(self.t1 - self.t0, 1e-3) / self.bar - 1e-9)
        self.span = len(self.commits) * self.bar
        self._width = self.span / _BINS
        self.phases = {p: _Occupancy(self.t0, self._width, _BINS) for p in PHASES}
        self.providers: dict[str, _Occupancy] = {}
        # (at, lane, what the line blames): a lane per page, "event loop" for lags.
        self.stalls: list[tuple[float, tuple[str, int], str]] = []
        self.lags: list[tuple[float, str]] = []
        self.title = "trioplay timeline"
        self.waited = False  # did a row wait for an outside event (a phase of its own)
        self.committed = 0
        spans = Spans(self._span)
        for e in events:
            spans.feed(e)
            if isinstance(e, r.RunStarted):
                self.title = f"trioplay timeline: run {e.run} (play {e.play}, attempt {e.attempt})"
            elif isinstance(e, r.RowWaiting):
                self.waited = True
            elif isinstance(e, r.RowCommitted):
                self.committed += 1
                bar = min(int((e.at - self.t0) / self.bar), len(self.commits) - 1)
                self.commits[bar] += 1
            elif isinstance(e, r.MapStall):
                self.stalls.append((e.at, (e.map, e.page), stall_blame(e.report)))
            elif isinstance(e, r.LoopLag):
                self.lags.append((e.at, f"lag {e.lag_ms:,.0f} ms"))
        spans.close(self.t1)  # what is still in flight at the end

    def _span(self, span: Span) -> None:
        """A row's phase or a governor slot ended: count it where it belongs."""
        if span.kind == "phase" and span.key[0] == "row":
            self.phases[span.name].add(span.start, span.end)
        elif span.kind == "slot":
            if span.group not in self.providers:
                self.providers[span.group] = _Occupancy(self.t0, self._width, _BINS)
            self.providers[span.group].add(span.start, span.end)


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
    def __init__(self, run: _Run) -> None:
        self.run = run
        self.parts: list[str] = []
        self.unit, self.scale = _unit(run.span)

    def x(self, at: float) -> float:
        return _LEFT + (at - self.run.t0) / self.run.span * _PLOT

    def panel(
        self, top: float, height: float, title: str, ylabel: str, ymax: float, whole: bool = False
    ) -> float:
        """Frame, y ticks and labels of one panel; returns its y scale (pixels per unit).
        ``whole``: the panel counts, its ticks are whole numbers."""
        ticks = _ticks(ymax, 4, whole)
        scale = height / ticks[-1]
        self.parts.append(
            f'<rect x="{_LEFT}" y="{top}" width="{_PLOT}" height="{height}" '
            'fill="#fafafa" stroke="#999"/>'
        )
        for tick in ticks:
            y = top + height - tick * scale
            self.parts.append(
                f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_LEFT + _PLOT}" '
                f'y2="{y:.1f}" stroke="#e3e3e3"/>'
            )
            self.parts.append(_text(_LEFT - 7, y + 4, _number(tick), 11, "end"))
        self.parts.append(_text(_LEFT, top - 6, title, 13, weight="bold"))
        middle = top + height / 2
        self.parts.append(
            f'<text x="18" y="{middle:.1f}" font-size="11" text-anchor="middle" '
            f'transform="rotate(-90 18 {middle:.1f})" fill="#444" '
            f'style="{_FONT}">{escape(ylabel)}</text>'
        )
        return scale

    def stacked(
        self,
        top: float,
        height: float,
        series: list[list[float]],
        colours: tuple[str, ...],
        scale: float,
    ) -> None:
        base = [0.0] * _BINS
        step = _PLOT / _BINS
        for values, colour in zip(series, colours, strict=False):
            upper = [b + v for b, v in zip(base, values, strict=True)]
            if any(values):
                points = [
                    f"{_LEFT + (i + k) * step:.1f},{top + height - upper[i] * scale:.1f}"
                    for i in range(_BINS)
                    for k in (0, 1)
                ]
                back = [
                    f"{_LEFT + (i + k) * step:.1f},{top + height - base[i] * scale:.1f}"
                    for i in reversed(range(_BINS))
                    for k in (1, 0)
                ]
                self.parts.append(
                    f'<polygon points="{" ".join(points + back)}" fill="{colour}" '
                    'fill-opacity="0.85" stroke="none"/>'
                )
            base = upper

    def lines(
        self, top: float, height: float, series: list[list[float]], colours: list[str], scale: float
    ) -> None:
        step = _PLOT / _BINS
        for values, colour in zip(series, colours, strict=True):
            points = [
                f"{_LEFT + (i + k) * step:.1f},{top + height - values[i] * scale:.1f}"
                for i in range(_BINS)
                for k in (0, 1)
            ]
            self.parts.append(
                f'<polyline points="{" ".join(points)}" fill="none" '
                f'stroke="{colour}" stroke-width="1.8"/>'
            )

    def bars(self, top: float, height: float, counts: list[int], scale: float) -> None:
        """One bar per ``run.bar`` seconds."""
        run = self.run
        for index, count in enumerate(counts):
            if count:
                h = count * scale
                left = self.x(run.t0 + index * run.bar)
                right = self.x(run.t0 + (index + 1) * run.bar)
                self.parts.append(
                    f'<rect x="{left + 0.5:.1f}" y="{top + height - h:.1f}" '
                    f'width="{max(right - left - 1, 0.5):.1f}" '
                    f'height="{h:.1f}" fill="{_COMMITS}"/>'
                )

    def stall_lanes(
        self,
        top: float,
        lanes: list[tuple[str, list[tuple[float, str, str]]]],
        below: float,
        bottom: float,
    ) -> None:
        """Panel 0: a lane per page, a tick per stall line, what it blames written above it.

        A label is written above the tick where a lane's blame changes (the
        first line, then each line that blames something else), starting at
        the tick and cut to end before the next label of its lane; the last
        one ends at its tick instead when there is more room to the left.
        Each tick draws a dashed line from ``below`` (the top of panel 1) down
        to ``bottom``.
        """
        height = _LANE * len(lanes)
        parts = self.parts
        parts.append(
            f'<rect x="{_LEFT}" y="{top}" width="{_PLOT}" height="{height}" '
            'fill="#fafafa" stroke="#999"/>'
        )
        title = "stall lines, by page, and the cause each names"
        parts.append(_text(_LEFT, top - 6, title, 13, weight="bold"))
        drawn: set[tuple[str, int]] = set()  # one dashed line per colour and pixel
        for index, (name, marks) in enumerate(lanes):
            y = top + index * _LANE
            if index:
                parts.append(
                    f'<line x1="{_LEFT}" y1="{y}" x2="{_LEFT + _PLOT}" y2="{y}" stroke="#e3e3e3"/>'
                )
            parts.append(_text(_LEFT - 7, y + 18, name, 11, "end"))
            labelled = [
                (self.x(at), label, colour)
                for n, (at, label, colour) in enumerate(marks)
                if n == 0 or label != marks[n - 1][1]
            ]
            for at, _label, colour in marks:
                x = self.x(at)
                parts.append(
                    f'<line x1="{x:.1f}" y1="{y + 15}" x2="{x:.1f}" y2="{y + _LANE - 2}" '
                    f'stroke="{colour}" stroke-width="2.5"/>'
                )
                if (colour, round(x)) not in drawn:
                    drawn.add((colour, round(x)))
                    parts.append(
                        f'<line x1="{x:.1f}" y1="{below}" x2="{x:.1f}" y2="{bottom}" '
                        f'stroke="{colour}" stroke-width="1.2" stroke-dasharray="5,3" '
                        'stroke-opacity="0.7"/>'
                    )
            end = float(_LEFT)  # where the lane's last label ends
            for n, (x, label, colour) in enumerate(labelled):
                right = labelled[n + 1][0] - 8 if n + 1 < len(labelled) else _WIDTH - 4
                room, left_room = right - x, x - 8 - end
                if n + 1 == len(labelled) and len(label) * _CHAR > room and left_room > room:
                    text = _fit(label, left_room)
                    if text:
                        parts.append(_text(x + 1, y + 12, text, 11, "end", colour))
                    continue
                text = _fit(label, room)
                if text:
                    parts.append(_text(x - 1, y + 12, text, 11, colour=colour))
                    end = x + len(text) * _CHAR

    def time_axis(self, y: float) -> None:
        run = self.run
        ticks = _ticks(run.span * self.scale, 8)
        for tick in ticks:
            if tick > run.span * self.scale * 1.0001:
                break
            x = _LEFT + tick / (run.span * self.scale) * _PLOT
            self.parts.append(
                f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#444"/>'
            )
            self.parts.append(_text(x, y + 18, _number(tick), 11, "middle"))
        self.parts.append(
            _text(
                _LEFT + _PLOT / 2, y + 36, f"time since the first event ({self.unit})", 12, "middle"
            )
        )

    def legend(self, y: float, items: list[tuple[str, str]], dashed: list[tuple[str, str]]) -> None:
        x = float(_LEFT)
        for name, colour in items:
            self.parts.append(
                f'<rect x="{x:.1f}" y="{y - 10}" width="12" height="12" fill="{colour}"/>'
            )
            self.parts.append(_text(x + 17, y, name, 12))
            x += 30 + 7 * len(name)
        for name, colour in dashed:
            self.parts.append(
                f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 14:.1f}" y2="{y - 4}" '
                f'stroke="{colour}" stroke-width="2" stroke-dasharray="4,2"/>'
            )
            self.parts.append(_text(x + 19, y, name, 12))
            x += 32 + 7 * len(name)


def _lanes(run: _Run) -> list[tuple[str, list[tuple[float, str, str]]]]:
    """The stall lanes: a name, and its marks ``(at, label, colour)`` in order of time."""
    pages = sorted({lane for _, lane, _ in run.stalls})
    maps = {name for name, _ in pages}
    names = {
        lane: f"page {lane[1]:,}" if len(maps) == 1 else f"{lane[0]} p{lane[1]:,}" for lane in pages
    }
    if len(pages) > _LANES:  # the last lane holds the rest
        rest = f"{len(pages) - _LANES + 1} more pages"
        names.update({lane: rest for lane in pages[_LANES - 1 :]})
    lanes: dict[str, list[tuple[float, str, str]]] = {names[lane]: [] for lane in pages}
    for at, lane, blame in run.stalls:
        lanes[names[lane]].append((at, blame, _STALL))
    if run.lags:
        lanes["event loop"] = [(at, label, _LAG) for at, label in run.lags]
    return list(lanes.items())


def _fit(label: str, room: float) -> str:
    """``label`` cut (with an ellipsis) to ``room`` pixels; empty if not even a word fits."""
    if len(label) * _CHAR <= room:
        return label
    keep = int(room / _CHAR) - 1
    return label[:keep].rstrip(" ,:") + "…" if keep >= 6 else ""


def render_timeline(events: Iterable[r.Event]) -> str:
    """The SVG text of the timeline of ``events`` (see the module docstring)."""
    listed = list(events)
    if not listed:
        raise ValueError("no events to draw")
    run = _Run(listed)
    canvas = _Canvas(run)
    lanes = _lanes(run)
    strip = _LANE * len(lanes)
    top = 80 + (strip + 46 if lanes else 0)
    heights = (230, 110, 140)
    gap = 46
    tops = [top, top + heights[0] + gap, top + heights[0] + heights[1] + 2 * gap]
    bottom = tops[2] + heights[2]
    total_height = bottom + 100
    parts = canvas.parts
    parts.append(_text(_LEFT, 24, run.title, 15, weight="bold"))
    summary = (
        f"{run.committed:,} rows committed over {(run.t1 - run.t0) * canvas.scale:,.1f} "
        f"{canvas.unit}; {len(run.stalls)} stall line(s)"
    )
    parts.append(_text(_LEFT, 44, summary, 12, colour="#555"))
    # 1. rows in flight by phase
    series = [run.phases[p].means() for p in PHASES]
    peak = max((sum(v) for v in zip(*series, strict=True)), default=0.0)
    scale = canvas.panel(tops[0], heights[0], "rows in flight, by phase", "rows", max(peak, 1))
    canvas.stacked(tops[0], heights[0], series, _PHASE_COLOURS, scale)
    # 2. commits per interval
    title = f"rows committed per {_length(run.bar)}"
    scale = canvas.panel(tops[1], heights[1], title, "rows", max(max(run.commits), 1), True)
    canvas.bars(tops[1], heights[1], run.commits, scale)
    # 3. provider concurrency
    names = sorted(run.providers)
    colours = [_PROVIDER_COLOURS[i % len(_PROVIDER_COLOURS)] for i in range(len(names))]
    values = [run.providers[n].means() for n in names]
    peak = max((max(v) for v in values), default=0.0)
    scale = canvas.panel(
        tops[2], heights[2], "provider concurrency (calls holding a slot)", "calls", max(peak, 1)
    )
    canvas.lines(tops[2], heights[2], values, colours, scale)
    canvas.time_axis(bottom)
    if lanes:
        canvas.stall_lanes(80, lanes, tops[0], bottom)
    legend = [
        (p, c) for p, c in zip(PHASES, _PHASE_COLOURS, strict=True) if p != "waiting" or run.waited
    ]
    legend.append(("commits", _COMMITS))
    cut = len(legend)  # the phases and commits on the first line, the providers below
    legend += [(f"provider {n}", c) for n, c in zip(names, colours, strict=True)]
    canvas.legend(
        total_height - 34,
        legend[:cut],
        [("stall line", _STALL)] + ([("loop lag", _LAG)] if run.lags else []),
    )
    if legend[cut:]:
        canvas.legend(total_height - 14, legend[cut:], [])
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{total_height}" '
        f'viewBox="0 0 {_WIDTH} {total_height}">'
        f'<rect width="100%" height="100%" fill="white"/>'
    )
    return head + "\n".join(parts) + "</svg>\n"
