"""Acceptance: bad input fails with a message naming the problem and the place,
before any tool is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, registry


def csv_play(path: Path, **kw: Any) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

        rows = ctx.csv(str(path), required=["domain"])
        return await ctx.dataset("s", rows).with_column("email", email).run(key="domain", **kw)

    return play


async def run_expecting(play: Any, error: type[BaseException], match: str) -> CountingTool:
    tool = CountingTool()
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry(finder=tool)) as rt:
        with pytest.raises(error, match=match):
            await rt.run(play, {}, run_id="r")
    return tool


async def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    tool = await run_expecting(
        csv_play(path), trioplay.PlayInputError, rf"{path}.*(not found|no such)"
    )
    assert tool.calls == 0


async def test_missing_required_column(tmp_path: Path) -> None:
    path = tmp_path / "leads.csv"
    path.write_text("name,website\nacme,acme.example\n")
    tool = await run_expecting(
        csv_play(path),
        trioplay.PlayInputError,
        rf"{path}, line 1, column 'domain': required column is missing",
    )
    assert tool.calls == 0


async def test_malformed_line_fails_before_any_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "leads.csv"
    lines = ["domain,name"] + [f"d{i}.example,n{i}" for i in range(5000)]
    lines[4321] = "broken.example,a,b,c"
    path.write_text("\n".join(lines) + "\n")
    tool = await run_expecting(csv_play(path), trioplay.PlayInputError, rf"{path}, line 4322")
    assert tool.calls == 0


async def test_empty_required_field_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "leads.jsonl"
    path.write_text('{"domain": "a.example"}\n{"domain": ""}\n')

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", ctx.jsonl(str(path), required=["domain"])).run()

    await run_expecting(play, trioplay.PlayInputError, rf"{path}, line 2, column 'domain'")


async def test_play_input_that_is_not_json() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return None

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        with pytest.raises(trioplay.PlayInputError, match="JSON"):
            await rt.run(play, {"when": object()})


async def test_rows_that_are_not_mappings() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"a": 1}, "oops"]).run()

    await run_expecting(
        play, trioplay.PlayInputError, r"row 1: expected a mapping of fields, got str"
    )


async def test_tool_input_that_is_not_json_fails_the_run() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def bad(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("finder", {"domain": {1, 2}})

        return await ctx.dataset("s", [{"a": 1}]).with_column("x", bad).run()

    await run_expecting(
        play, trioplay.PlayDefinitionError, r"tool 'finder': its input must be JSON-serialisable"
    )


def test_bad_limits_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match=r"Limits.page_size must be a positive number, got 0"):
        trioplay.Limits(page_size=0)
