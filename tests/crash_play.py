"""A two-tool play run in subprocesses by the crash and cooperation tests.

``python -m tests.crash_play STORE_URL LOG_PATH ROWS [LEASE_TTL]`` runs (or
resumes, or joins) the run ``crash-test``; both tools log every execution
with its idempotency key to LOG_PATH.
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
    store, log, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lease_ttl = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
    tools = trioplay.ToolRegistry()
    for tool_id in ("finder", "company"):
        tools.add_tool(
            SimulatedProvider(tool_id=tool_id, latency=Latency.fixed(0.002), log_path=log)
        )
    limits = trioplay.Limits(max_concurrent_external_calls=CONCURRENCY, lease_ttl=lease_ttl)

    async def run() -> None:
        async with trioplay.open_runtime(store=store, tools=tools, limits=limits) as rt:
            output = await rt.run(play, {"rows": rows}, run_id="crash-test")
        print(json.dumps(output), flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()
