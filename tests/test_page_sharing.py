"""Two processes on one run share its pages by what each can run (issue 27, goal 3).

A process claims a page only once the page before it has started all its
rows, so it never holds more than one page it has not started; a peer
takes the rest. These tests run two runtimes of one process as the two
"processes" (each its own owner) on one store, in virtual time, with 1 s
tools: how many rows each commits follows its ``max_concurrent_rows``, not
which of them started first. docs/scale-out.md has the measured numbers
with real processes on one SQLite file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, leads, registry

if TYPE_CHECKING:
    import trio.testing

ROWS = 300
PAGE = 25


@trioplay.play("share")
async def _play(ctx: trioplay.PlayContext, input_: Any) -> Any:
    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    rows = leads(input_["rows"])
    result = await ctx.dataset("s", rows).with_column("email", resolver).run(key="domain")
    return result.completed_count


async def _share(
    in_flight: tuple[int, ...],
    *,
    head_start: float = 0.0,
    rows: int = ROWS,
    flush: float = 0.1,
    page: int = PAGE,
) -> tuple[list[int], float]:
    """Rows each runtime committed, and how long the run took (virtual seconds).

    Runtime ``i`` starts ``i * head_start`` seconds after the first; ``flush``
    is each one's ``writer_max_flush``.
    """
    started = trio.current_time()
    store = MemoryStore()
    tool = CountingTool(delay=1.0)
    counts = [0] * len(in_flight)

    async def one(index: int) -> None:
        await trio.sleep(head_start * index)
        limits = trioplay.Limits(
            page_size=page,
            writer_max_flush=flush,
            max_concurrent_rows=in_flight[index],
            max_concurrent_external_calls=in_flight[index],
        )
        async with trioplay.open_runtime(
            store=store, tools=registry(finder=tool), limits=limits, wall_clock=trio.current_time
        ) as rt:
            rt.owner = f"peer-{index}/1/1"  # another host's process: never taken for dead
            counts[index] = await rt.run(_play, {"rows": rows}, run_id="r")

    async with trio.open_nursery() as nursery:
        for index in range(len(in_flight)):
            nursery.start_soon(one, index)
    assert sum(counts) == rows
    assert set(tool.executions.values()) == {1}  # every row's call made once, by one of them
    return counts, trio.current_time() - started


@pytest.mark.deadline(60)
async def test_two_equal_processes_split_the_pages_evenly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    (first, second), _ = await _share((25, 25))
    assert (first, second) == (150, 150)


@pytest.mark.deadline(60)
async def test_a_process_takes_pages_as_its_rows_in_flight_allow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Three times the rows in flight: three times the rows, whichever starts
    # first. A process that claimed its next page while all its slots were
    # busy held 50 rows it could not start, and took 100 to the other's 200.
    for in_flight in ((25, 75), (75, 25)):
        counts, done = await _share(in_flight)
        assert counts == [3 * n for n in in_flight]
        assert done < 3.5  # 100 rows in flight together: three waves of 1 s, not four


@pytest.mark.deadline(60)
async def test_a_process_that_can_run_the_whole_map_at_once_leaves_a_late_peer_little(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 27's 275/25 at the default 256 rows in flight: the first process
    # admits 256 rows at once, so it holds 11 of the 12 pages before its peer
    # starts; the peer takes the one left, and the map ends no sooner.
    (first, late), done = await _share((256, 256), head_start=0.5)
    assert (first, late) == (275, 25)
    (alone,), done_alone = await _share((256,))
    assert alone == ROWS
    # No sooner; later by at most the poll that sees the first one's last
    # page done: the late peer has waited for it some 0.6 s, so it polls
    # every 0.06 s.
    assert done_alone <= done <= done_alone + 0.06


@pytest.mark.deadline(60)
async def test_a_process_commits_its_last_rows_as_they_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two waves of 1 s. The writer holds a batch up to writer_max_flush for
    # more rows, but once the source is read and no row is running none can
    # come: the last rows commit when they finish, not 5 s later. A wait
    # added to each process's end is paid once per process by a shared run.
    (alone,), done = await _share((25,), rows=50, flush=5.0)
    assert alone == 50
    assert done == pytest.approx(2.0, abs=0.01)


@pytest.mark.deadline(60)
async def test_a_process_sees_a_peers_last_page_done_soon_after_it_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The second process starts 0.03 s late, so it commits its last page
    # 0.03 s after the first process ran out of pages of its own. The first
    # returns only once every page is done, and polls for it: every
    # page_wait_delay (0.1 s) it saw it at 6.1 s; polling at a tenth of
    # how long it has had nothing of its own to run, within 0.01 s.
    _, done = await _share((25, 25), head_start=0.03)
    assert done == pytest.approx(6.03, abs=0.01)


@pytest.mark.deadline(60)
async def test_a_peers_page_is_polled_fast_only_once_a_process_has_nothing_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Pages of 250 rows, 64 in flight: each process starts waiting for its
    # peer's pages as soon as a slot frees under its own last page, four
    # waves before it runs out of rows. Counting the wait from then, it
    # polled every 0.09 s by the end and saw the peer's last page (done at
    # 8.03 s) at 8.086 s; counted from when its own pages ended, at once.
    counts, done = await _share((64, 64), head_start=0.03, rows=1000, page=250)
    assert counts == [500, 500]
    assert done == pytest.approx(8.03, abs=0.006)
