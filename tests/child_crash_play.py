"""A parent play whose one row runs a child play, run in subprocesses by the child crash test.

``python -m tests.child_crash_play STORE_URL LOG_PATH ROWS`` runs (or
resumes) the run ``child-crash``; its child maps ROWS domains through a tool
that logs every execution (one JSON line: the domain) to LOG_PATH.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

import trioplay


@trioplay.play("crash-child")
async def child(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    rows = ({"domain": f"d{i}.example"} for i in range(input["rows"]))

    async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("finder", row["domain"])

    result = await ctx.dataset("people", rows).with_column("email", email).run(key="domain")
    return {"completed": result.completed_count, "skipped": result.skipped_count}


@trioplay.play("crash-parent")
async def parent(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    async def people(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.play(child, {"rows": input["rows"]})

    result = (
        await ctx.dataset("accounts", [{"account": "a"}])
        .with_column("people", people)
        .run(key="account")
    )
    return [row async for row in result.rows()]


def main() -> None:
    store, log, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def record(domain: str) -> None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(domain) + "\n")

    async def finder(domain: str, call: trioplay.ToolCall) -> Any:
        record(domain)  # before the call returns: a killed run's calls are in the log
        await trio.sleep(0.002)
        return f"info@{domain}"

    tools = trioplay.ToolRegistry()
    tools.add("finder", finder)
    limits = trioplay.Limits(max_concurrent_external_calls=8)

    async def run() -> None:
        async with trioplay.open_runtime(store=store, tools=tools, limits=limits) as rt:
            output = await rt.run(parent, {"rows": rows}, run_id="child-crash")
        print(json.dumps(output), flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()
