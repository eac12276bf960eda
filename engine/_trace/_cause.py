"""A stall line read in one phrase: what the ``map.stall`` event and the pictures name."""

from __future__ import annotations

from typing import Any


def stall_cause(report: dict[str, Any]) -> str:
    """``"governor: provider slow-api (tool enrich), oldest 30,000 ms"`` and the like."""
    phase = str(report.get("oldest_phase") or "resolver")
    if phase == "store":
        operation = report.get("oldest_store_operation") or "a call"
        detail = f"store {operation} unanswered for {report.get('oldest_store_ms', 0):,} ms"
    else:
        named = []
        if report.get("oldest_provider"):
            named.append(f"provider {report['oldest_provider']}")
        if report.get("oldest_tool") and report.get("oldest_tool") != report.get("oldest_provider"):
            named.append(f"tool {report['oldest_tool']}")
        if not named and report.get("oldest_row_key") is not None:
            named.append(f"row {report['oldest_row_key']}")
        detail = ", ".join([*named, f"oldest {report.get('oldest_unsettled_ms', 0):,} ms"])
    lag = report.get("loop_lag_ms")
    if isinstance(lag, int | float) and lag > 0:
        detail += f", loop lag {lag:,.0f} ms"
    return f"{phase}: {detail}"
