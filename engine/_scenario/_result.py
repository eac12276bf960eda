"""What a scenario run showed: its events, stall lines, outcome, and the verdict."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import attrs

from .._trace import JsonlSink, replay
from .._trace._records import MapFinished, MapProgress, MapStall

if TYPE_CHECKING:
    from .._trace import Event

STALL_PREFIX = "[runtime.map_stall] "


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


@attrs.frozen(kw_only=True)
class ScenarioResult:
    """One run of a scenario. ``problems`` lists the expectations it missed (none: it held).

    ``events`` are the run's records, in order (:mod:`trioplay.events`,
    ``docs/events.md``): what ``events.jsonl`` holds, one a line.
    """

    scenario: str
    description: str
    seed: int
    events: tuple[Event, ...]
    status: str
    error: str | None
    virtual_seconds: float
    wall_seconds: float
    row_errors: dict[str, int] = attrs.field(factory=dict)
    """The failed rows, counted by the type of their error (``ToolTimeout``: 3)."""
    stored_rows: dict[str, int] = attrs.field(factory=dict)
    """The rows the store holds after the run, by status (what a fresh reader finds)."""
    problems: tuple[str, ...] = ()

    @property
    def held(self) -> bool:
        return not self.problems

    @property
    def stalls(self) -> list[dict[str, Any]]:
        """The stall lines' data, in order."""
        return [e.report for e in self.events if isinstance(e, MapStall)]

    def counts(self) -> dict[str, int]:
        """The last row counts of the run's maps, summed (``completed``, ``failed``, ...).

        ``handed_over``: rows left to another owner that took their page over
        (only when there are some).
        """
        last: dict[str, MapProgress | MapFinished] = {}
        for event in self.events:
            if isinstance(event, MapProgress | MapFinished):
                last[event.map] = event
        totals: dict[str, int] = {}
        for counts in last.values():
            for name in ("completed", "failed", "skipped"):
                totals[name] = totals.get(name, 0) + getattr(counts, name)
        rows, _ = self.handed_over()
        if rows:
            totals["handed_over"] = rows
        return totals

    def handed_over(self) -> tuple[int, int]:
        """The rows left to another owner that took their pages over, and those pages
        (``page.lost``), as the last counts of the run's maps say."""
        last: dict[str, MapProgress | MapFinished] = {}
        for event in self.events:
            if isinstance(event, MapProgress | MapFinished):
                last[event.map] = event
        return (
            sum(c.handed_over for c in last.values()),
            sum(c.pages_handed_over for c in last.values()),
        )

    def events_jsonl(self) -> str:
        """Every event as one JSON line, as ``--events`` writes them (same run, same bytes)."""
        text = io.StringIO()
        replay(self.events, JsonlSink(text))
        return text.getvalue()

    def stall_log(self) -> str:
        """The stall lines as the logger ``trioplay.stall`` wrote them, one per line."""
        return "".join(f"{STALL_PREFIX}{compact(stall)}\n" for stall in self.stalls)

    def causes(self) -> list[dict[str, Any]]:
        """What the stall lines named, each distinct cause once, in order of first mention."""
        seen: dict[str, dict[str, Any]] = {}
        for stall in self.stalls:
            phase = stall["oldest_phase"]
            cause = {
                "phase": phase,
                "tool": stall.get("oldest_tool"),
                "provider": stall.get("oldest_provider"),
                "store_operation": stall.get("oldest_store_operation")
                if phase == "store"
                else None,
            }
            if phase == "receipt":
                cause["receipt_owner"] = stall.get("oldest_receipt_owner")
            seen.setdefault(compact(cause), cause)
        return list(seen.values())

    def summary(self) -> dict[str, Any]:
        """The run in one JSON object (``summary.json``)."""
        stalls = self.stalls
        return {
            "scenario": self.scenario,
            "description": self.description,
            "seed": self.seed,
            "status": self.status,
            "error": self.error,
            "virtual_seconds": round(self.virtual_seconds, 3),
            "rows": self.counts(),
            "row_errors": self.row_errors,
            "stored_rows": self.stored_rows,
            "handed_over": dict(zip(("rows", "pages"), self.handed_over(), strict=True)),
            "stall_lines": len(stalls),
            "first_stall_at": _first_stall_at(self.events),
            "longest_unsettled_ms": max((s["oldest_unsettled_ms"] for s in stalls), default=0),
            "max_loop_lag_ms": max((s.get("loop_lag_ms", 0) for s in stalls), default=0),
            "causes": self.causes(),
            "events": _count_types(self.events),
            "expectations_held": self.held,
            "problems": list(self.problems),
        }


def _first_stall_at(events: tuple[Event, ...]) -> float | None:
    return next((round(e.at, 3) for e in events if isinstance(e, MapStall)), None)


def _count_types(events: tuple[Event, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        counts[event.TYPE] = counts.get(event.TYPE, 0) + 1
    return dict(sorted(counts.items()))
