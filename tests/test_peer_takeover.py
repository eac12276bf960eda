"""A peer takes over a page whose lease ran out (issue 26, points 4 and 5).

``PeerTakeover`` stalls a page's heartbeats past its lease; a peer claims
the expired lease and runs the page's unfinished rows. The run must say so:
one ``page.lost`` event naming those rows, the map's counts and the run's
summary reporting them handed to another owner, never as completed,
skipped or still running, and no row counted or paid for twice.
"""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

import trioplay
from trioplay._cli._progress import RunReporter, format_summary
from trioplay._cli._summary import summary_data
from trioplay._pictures._timeline import _Run
from trioplay._trace._spans import Span, Spans
from trioplay.adapters.faults import PeerTakeover
from trioplay.adapters.scenarios import find
from trioplay.events import (
    CallFinished,
    CallSettled,
    CallStarted,
    JsonlSink,
    MapFinished,
    PageLost,
    from_json,
    replay,
)
from trioplay.scenario import Setup, describe, run_scenario
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, registry

if TYPE_CHECKING:
    from trioplay import Store


@pytest.fixture(autouse=True)
def _quiet_stall_lines() -> Any:
    logger = logging.getLogger("trioplay.stall")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _peer_takeover(seed: int = 0) -> Any:
    scenario = find("peer-takeover")
    assert scenario is not None
    return run_scenario(scenario, seed=seed)


def test_the_lost_pages_rows_are_reported_handed_to_the_peer() -> None:
    result = _peer_takeover()
    assert result.held, result.problems
    [lost] = [e for e in result.events if isinstance(e, PageLost)]
    assert (lost.map, lost.page, lost.rows) == ("leads", 0, 3)
    assert sorted(lost.keys) == ["d1.example", "d4.example", "d7.example"]
    assert lost.at == pytest.approx(60.0, abs=1.0)  # the lease of 60 s ran out
    [finished] = [e for e in result.events if isinstance(e, MapFinished)]
    assert (finished.completed, finished.skipped, finished.failed) == (37, 0, 0)
    assert (finished.handed_over, finished.pages_handed_over) == (3, 1)
    assert result.counts()["handed_over"] == 3
    assert result.stored_rows == {"completed": 40}
    assert result.summary()["rows"]["handed_over"] == 3
    assert "  handed to another owner: 3 rows of 1 page" in describe(result)


def test_without_the_takeover_the_scenarios_expectations_fail() -> None:
    # The same run with the takeover due long after the rows are done: the
    # page is never lost, and the scenario's own Expect says what is missing.
    scenario = find("peer-takeover")
    assert scenario is not None

    def setup(seed: int) -> Setup:
        built = scenario.setup(seed)
        wrap = built.store

        def late(store: Store) -> Store:
            wrapped = wrap(store)
            assert isinstance(wrapped, PeerTakeover)
            wrapped.at = 10_000.0
            return wrapped

        return attrs.evolve(built, store=late)

    result = run_scenario(attrs.evolve(scenario, setup=setup))
    assert "40 rows completed, expected 37" in result.problems
    assert "0 rows handed over, expected 3" in result.problems
    assert "no page.lost event" in result.problems
    assert any(p.startswith("page.lost events [], expected page 0") for p in result.problems)


def test_the_takeover_tells_the_same_story_per_seed_byte_for_byte() -> None:
    first, again, other = _peer_takeover(3), _peer_takeover(3), _peer_takeover(4)
    assert first.held, first.problems
    assert other.held, other.problems
    assert first.events_jsonl() == again.events_jsonl()
    assert other.events_jsonl() != first.events_jsonl()


def test_the_run_summary_and_its_json_say_which_rows_went_to_another_owner() -> None:
    result = _peer_takeover()
    reporter = RunReporter(io.StringIO(), interactive=False)
    replay(result.events, reporter)
    maps = list(reporter.maps.values())
    text = format_summary(reporter.outcome, maps)
    assert (
        "  leads: 37 completed, 0 failed, 0 skipped; 3 rows of 1 page handed to another owner"
        in (text)
    )
    [dataset] = summary_data(reporter.outcome, maps)["datasets"]
    assert (dataset["handed_over"], dataset["pages_handed_over"]) == (3, 1)
    assert "3 handed over" in reporter.stream.getvalue()  # type: ignore[attr-defined]


