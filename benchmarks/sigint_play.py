"""The play that the signal trials interrupt (:mod:`benchmarks.sigint_trials`).

``trioplay run benchmarks/sigint_play.py --input '{"rows": N}'`` enriches N
rows with two simulated providers: ``finder`` (a few milliseconds a call,
2% recorded failures, 2% transient ones) and ``company`` (no latency and a
native batch operation, so the store is busy with many small claims and
completions). A durable step runs first. Both providers append every
answered call to the file named by ``$TRIOPLAY_TRIAL_LOG`` (one JSON line:
idempotency key, tool, outcome), written before the answer returns to the
engine: a line with outcome ``ok`` or ``error`` is a call the provider was
paid for, whose result (or recorded failure) the store must then hold.
"""

from __future__ import annotations

import os
import time
from typing import Any

import trioplay
from trioplay.adapters import Latency, SimulatedProvider

PLAY_NAME = "sigint-trial"
DATASET = "sheet"
LOG_ENV = "TRIOPLAY_TRIAL_LOG"

tools = trioplay.ToolRegistry()
tools.add_tool(
    SimulatedProvider(
        tool_id="finder",
        seed=1,
        latency=Latency(median=0.004, p99=0.04),
        error_rate=0.02,
        transient_rate=0.02,
        log_path=os.environ.get(LOG_ENV),
    )
)
tools.add_tool(
    SimulatedProvider(
        tool_id="company",
        seed=2,
        latency=Latency.fixed(0),
        batch_size=20,
        log_path=os.environ.get(LOG_ENV),
    )
)


async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("finder", {"domain": row["domain"]}))["email"]


async def company(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("company", {"domain": row["domain"]}))["source"]


@trioplay.play(PLAY_NAME)
async def play(ctx: trioplay.PlayContext, input: dict[str, Any]) -> dict[str, Any]:
    await ctx.step("started-at", time.time)
    rows = ({"domain": f"d{i}.example"} for i in range(int(input["rows"])))
    result = await (
        ctx.dataset(DATASET, rows)
        .with_column("company", company)
        .with_column("email", email)
        .run(key="domain")
    )
    return {"completed": result.completed_count, "failed": result.failed_count}


def main() -> None:
    """``python -m benchmarks.sigint_play STORE_URL ROWS``: the play as a library program.

    It runs the play under ``trio.run`` with Trio's own Ctrl-C handling (a
    ``KeyboardInterrupt`` raised where the signal lands, or at the next
    checkpoint in code protected from it), as a program of a library user
    would, and exits 130 on ``KeyboardInterrupt``.
    """
    import sys

    import trio

    store, rows = sys.argv[1], int(sys.argv[2])

    async def run() -> None:
        async with trioplay.open_runtime(store=store, tools=tools) as rt:
            await rt.run(play, {"rows": rows}, run_id="trial")

    try:
        trio.run(run)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
