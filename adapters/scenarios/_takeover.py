"""A scenario of scale-out: a peer takes over a page whose lease ran out."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from trioplay.events import CallFinished, CallStarted, PageLost, RowCommitted
from trioplay.scenario import Expect, Rows, Scenario, Setup

from ..faults import PeerTakeover
from ..simulated import SimulatedProvider
from ._common import calls, leads, map_play, registry
from ._finder import finder

if TYPE_CHECKING:
    from trioplay import Row
    from trioplay.scenario import ScenarioResult

ROWS = 40
SLOW = ("d1.example", "d4.example", "d7.example")  # page 0's rows still running at 60 s


def _tool(row: Row) -> str:
    return "slow-finder" if row["domain"] in SLOW else "finder"


def _peer_takeover(seed: int) -> Setup:
    rows = leads(ROWS)
    slow = SimulatedProvider(tool_id="slow-finder", provider="acme", seed=seed, latency=200.0)
    return Setup(
        play=map_play("peer-takeover", rows, ("email", calls(_tool)), page_size=10),
        tools=registry(finder(seed), slow),
        # Leases of 60 s renewed every 30 s: the heartbeat of 30 s stalls
        # until page 0's lease runs out at 60 s, the peer takes the page over
        # and writes its three unfinished rows 30 s later.
        store=lambda store: PeerTakeover(
            store,
            page=0,
            rows=rows[:10],
            key="domain",
            at=20.0,
            work=30.0,
            columns={"email": "peer@example.invalid"},
        ),
    )


def _lost_rows_handed_over_once(result: ScenarioResult) -> list[str]:
    """Page 0's three slow rows are reported lost and left to the peer; nothing counts twice."""
    problems: list[str] = []
    lost = [e for e in result.events if isinstance(e, PageLost)]
    named = sorted(key for e in lost for key in e.keys)
    if [(e.page, e.rows) for e in lost] != [(0, len(SLOW))] or named != sorted(SLOW):
        problems.append(
            f"page.lost events {[(e.page, e.rows, e.keys) for e in lost]}, "
            f"expected page 0 with rows {list(SLOW)}"
        )
    again = sorted({e.row for e in result.events if isinstance(e, RowCommitted)} & set(SLOW))
    if again:
        problems.append(f"rows left to the peer were committed here too: {again}")
    started = Counter(e.call for e in result.events if isinstance(e, CallStarted))
    paid = Counter(
        e.call for e in result.events if isinstance(e, CallFinished) and e.outcome == "ok"
    )
    twice = sorted(
        call for call in started.keys() | paid.keys() if max(started[call], paid[call]) > 1
    )
    if twice:
        problems.append(f"calls made twice: {twice}")
    counts: dict[str, Any] = result.counts()
    here = counts.get("completed", 0) + counts.get("handed_over", 0)
    if here != ROWS or result.stored_rows != {"completed": ROWS}:
        problems.append(
            f"{counts.get('completed', 0)} rows completed here and "
            f"{counts.get('handed_over', 0)} handed over, the sheet holds "
            f"{result.stored_rows}: expected each of the {ROWS} rows once"
        )
    return problems


PEER_TAKEOVER = Scenario(
    name="peer-takeover",
    description=(
        "page 0's heartbeat stalls past its lease at 60 s; a peer takes the page over "
        "and finishes its three running rows"
    ),
    setup=_peer_takeover,
    expect=Expect(
        rows=Rows(completed=ROWS - len(SLOW), failed=0, handed_over=len(SLOW)),
        events=("page.lost",),
        check=_lost_rows_handed_over_once,
    ),
    seeded=True,
)
