"""Judging a scenario's run against its expectations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._model import NO_STALL
from ._result import compact

if TYPE_CHECKING:
    from ._model import Cause, Expect, NoStall, Rows
    from ._result import ScenarioResult


def judge(result: ScenarioResult, expect: Expect) -> list[str]:
    """What ``result`` shows that ``expect`` did not allow, one line each."""
    problems: list[str] = []
    if result.status != expect.outcome:
        problems.append(f"the run ended {result.status}, expected {expect.outcome}")
    if expect.error is not None and expect.error not in (result.error or ""):
        problems.append(f"the run's error {result.error!r} does not name {expect.error!r}")
    problems += _judge_rows(result, expect.rows)
    problems += _judge_stall(result.stalls, expect.stall)
    types = {e.TYPE for e in result.events}
    problems += [f"no {t} event" for t in expect.events if t not in types]
    if expect.check is not None:
        problems += expect.check(result)
    return problems


def _judge_rows(result: ScenarioResult, rows: Rows) -> list[str]:
    problems: list[str] = []
    counts = result.counts()
    wanted_counts = (
        ("completed", rows.completed),
        ("failed", rows.failed),
        ("handed_over", rows.handed_over),
    )
    for name, wanted in wanted_counts:
        if wanted is not None and counts.get(name, 0) != wanted:
            said = name.replace("_", " ")
            problems.append(f"{counts.get(name, 0)} rows {said}, expected {wanted}")
    if rows.min_completed is not None and counts.get("completed", 0) < rows.min_completed:
        problems.append(
            f"{counts.get('completed', 0)} rows completed, expected at least {rows.min_completed}"
        )
    if rows.failed_with is not None and set(result.row_errors) != {rows.failed_with}:
        problems.append(
            f"the failed rows failed with {result.row_errors or 'nothing'}, "
            f"expected {rows.failed_with} only"
        )
    return problems


def _judge_stall(stalls: list[dict[str, Any]], stall: Cause | NoStall | None) -> list[str]:
    if stall is None:
        return []
    if stall is NO_STALL:
        return [f"{len(stalls)} stall lines, expected none"] if stalls else []
    problems = [] if stalls else ["0 stall lines, expected some"]
    wanted = stall.line()
    if wanted:
        matches = [all(s.get(k) == v for k, v in wanted.items()) for s in stalls]
        named = [{k: s.get(k) for k in wanted} for s in stalls]
        if stall.every_line and not (matches and all(matches)):
            wrong = [n for n, ok in zip(named, matches, strict=True) if not ok]
            problems.append(
                f"not every stall line names {wanted}; "
                f"{len(wrong) if stalls else 'no'} of {len(stalls)} did not: {_distinct(wrong)}"
            )
        elif not any(matches):
            problems.append(f"no stall line names {wanted}; they named {_distinct(named)}")
    return problems


def _distinct(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for item in items:
        seen.setdefault(compact(item), item)
    return list(seen.values())
