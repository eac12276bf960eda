"""The play of the pause trials (:mod:`benchmarks.faults`), run in two processes at once.

``python -m benchmarks.pause_play STORE_URL LOG_PATH ROWS LEASE_TTL`` runs (or
joins) the run ``pause-trial``: a map of ROWS rows in pages of 100, one tool
column whose simulated provider logs every execution with its idempotency
key to LOG_PATH, and leases of LEASE_TTL seconds. It prints the process's
own counts as one JSON line. The source is a list, so a page lost to the
peer can be read again and waited for at the end of the map.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

import trioplay
from trioplay.adapters import Latency, SimulatedProvider

RUN_ID = "pause-trial"
DATASET = "sheet"
PAGE_SIZE = 100
CONCURRENCY = 16
LATENCY = 0.01


@trioplay.play("pause-trial")
async def play(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    rows = [{"domain": f"d{i}.example"} for i in range(input["rows"])]

    async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    result = await (
        ctx.dataset(DATASET, rows)
        .with_column("email", email)
        .run(key="domain", page_size=PAGE_SIZE)
    )
    return {
        "completed": result.completed_count,
        "failed": result.failed_count,
        "skipped": result.skipped_count,
    }


def main() -> None:
    store, log, rows, lease_ttl = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    tools = trioplay.ToolRegistry()
    tools.add_tool(
        SimulatedProvider(tool_id="finder", latency=Latency.fixed(LATENCY), log_path=log)
    )
    limits = trioplay.Limits(max_concurrent_external_calls=CONCURRENCY, lease_ttl=lease_ttl)

    async def run() -> None:
        async with trioplay.open_runtime(store=store, tools=tools, limits=limits) as rt:
            output = await rt.run(play, {"rows": rows}, run_id=RUN_ID)
        print(json.dumps(output), flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()
