"""A two-tool play run in subprocesses by the crash and cooperation tests.

``python -m tests.crash_play STORE_URL LOG_PATH ROWS [LEASE_TTL] [--hang KEY]...
[--wait-for-go]`` runs (or resumes, or joins) the run ``crash-test``; both
tools log every execution with its idempotency key to LOG_PATH.

``--hang KEY``: the ``finder`` call of row KEY never returns (and logs
outcome ``hang`` at once), so this process cannot finish that row's page:
a test that kills it mid-run needs no more rows than it takes to see the
kill land. ``--wait-for-go``: open the runtime, print ``ready``, and start
the run only on a line on stdin, so that processes started together also
start their runs together (not one after another Python's start-up).
"""

from __future__ import annotations

import argparse
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
    parser = argparse.ArgumentParser(prog="python -m tests.crash_play")
    parser.add_argument("store")
    parser.add_argument("log")
    parser.add_argument("rows", type=int)
    parser.add_argument("lease_ttl", type=float, nargs="?", default=60.0)
    parser.add_argument("--hang", action="append", default=[], metavar="KEY")
    parser.add_argument("--wait-for-go", action="store_true")
    args = parser.parse_args()
    tools = trioplay.ToolRegistry()
    for tool_id in ("finder", "company"):
        hang = args.hang if tool_id == "finder" else ()
        tools.add_tool(
            SimulatedProvider(
                tool_id=tool_id, latency=Latency.fixed(0.002), hang_keys=hang, log_path=args.log
            )
        )
    limits = trioplay.Limits(max_concurrent_external_calls=CONCURRENCY, lease_ttl=args.lease_ttl)

    async def run() -> None:
        async with trioplay.open_runtime(store=args.store, tools=tools, limits=limits) as rt:
            if args.wait_for_go:
                print("ready", flush=True)
                await trio.to_thread.run_sync(sys.stdin.readline)
            output = await rt.run(play, {"rows": args.rows}, run_id="crash-test")
        print(json.dumps(output), flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()
