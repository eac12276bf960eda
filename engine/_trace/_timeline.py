"""The timeline picture of a recorded run: an SVG drawn from its events, no dependency.

Three panels share one time axis (seconds since the first event, or
milliseconds, minutes or hours, whichever reads best):

1. **rows in flight by phase**, stacked: ``resolver``, ``governor`` (a
   claimed call waiting for its slot), ``fetch``, ``writer admission``
   (finished, waiting to be taken by the writer), ``writer commit`` (taken,
   waiting for its batch to commit); each the mean number of rows in that
   phase over the interval;
2. **commits per interval**: rows committed in each interval, as bars;
3. **provider concurrency**: calls of each provider holding a governor slot
   (from admission to settlement), mean per interval.

Stall lines are red dashed marks across every panel, where they fired, with
their cause written above (loop-lag events are orange marks). A legend names
every colour. :func:`render_timeline` returns the SVG text.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from . import _records as r

if TYPE_CHECKING:
    from collections.abc import Iterable

PHASES = ("resolver", "governor", "fetch", "writer admission", "writer commit")
_PHASE_COLOURS = ("#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f")
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
_BINS = 240
_BARS = 60
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
        self.span = max(self.t1 - self.t0, 1e-3)
        width = self.span / _BINS
        self.phases = {p: _Occupancy(self.t0, width, _BINS) for p in PHASES}
        self.providers: dict[str, _Occupancy] = {}
        self.commits = [0] * _BARS
        self.stalls: list[tuple[float, str]] = []
        self.lags: list[tuple[float, str]] = []
        self.title = "trioplay timeline"
        rows: dict[tuple[str, str], tuple[str, float]] = {}  # (map, row) -> (phase, since)
        live: dict[str, tuple[str, str]] = {}  # row key -> its (map, row) now in flight
        call_row: dict[str, str] = {}
        slots: dict[str, tuple[str, float]] = {}  # call -> (provider, admitted at)
        fetch_row: dict[int, str] = {}
        total = 0

        def enter(row: tuple[str, str] | None, phase: str | None, at: float) -> None:
            if row is None or row not in rows:
                return
            current, since = rows.pop(row)
            self.phases[current].add(since, at)
            if phase is not None:
                rows[row] = (phase, at)

        for e in events:
            at = e.at
            if isinstance(e, r.RunStarted):
                self.title = f"trioplay timeline: run {e.run} (play {e.play}, attempt {e.attempt})"
            elif isinstance(e, r.RowResolverStarted):
                rows[(e.map, e.row)] = ("resolver", at)
                live[e.row] = (e.map, e.row)
            elif isinstance(e, r.RowTerminal):
                if (e.map, e.row) not in rows:
                    rows[(e.map, e.row)] = ("resolver", at)
                enter((e.map, e.row), "writer admission", at)
            elif isinstance(e, r.RowWriterAdmitted):
                enter((e.map, e.row), "writer commit", at)
            elif isinstance(e, r.RowCommitted):
                enter((e.map, e.row), None, at)
                live.pop(e.row, None)
                total += 1
                bar = min(int((at - self.t0) / self.span * _BARS), _BARS - 1)
                self.commits[bar] += 1
            elif isinstance(e, r.CallQueued) and e.row is not None:
                call_row[e.call] = e.row
            elif isinstance(e, r.ReceiptClaimed) and e.call in call_row:
                enter(live.get(call_row[e.call]), "governor", at)
            elif isinstance(e, r.CallAdmitted):
                if e.call in call_row:
                    enter(live.get(call_row[e.call]), "resolver", at)
                slots[e.call] = (e.provider or "local", at)
            elif isinstance(e, r.CallSettled):
                call_row.pop(e.call, None)
                self._release(slots.pop(e.call, None), width, at)
            elif isinstance(e, r.FetchStarted) and e.row is not None:
                fetch_row[e.fetch] = e.row
                enter(live.get(e.row), "fetch", at)
            elif isinstance(e, r.FetchFinished) and e.fetch in fetch_row:
                enter(live.get(fetch_row.pop(e.fetch)), "resolver", at)
            elif isinstance(e, r.MapStall):
                self.stalls.append((at, f"page {e.page}: {e.cause}"))
            elif isinstance(e, r.LoopLag):
                self.lags.append((at, f"loop lag {e.lag_ms:,.0f} ms"))
        for phase, since in rows.values():  # still in flight at the end
            self.phases[phase].add(since, self.t1)
        for held in slots.values():
            self._release(held, width, self.t1)
        self.committed = total

    def _release(self, held: tuple[str, float] | None, width: float, at: float) -> None:
        if held is None:
            return
        provider, since = held
        if provider not in self.providers:
            self.providers[provider] = _Occupancy(self.t0, width, _BINS)
        self.providers[provider].add(since, at)


def _unit(span: float) -> tuple[str, float]:
    if span < 2:
        return "ms", 1000.0
    if span < 180:
        return "s", 1.0
    if span < 3 * 3600:
        return "min", 1 / 60
    return "h", 1 / 3600


def _ticks(top: float, count: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``top`` (1, 2 or 5 times a power of ten apart)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
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

    def panel(self, top: float, height: float, title: str, ylabel: str, ymax: float) -> float:
        """Frame, y ticks and labels of one panel; returns its y scale (pixels per unit)."""
        ticks = _ticks(ymax, 4)
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
        step = _PLOT / len(counts)
        for index, count in enumerate(counts):
            if count:
                h = count * scale
                self.parts.append(
                    f'<rect x="{_LEFT + index * step + 0.5:.1f}" '
                    f'y="{top + height - h:.1f}" width="{max(step - 1, 0.5):.1f}" '
                    f'height="{h:.1f}" fill="{_COMMITS}"/>'
                )

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


def _label_rows(marks: list[tuple[float, str, str]]) -> list[int]:
    """A row for each mark's label (marks by x, in pixels) so that labels on a row never overlap."""
    ends: list[float] = []
    rows = []
    for x, label, _ in marks:
        width = 6.2 * len(label) + 8
        for index, end in enumerate(ends):
            if end < x:
                ends[index] = x + width
                rows.append(index)
                break
        else:
            ends.append(x + width)
            rows.append(len(ends) - 1)
    return rows


