"""A 20,000-row play on SQLite, run in a subprocess by ``test_crash_resume``.

``python -m tests.crash_play DB_PATH LOG_PATH ROWS`` runs (or resumes) the run
``crash-test``; both tools log every execution with its idempotency key.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

import trioplay
from trioplay.adapters import Latency, SimulatedProvider

CONCURRENCY = 32


@trioplay.play("crash-test")
async def play(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    rows = ({"domain": f"d{i}.example"} for i in range(input["rows"]))

    async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    async def company(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("company", {"domain": row["domain"]}))["email"]

    result = await (
        ctx.dataset("sheet", rows)
        .with_column("email", email)
        .with_column("company", company)
        .run(key="domain")
    )
    return {"completed": result.completed_count, "skipped": result.skipped_count}


def main() -> None:
    db, log, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tools = trioplay.ToolRegistry()
    for tool_id in ("finder", "company"):
        tools.add_tool(
            SimulatedProvider(tool_id=tool_id, latency=Latency.fixed(0.002), log_path=log)
        )
    limits = trioplay.Limits(max_concurrent_external_calls=CONCURRENCY)

    async def run() -> None:
        async with trioplay.open_runtime(store=f"sqlite:///{db}", tools=tools, limits=limits) as rt:
            output = await rt.run(play, {"rows": rows}, run_id="crash-test")
        print(json.dumps(output), flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()