@pytest.mark.deadline(600)
async def test_a_peer_that_dies_in_turn_gives_the_page_back_and_nothing_is_paid_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Every row calls its tool at once, then works 100 s more: when the page
    # is lost (60 s) every call is paid and no row committed. The peer never
    # runs the page; its lease runs out and this process takes the page
    # back: every row runs again here, and every call replays its receipt.
    tool = CountingTool()
    rows = [{"domain": f"d{i}.example"} for i in range(5)]

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            found = await rc.tool("finder", {"domain": row["domain"]})
            await trio.sleep(100)
            return found["email"]

        result = await ctx.dataset("s", rows).with_column("email", resolver).run(key="domain")
        return {"completed": result.completed_count, "skipped": result.skipped_count}

    store = PeerTakeover(MemoryStore(), page=0, rows=rows, key="domain", at=20, finish=False)
    events: list[trioplay.RuntimeEvent] = []
    async with trioplay.open_runtime(
        store=store,
        tools=registry(finder=tool),
        wall_clock=trio.current_time,
        on_event=events.append,
    ) as rt:
        output = await rt.run(play, {}, run_id="r")
    assert store.taken_at == pytest.approx(60.0, abs=1.0)
    assert store.wrote == []
    [lost] = [e.data for e in events if e.type == "map.page_lost"]
    assert (lost["page_offset"], lost["rows"]) == (0, 5)
    assert sorted(lost["keys"]) == [row["domain"] for row in rows]
    assert output == {"completed": 5, "skipped": 0}
    assert dict(tool.executions) == {row["domain"]: 1 for row in rows}
    [finished] = [e.data for e in events if e.type == "map.finished"]
    assert (finished["completed"], finished["handed_over"]) == (5, 0)
    stored = await store.inner.read_rows("r", "s")
    assert sorted(row.key for row in stored) == [row["domain"] for row in rows]


def test_a_page_lost_event_reads_back_from_its_line() -> None:
    lost = PageLost(1.5, "leads", 10, "r", 2, ["a", "b"])
    text = io.StringIO()
    replay([lost], JsonlSink(text))
    line = json.loads(text.getvalue())
    assert (line["type"], line["rows"], line["keys"]) == ("page.lost", 2, ["a", "b"])
    assert from_json(line) == lost


def _slots(events: list[Any]) -> list[Span]:
    """The governor-slot spans the trace and the timeline draw of ``events``."""
    ended: list[Span] = []
    spans = Spans(ended.append)
    for e in events:
        spans.feed(e)
    spans.close(max(e.at for e in events))
    return [span for span in ended if span.kind == "slot"]


def test_the_calls_of_a_lost_pages_rows_end_cancelled_at_the_loss() -> None:
    # The three rows left to the peer had their calls running: each call ends
    # with one call.finished and one call.settled saying it was cancelled, and
    # holds its provider slot no longer than the loss, in the trace and in
    # the timeline's provider panel.
    result = _peer_takeover()
    events = result.events
    [lost] = [e for e in events if isinstance(e, PageLost)]
    started = Counter(e.call for e in events if isinstance(e, CallStarted))
    finished = Counter(e.call for e in events if isinstance(e, CallFinished))
    settled = Counter(e.call for e in events if isinstance(e, CallSettled))
    assert finished == started == settled
    cancelled = [e for e in events if isinstance(e, CallFinished) and e.outcome == "cancelled"]
    assert len(cancelled) == 3
    assert all(e.at == pytest.approx(lost.at) for e in cancelled)
    outcomes = Counter(e.outcome for e in events if isinstance(e, CallSettled))
    assert outcomes == {"completed": 37, "cancelled": 3}
    slots = _slots(events)
    assert len(slots) == 40
    assert not [span for span in slots if span.args.get("unfinished")]
    assert max(span.end for span in slots) == pytest.approx(lost.at)
    drawn = _Run(events).providers["acme"]
    means = drawn.means()
    bins_after = [mean for i, mean in enumerate(means) if drawn.t0 + i * drawn.width > lost.at]
    assert bins_after
    assert max(bins_after) == 0