def render_timeline(events: Iterable[r.Event]) -> str:
    """The SVG text of the timeline of ``events`` (see the module docstring)."""
    listed = list(events)
    if not listed:
        raise ValueError("no events to draw")
    run = _Run(listed)
    canvas = _Canvas(run)
    marks = sorted(
        [(canvas.x(at), label[:90], "#d62728") for at, label in run.stalls]
        + [(canvas.x(at), label, "#ff7f0e") for at, label in run.lags]
    )
    label_rows = _label_rows(marks)
    band = 16 * (max(label_rows) + 1) if marks else 0
    top = 70 + band
    heights = (230, 110, 140)
    gap = 46
    tops = [top, top + heights[0] + gap, top + heights[0] + heights[1] + 2 * gap]
    bottom = tops[2] + heights[2]
    total_height = bottom + 100
    parts = canvas.parts
    parts.append(_text(_LEFT, 24, run.title, 15, weight="bold"))
    summary = (
        f"{run.committed:,} rows committed over {run.span * canvas.scale:,.1f} "
        f"{canvas.unit}; {len(run.stalls)} stall line(s)"
    )
    parts.append(_text(_LEFT, 44, summary, 12, colour="#555"))
    # 1. rows in flight by phase
    series = [run.phases[p].means() for p in PHASES]
    peak = max((sum(v) for v in zip(*series, strict=True)), default=0.0)
    scale = canvas.panel(tops[0], heights[0], "rows in flight, by phase", "rows", max(peak, 1))
    canvas.stacked(tops[0], heights[0], series, _PHASE_COLOURS, scale)
    # 2. commits per interval
    interval = run.span / _BARS * canvas.scale
    scale = canvas.panel(
        tops[1],
        heights[1],
        f"rows committed per {_number(interval)} {canvas.unit}"
        if interval >= 1
        else f"rows committed per {interval:.3g} {canvas.unit}",
        "rows",
        max(max(run.commits), 1),
    )
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
    # stall and loop-lag marks, their labels in the band above the panels
    for (x, label, colour), row in zip(marks, label_rows, strict=True):
        y = 62 + 16 * row
        parts.append(
            f'<line x1="{x:.1f}" y1="{y + 3}" x2="{x:.1f}" y2="{bottom}" '
            f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="5,3"/>'
        )
        parts.append(_text(x + 3, y, label, 11, colour=colour))
    legend = [(p, c) for p, c in zip(PHASES, _PHASE_COLOURS, strict=True)]
    legend.append(("commits", _COMMITS))
    legend += [(f"provider {n}", c) for n, c in zip(names, colours, strict=True)]
    canvas.legend(
        total_height - 34,
        legend[:6],
        [("stall line", "#d62728")] + ([("loop lag", "#ff7f0e")] if run.lags else []),
    )
    if legend[6:]:
        canvas.legend(total_height - 14, legend[6:], [])
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{total_height}" '
        f'viewBox="0 0 {_WIDTH} {total_height}">'
        f'<rect width="100%" height="100%" fill="white"/>'
    )
    return head + "\n".join(parts) + "</svg>\n"
