"""Judging a scenario's run against its expectations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._result import compact

if TYPE_CHECKING:
    from ._model import Expect
    from ._result import ScenarioResult


def judge(result: ScenarioResult, expect: Expect) -> list[str]:
    """What ``result`` shows that ``expect`` did not allow, one line each."""
    problems: list[str] = []
    if result.status != expect.outcome:
        problems.append(f"the run ended {result.status}, expected {expect.outcome}")
    if expect.error is not None and expect.error not in (result.error or ""):
        problems.append(f"the run's error {result.error!r} does not name {expect.error!r}")
    counts = result.counts()
    wanted_counts = (
        ("completed", expect.completed),
        ("failed", expect.failed),
        ("handed_over", expect.handed_over),
    )
    for name, wanted in wanted_counts:
        if wanted is not None and counts.get(name, 0) != wanted:
            said = name.replace("_", " ")
            problems.append(f"{counts.get(name, 0)} rows {said}, expected {wanted}")
    if expect.min_completed is not None and counts.get("completed", 0) < expect.min_completed:
        problems.append(
            f"{counts.get('completed', 0)} rows completed, expected at least {expect.min_completed}"
        )
    if expect.row_errors is not None and set(result.row_errors) != {expect.row_errors}:
        problems.append(
            f"the failed rows failed with {result.row_errors or 'nothing'}, "
            f"expected {expect.row_errors} only"
        )
    stalls = result.stalls
    if expect.stalled is not None and bool(stalls) != expect.stalled:
        problems.append(
            f"{len(stalls)} stall lines, expected {'some' if expect.stalled else 'none'}"
        )
    wanted_line = {
        "oldest_phase": expect.phase,
        "oldest_provider": expect.provider,
        "oldest_tool": expect.tool,
        "oldest_store_operation": expect.operation,
        "page_offset": expect.page,
    }
    wanted_line = {k: v for k, v in wanted_line.items() if v is not None}
    wanted_line.update(expect.fields)
    if wanted_line:
        matches = [all(s.get(k) == v for k, v in wanted_line.items()) for s in stalls]
        named = [{k: s.get(k) for k in wanted_line} for s in stalls]
        if expect.every_line and not (matches and all(matches)):
            wrong = [n for n, ok in zip(named, matches, strict=True) if not ok]
            problems.append(
                f"not every stall line names {wanted_line}; "
                f"{len(wrong) if stalls else 'no'} of {len(stalls)} did not: {_distinct(wrong)}"
            )
        elif not any(matches):
            problems.append(f"no stall line names {wanted_line}; they named {_distinct(named)}")
    types = {e.TYPE for e in result.events}
    problems += [f"no {t} event" for t in expect.events if t not in types]
    if expect.check is not None:
        problems += expect.check(result)
    return problems


def _distinct(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for item in items:
        seen.setdefault(compact(item), item)
    return list(seen.values())
