"""A stall report as one sentence, for the terminal.

The stall observer (``engine/_map/_stall.py``) logs each report as JSON on
``trioplay.stall`` and emits the same data as a ``map.stall`` event; the
command line shows it as a sentence instead (``--debug`` shows the JSON)::

    trioplay.stall: leads: no row committed for 1:00; 40 rows unresolved,
    the oldest (row d7.example) for 1:00, in tool finder_a (provider finder)

(one line on the terminal).

The JSON stays where machines read it: the log record, ``--events``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

STALL_LOGGER = "trioplay.stall"
"""The stall observer's logger: its lines are never collapsed."""


def duration(seconds: float | None) -> str:
    """A duration as the progress lines write it."""
    # Imported here: `_progress` loads the event stream (Trio), which every
    # command would then pay for, this module being imported by the CLI's
    # log handler (docs/cli.md, "What a command loads").
    from ._progress import _duration

    return _duration(seconds)


def stall_sentence(record: logging.LogRecord) -> str | None:
    """The sentence of a stall line, or ``None`` if ``record`` does not carry a report."""
    args = record.args
    if not isinstance(args, tuple) or len(args) != 1 or not isinstance(args[0], str):
        return None
    try:
        report = json.loads(args[0])
    except ValueError:
        return None
    return describe_stall(report) if isinstance(report, dict) else None


def describe_stall(report: dict[str, Any]) -> str:
    """``MAP: no row committed for T; N rows unresolved, the oldest (row K) for T, WHERE``."""
    since = duration(report.get("last_terminal_commit_ms", 0) / 1000)
    unresolved = sum(
        int(report.get(name) or 0)
        for name in (
            "resolver_active",
            "terminal_admission_waiting",
            "terminal_commit_waiting",
            "terminal_write_active",
            "terminal_queued",
        )
    )
    rows = "row" if unresolved == 1 else "rows"
    oldest = duration(report.get("oldest_unsettled_ms", 0) / 1000)
    key = report.get("oldest_row_key")
    who = f"the oldest (row {key})" if key is not None else "the oldest"
    text = (
        f"{report.get('map')}: no row committed for {since}; "
        f"{unresolved:,} {rows} unresolved, {who} for {oldest}, {_where(report)}"
    )
    return text


def _where(report: dict[str, Any]) -> str:
    """What the oldest item waits on, after ``oldest_phase``."""
    phase = report.get("oldest_phase")
    tool, provider = report.get("oldest_tool"), report.get("oldest_provider")
    call = ""
    if tool is not None:
        call = f" tool {tool}" + (f" (provider {provider})" if provider not in (None, tool) else "")
    if phase == "resolver":
        return f"in{call}" if call else "in the row's own code"
    if phase == "governor":
        waited = duration(report.get("oldest_governor_ms", 0) / 1000)
        return f"waiting {waited} for a slot or rate turn of{call or ' its provider'}"
    if phase == "fetch":
        return f"in a fetch in flight for {duration(report.get('oldest_fetch_ms', 0) / 1000)}"
    if phase == "writer_admission":
        return "done and waiting for the writer to take it"
    if phase == "writer_commit":
        return "waiting for the writer's commit"
    if phase == "store":
        operation = report.get("oldest_store_operation") or "a store call"
        waited = duration(report.get("oldest_store_ms", 0) / 1000)
        return f"waiting on the store: {operation} unanswered for {waited}"
    if phase == "loop":
        lag = report.get("loop_lag_ms", 0)
        return (
            f"the event loop was blocked for {lag:,} ms (code computing without an await: "
            "nothing else ran meanwhile)"
        )
    return f"in phase {phase}"
