"""The suite's plot: latency-bound and scale-out results as one SVG, drawn by our own code.

``python -m benchmarks plot`` reads the newest ``latency-*.json`` and
``scaling-latency-*.json`` in ``benchmarks/results/`` and writes
``docs/img/latency-scaling.svg`` (``--out`` elsewhere), two panels:

1. **rows/s against tool latency** (both axes logarithmic): each trioplay
   contender and raw Trio as measured, and the bound drawn as a line, 256
   rows in flight over ``2 L`` per row;
2. **rows/s against processes** on PostgreSQL (the latency-bound variant of
   the scaling benchmark), with and without process start-up, and the
   ``x N`` bound from the one-process run (from ``go``) drawn as a line.

No dependency: the SVG is written as text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from .workload import RESULTS_DIR

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "latency-scaling.svg"
WIDTH, HEIGHT = 980, 520
PANEL_W, PANEL_H = 380, 300
TOP, LEFT = 60, 80
COLOURS = {
    "trio": "#222222",
    "sqlite": "#4e79a7",
    "sqlite-window": "#9cc3e6",
    "postgres": "#e15759",
    "postgres-window": "#f4a6a7",
    "with start-up": "#f28e2b",
    "from go": "#e15759",
    "poll": "#59a14f",
}
Series = tuple[str, list[tuple[float, float]], str, bool]  # label, points, colour, dashed


def newest(prefix: str, where: Path = RESULTS_DIR) -> dict[str, Any] | None:
    """The newest saved result whose name is ``prefix-<date>.json``, or ``None``."""
    found = sorted(
        path
        for path in where.glob(f"{prefix}-*.json")
        if path.stem[len(prefix) + 1 :][:1].isdigit()
    )
    return json.loads(found[-1].read_text()) if found else None


def latency_series(result: dict[str, Any]) -> tuple[list[Series], str]:
    races = sorted(result["results"].values(), key=lambda race: race["latency_s"])
    names = list(races[0]["rows_per_s"])
    series: list[Series] = []
    for name in names:
        points = [(1e3 * race["latency_s"], race["rows_per_s"][name]) for race in races]
        if name == "trio":
            label = "raw Trio, the same sleeps (measured)"
        else:
            ratios = ", ".join(
                f"x{race['ratio_vs_trio'][name]:.2f} at {1e3 * race['latency_s']:g} ms"
                for race in races
                if name in race["ratio_vs_trio"]
            )
            label = f"trioplay, {name} ({ratios} of raw Trio)"
        series.append((label, points, COLOURS.get(name, "#888888"), name.endswith("-window")))
    # The bound: IN_FLIGHT rows over 2 L per row (a straight line on log-log axes).
    in_flight = result["in_flight"]
    bound = [(1e3 * race["latency_s"], in_flight / (2 * race["latency_s"])) for race in races]
    series.insert(0, (f"bound: {in_flight} rows in flight / (2 x latency)", bound, "#999999", True))
    return series, f"{in_flight} rows in flight, two tool calls per row"


def scaling_series(result: dict[str, Any]) -> tuple[list[Series], str]:
    runs = result["results"]["postgres"]
    one = runs[0]["rows_per_s_from_go"]
    counts = [run["processes"] for run in runs]
    series: list[Series] = [
        ("bound: x N one process (from go)", [(n, one * n) for n in counts], "#999999", True),
        (
            f"from go (start-up excluded), x{runs[-1]['scaling_from_go']:.2f}",
            [(run["processes"], run["rows_per_s_from_go"]) for run in runs],
            COLOURS["from go"],
            False,
        ),
        (
            f"with process start-up, x{runs[-1]['scaling']:.2f}",
            [(run["processes"], run["rows_per_s"]) for run in runs],
            COLOURS["with start-up"],
            False,
        ),
    ]
    polled = result["results"].get("postgres-page-1s")
    if polled:
        series.append(
            (
                f"from go, page_wait_delay=1 s (as it was), x{polled[-1]['scaling_from_go']:.2f}",
                [(run["processes"], run["rows_per_s_from_go"]) for run in polled],
                COLOURS["poll"],
                False,
            )
        )
    return series, f"rows/s against processes sharing one run; x: {counts[-1]} processes / one"


class Axis:
    """Maps data to pixels along one axis, linear or logarithmic."""

    def __init__(self, low: float, high: float, start: float, end: float, log: bool) -> None:
        self.log = log
        self.low, self.high = (math.log10(low), math.log10(high)) if log else (low, high)
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return self.start + (v - self.low) / (self.high - self.low) * (self.end - self.start)


def ticks(low: float, high: float, log: bool) -> list[float]:
    if log:
        found = []
        for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
            for mantissa in (1, 2, 5):
                value = mantissa * 10.0**exponent
                if low <= value <= high:
                    found.append(value)
        return found
    step = 10 ** math.floor(math.log10((high - low) / 4 or 1))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= 8:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def panel(
    x0: float,
    title: str,
    note: str,
    x_label: str,
    y_label: str,
    series: list[Series],
    *,
    log: bool,
    x_ticks: list[float] | None = None,
) -> list[str]:
    xs = [x for _, points, _, _ in series for x, _ in points]
    ys = [y for _, points, _, _ in series for _, y in points]
    if log:
        x_low, x_high = min(xs) / 1.4, max(xs) * 1.4
        y_low, y_high = min(ys) / 1.4, max(ys) * 1.4
    else:
        x_low, x_high = 0.5, max(xs) + 0.5
        y_low, y_high = 0.0, max(ys) * 1.1
    x = Axis(x_low, x_high, x0, x0 + PANEL_W, log)
    y = Axis(y_low, y_high, TOP + PANEL_H, TOP, log)
    out = [
        f'<text x="{x0}" y="{TOP - 30}" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{x0}" y="{TOP - 12}" font-size="11" fill="#444">{escape(note)}</text>',
        f'<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" '
        'stroke="#333"/>',
    ]
    for value in x_ticks or ticks(x_low, x_high, log):
        px = x(value)
        out.append(
            f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{TOP + PANEL_H}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{px:.1f}" y="{TOP + PANEL_H + 16}" font-size="11" '
            f'text-anchor="middle">{_number(value)}</text>'
        )
    for value in ticks(max(y_low, 1e-9) if log else y_low, y_high, log):
        py = y(value)
        out.append(
            f'<line x1="{x0}" y1="{py:.1f}" x2="{x0 + PANEL_W}" y2="{py:.1f}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{x0 - 6}" y="{py + 4:.1f}" font-size="11" '
            f'text-anchor="end">{_number(value)}</text>'
        )
    out.append(
        f'<text x="{x0 + PANEL_W / 2}" y="{TOP + PANEL_H + 36}" font-size="12" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    mid = TOP + PANEL_H / 2
    out.append(
        f'<text x="{x0 - 58}" y="{mid}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 {x0 - 58} {mid})">{escape(y_label)}</text>'
    )
    legend_y = TOP + PANEL_H + 60
    for label, points, colour, dashed in series:
        path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in points)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        if not label.startswith("bound"):
            for px, py in points:
                out.append(f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="3.5" fill="{colour}"/>')
        out.append(
            f'<line x1="{x0}" y1="{legend_y - 4}" x2="{x0 + 24}" '
            f'y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{x0 + 30}" y="{legend_y}" font-size="11">{escape(label)}</text>')
        legend_y += 15
    return out


def render(latency: dict[str, Any] | None, scaling: dict[str, Any] | None) -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
    ]
    if latency is not None:
        series, note = latency_series(latency)
        parts += panel(
            LEFT,
            "Latency-bound maps: rows/s against tool latency",
            note,
            "latency of each of the 2 tools per row (ms, log)",
            "rows/s (log)",
            series,
            log=True,
        )
    if scaling is not None and scaling["results"].get("postgres"):
        series, note = scaling_series(scaling)
        parts += panel(
            LEFT + WIDTH / 2,
            "Scale-out on PostgreSQL, latency-bound",
            note,
            f"processes ({scaling['latency_s'] * 1e3:g} ms tools, "
            f"{scaling['in_flight_per_process']} rows in flight each)",
            "rows/s",
            series,
            log=False,
            x_ticks=[run["processes"] for run in scaling["results"]["postgres"]],
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def run(out: Path = OUT, where: Path = RESULTS_DIR) -> Path | None:
    latency, scaling = newest("latency", where), newest("scaling-latency", where)
    if latency is None and scaling is None:
        print(f"plot: no latency-*.json or scaling-latency-*.json in {where}; nothing to draw")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(latency, scaling))
    print(f"plot: wrote {out}")
    return out
