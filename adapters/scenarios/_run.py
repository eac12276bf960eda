"""Scenarios of the run itself: a starved event loop, a cancel in the middle of a page."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trioplay.scenario import NO_STALL, Cause, Expect, Rows, Scenario, Setup

from ..faults import CpuHog
from ..simulated import Latency
from ._common import registry
from ._finder import finder, finder_play

if TYPE_CHECKING:
    from trioplay.scenario import ScenarioResult


def _loop_starvation(seed: int) -> Setup:
    # Three rows compute for 45 s each without an await.
    hog = CpuHog(45.0, field="domain", keys={"d10.example", "d11.example", "d12.example"})
    return Setup(
        play=finder_play("loop-starvation", 50, ("score", hog)),
        tools=registry(finder(seed, Latency(0.5, 4))),
    )


LOOP_STARVATION = Scenario(
    name="loop-starvation",
    description=(
        "three CPU-bound rows block the event loop for 45 s each: the stall line names the loop"
    ),
    setup=_loop_starvation,
    expect=Expect(
        rows=Rows(completed=50, failed=0), stall=Cause(phase="loop"), events=("loop.lag",)
    ),
    seeded=True,
)


def _cancel_mid_page(seed: int) -> Setup:
    return Setup(
        play=finder_play("cancel-mid-page", 3000, page_size=1000),
        tools=registry(finder(seed, Latency(1, 8))),
        deadline=12.0,
    )


def _reported_rows_are_stored(result: ScenarioResult) -> list[str]:
    reported = result.counts().get("completed", 0)
    stored = result.stored_rows.get("completed", 0)
    if 0 < reported <= stored < 3000:
        return []
    return [f"{reported} rows reported completed, {stored} stored"]


CANCEL_MID_PAGE = Scenario(
    name="cancel-mid-page",
    description=(
        "the run is cancelled 12 s in, in the middle of a page: it ends at once, its commits kept"
    ),
    setup=_cancel_mid_page,
    expect=Expect(outcome="interrupted", stall=NO_STALL, check=_reported_rows_are_stored),
    seeded=True,
)
