"""A scenario of your own: a waterfall whose first provider slows to a crawl.

Run it with ``trioplay scenario run examples/scenario_slow_waterfall.py``
(docs/scenarios.md walks through it). Every row asks ``finder_a`` first and
falls back to ``finder_b`` when ``finder_a`` fails; ``finder_a`` takes about
five minutes per call (seeded, log-normal) and its tool timeout is 150 s, so
the rows wait 150 s, fall through to ``finder_b``, and commit. The stall
lines name ``finder_a`` (provider ``slow-co``) as what the rows wait for.
"""

from __future__ import annotations

from typing import Any

import trioplay
from trioplay.adapters import Latency, SimulatedProvider
from trioplay.scenario import Cause, Expect, Scenario, ScenarioResult, Setup


async def find_email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    try:
        return (await rc.tool("finder_a", {"domain": row["domain"]}))["email"]
    except trioplay.ToolTimeout:
        return (await rc.tool("finder_b", {"domain": row["domain"]}))["email"]


@trioplay.play("slow-waterfall")
async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
    rows = [{"domain": f"d{i}.example"} for i in range(40)]
    result = await ctx.dataset("leads", rows).with_column("email", find_email).run(key="domain")
    return {"completed": result.completed_count}


def setup(seed: int) -> Setup:
    tools = trioplay.ToolRegistry()
    slow = SimulatedProvider(
        tool_id="finder_a", provider="slow-co", seed=seed, latency=Latency(median=300, p99=900)
    )
    quick = SimulatedProvider(tool_id="finder_b", provider="quick-co", seed=seed, latency=0.2)
    tools.add("finder_a", slow, provider="slow-co", timeout=150)
    tools.add_tool(quick)
    return Setup(play=play, tools=tools)


def every_row_found_an_email(result: ScenarioResult) -> list[str]:
    completed = result.counts().get("completed", 0)
    return [] if completed == 40 else [f"only {completed} of 40 rows completed"]


scenario = Scenario(
    name="slow-waterfall",
    description="the first provider of a waterfall takes ~5 min a call; rows fall through at 150 s",
    setup=setup,
    expect=Expect(
        stall=Cause(phase="resolver", tool="finder_a", provider="slow-co"),
        check=every_row_found_an_email,
    ),
    seeded=True,
)
