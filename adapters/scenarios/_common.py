"""What the built-in scenarios share: a one-column play over generated leads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trioplay

if TYPE_CHECKING:
    from collections.abc import Callable

    from trioplay import Play, Row, RowContext

    Resolver = Callable[[Row, RowContext], Any]


def leads(count: int) -> list[dict[str, str]]:
    """``count`` rows ``{"domain": "d<i>.example"}``."""
    return [{"domain": f"d{i}.example"} for i in range(count)]


def calls(tool: str | Callable[[Row], str]) -> Resolver:
    """A resolver that calls ``tool`` (or the tool ``tool(row)`` names) with the row's domain."""

    async def resolver(row: Row, rc: RowContext) -> Any:
        tool_id = tool if isinstance(tool, str) else tool(row)
        return (await rc.tool(tool_id, {"domain": row["domain"]})).get("email")

    return resolver


def map_play(
    name: str,
    rows: list[dict[str, Any]],
    *columns: tuple[str, Resolver],
    page_size: int | None = None,
) -> Play:
    """A play that maps ``rows`` through ``columns`` (keyed by ``domain``, rows isolated)."""

    @trioplay.play(name)
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        dataset = ctx.dataset("leads", rows)
        for column, resolver in columns:
            dataset = dataset.with_column(column, resolver)
        result = await dataset.run(key="domain", page_size=page_size)
        return {"completed": result.completed_count, "failed": result.failed_count}

    return play


def registry(*tools: Any) -> trioplay.ToolRegistry:
    """A registry of tools that carry their own spec (``SimulatedProvider`` and wrappers)."""
    found = trioplay.ToolRegistry()
    for tool in tools:
        found.add_tool(tool)
    return found
