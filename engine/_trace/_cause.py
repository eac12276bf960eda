"""A stall line read in one phrase: what the ``map.stall`` event and the pictures name."""

from __future__ import annotations

from typing import Any


def _blamed(report: dict[str, Any]) -> tuple[str, list[str]]:
    """The line's phase, and what it names as waited for (provider, tool, row, store call)."""
    phase = str(report.get("oldest_phase") or "resolver")
    if phase == "store":
        return phase, [str(report.get("oldest_store_operation") or "a call")]
    if phase == "loop":
        return phase, [f"event loop blocked {report.get('loop_lag_ms', 0):,.0f} ms"]
    named = []
    if phase == "receipt":  # another owner's lease on the call's receipt
        named.append(f"owner {report.get('oldest_receipt_owner')}")
    if phase == "fetch":  # its tool and provider are both "fetch": the row says more
        return phase, [f"row {report.get('oldest_row_key')}"]
    if report.get("oldest_provider"):
        named.append(f"provider {report['oldest_provider']}")
    if report.get("oldest_tool") and report.get("oldest_tool") != report.get("oldest_provider"):
        named.append(f"tool {report['oldest_tool']}")
    if not named and report.get("oldest_row_key") is not None:
        named.append(f"row {report['oldest_row_key']}")
    return phase, named


def stall_blame(report: dict[str, Any]) -> str:
    """What the line blames, without how long: ``"governor: provider slow-api, tool enrich"``."""
    phase, named = _blamed(report)
    return f"{phase}: {', '.join(named)}" if named else phase


def stall_cause(report: dict[str, Any]) -> str:
    """``"governor: provider slow-api, tool enrich, oldest 30,000 ms"`` and the like."""
    phase, named = _blamed(report)
    if phase == "store":
        detail = f"{named[0]} unanswered for {report.get('oldest_store_ms', 0):,} ms"
    else:
        detail = ", ".join([*named, f"oldest {report.get('oldest_unsettled_ms', 0):,} ms"])
    slow = report.get("slow_progress")
    if isinstance(slow, dict):  # commits fell, not stopped
        detail += f", slow: {slow.get('commits')} commits against {slow.get('recent_commits')}"
    lag = report.get("loop_lag_ms")
    if phase != "loop" and isinstance(lag, int | float) and lag > 0:
        detail += f", loop lag {lag:,.0f} ms"
    return f"{phase}: {detail}"
