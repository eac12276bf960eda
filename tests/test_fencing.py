"""Fencing all the way down: a process that lost its lease never hangs, corrupts or lies.

A process paused past its lease (a GC pause, a VM migration, SIGSTOP) comes
back to find a peer running its pages. Its lost pages end through
``PageState.LOST`` and the map goes on; its sheet writes are fenced by its
page leases and never replace a completed row with a failed one; its run's
final status is written only if its attempt still holds the run.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import registry

TTL = 10.0  # page heartbeats every 5 s
PEER = "elsewhere/1/1"


class TakenOver(MemoryStore):
    """A store where a peer takes page ``offset`` over at our first heartbeat of it.

    The peer believes us dead (as it would after a pause past ``lease_ttl``),
    claims the page with our lease as the one to take over, and then, like a
    peer that died in turn, never renews it.
    """

    def __init__(self, offset: int = 0) -> None:
        super().__init__()
        self.offset = offset
        self.taken: list[float] = []

    async def heartbeat_pages(self, leases: Any, **kw: Any) -> list[float | None]:
        for lease in leases:
            if lease.offset == self.offset and not self.taken:
                claim = await self.claim_page(
                    lease.run_id,
                    lease.dataset,
                    lease.offset,
                    owner=PEER,
                    lease_ttl=TTL,
                    now=trio.current_time(),
                    takeover_lease=lease.lease_id,
                )
                assert claim.status == "claimed"
                self.taken.append(trio.current_time())
        return await super().heartbeat_pages(leases, **kw)


def slow_map(rows: int, delay: float) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            await trio.sleep(delay)
            return f"v{row['n']}"

        source = [{"n": str(i)} for i in range(rows)]
        result = await ctx.dataset("s", source).with_column("x", resolver).run(key="n")
        return {
            "completed": result.completed_count,
            "failed": result.failed_count,
            "skipped": result.skipped_count,
        }

    return play


async def run_play(store: MemoryStore, play: Any, **limits: Any) -> Any:
    async with trioplay.open_runtime(
        store=store,
        tools=registry(),
        limits=trioplay.Limits(lease_ttl=TTL, **limits),
        wall_clock=trio.current_time,
    ) as rt:
        return await rt.run(play, {}, run_id="r")


@pytest.mark.deadline(600)
@pytest.mark.parametrize("delay", [7.0, 3.0], ids=["none-committed", "two-committed"])
async def test_a_page_lost_while_its_rows_start_ends_and_the_map_goes_on(
    autojump_clock: trio.testing.MockClock, delay: float
) -> None:
    # Two rows at a time, `delay` s each: page 0 (10 rows) is still starting
    # its rows when its first heartbeat (5 s) finds it taken over (with 3 s
    # rows, two of them committed before). On main the page returned without
    # telling the page loop it had started, and the map waited for ever.
    store = TakenOver()
    output = await run_play(store, slow_map(30, delay), page_size=10, max_concurrent_rows=2)
    assert store.taken
    rows = await store.read_rows("r", "s")
    assert sorted(int(row.key) for row in rows) == list(range(30))
    assert {row.status for row in rows} == {"completed"}
    # The peer never finished page 0: its lease ran out and this process
    # took the page over, so every row ran here, and counts once.
    assert output == {"completed": 30, "failed": 0, "skipped": 0}
    assert (await store.get_run("r")).status == "completed"  # type: ignore[union-attr]


class PeerCompletes(MemoryStore):
    """A store where, once ``go`` is set, a peer takes page 0 over and completes its rows.

    The peer does what a live process does after taking over a page whose
    owner looked dead: it claims the page, writes the rows completed under
    its lease and finishes the page. Our own rows then fail (as rows of a
    paused process do, with ``LeaseLost``), and their write must be fenced.
    """

    def __init__(self, keys: list[str]) -> None:
        super().__init__()
        self.keys = keys
        self.peer_done = trio.Event()
        self.ours: str | None = None  # our lease of page 0

    async def claim_page(self, *args: Any, **kw: Any) -> trioplay.PageClaim:
        claim = await super().claim_page(*args, **kw)
        if claim.status == "claimed" and kw["owner"] != PEER:
            self.ours = claim.lease_id
        return claim

    async def take_over(self, run_id: str, dataset: str) -> None:
        now = trio.current_time()
        claim = await self.claim_page(
            run_id, dataset, 0, owner=PEER, lease_ttl=TTL, now=now, takeover_lease=self.ours
        )
        assert claim.lease_id is not None
        lease = trioplay.PageLease(run_id, dataset, 0, claim.lease_id)
        rows = [
            trioplay.SheetRow(key, int(key), "completed", f'{{"n":"{key}","x":"peer"}}', None, 9)
            for key in self.keys
        ]
        written = await self.write_terminal_rows(run_id, dataset, rows, leases=[lease] * len(rows))
        assert set(written) == {"written"}
        assert await self.finish_page(lease, attempt=9, failed=0, now=now)
        self.peer_done.set()

    def play(self, on_row_error: Any = "isolate") -> Any:
        """A map over ``keys`` whose rows fail with ``LeaseLost`` once the peer is done."""

        @trioplay.play("p")
        async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
            async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
                if row["n"] == "0":
                    await self.take_over("r", "s")
                await self.peer_done.wait()
                raise trioplay.LeaseLost("the receipt passed to another process")

            source = [{"n": key} for key in self.keys]
            dataset = ctx.dataset("s", source).with_column("x", resolver)
            result = await dataset.run(key="n", on_row_error=on_row_error)
            return {
                "completed": result.completed_count,
                "failed": result.failed_count,
                "skipped": result.skipped_count,
            }

        return play


@pytest.mark.deadline(600)
async def test_rows_of_a_page_taken_over_never_replace_the_peers_completed_rows(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # On main the paused process's failed rows (LeaseLost) were upserted over
    # the rows the peer had completed: their receipts completed, the export
    # missing them.
    keys = [str(i) for i in range(5)]
    store = PeerCompletes(keys)
    play = store.play()

    events: list[trioplay.RuntimeEvent] = []
    async with trioplay.open_runtime(
        store=store,
        tools=registry(),
        limits=trioplay.Limits(lease_ttl=TTL),
        wall_clock=trio.current_time,
        on_event=events.append,
    ) as rt:
        output = await rt.run(play, {}, run_id="r")
    rows = await store.read_rows("r", "s")
    assert [(row.key, row.status, row.attempt) for row in rows] == [
        (key, "completed", 9) for key in keys
    ]
    # None of them is this process's: not completed here, not failed here;
    # once the page was found done by the peer, they were handed over to it
    # (issue 26: not skipped, as an earlier attempt's rows are).
    assert output == {"completed": 0, "failed": 0, "skipped": 0}
    [lost] = [e.data for e in events if e.type == "map.page_lost"]
    assert (lost["page_offset"], lost["rows"], sorted(lost["keys"])) == (0, 5, keys)
    [finished] = [e.data for e in events if e.type == "map.finished"]
    assert (finished["handed_over"], finished["pages_handed_over"]) == (5, 1)


async def test_a_late_attempt_never_overwrites_a_later_attempts_status() -> None:
    # Attempt 1 is still running (paused, say) when attempt 2 begins in
    # another process and completes the run. On main attempt 1's failure,
    # recorded last, flipped the completed run to failed.
    store = MemoryStore()
    started, resume = trio.Event(), trio.Event()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        started.set()
        await resume.wait()
        raise trioplay.LeaseLost("the run's receipts passed to another process")

    async def later_attempt() -> None:
        await started.wait()
        record = await store.begin_attempt("r", "p", "{}", now=2.0)
        assert record.attempt == 2
        assert await store.finish_attempt("r", "completed", attempt=2, now=3.0, output_json="1")
        resume.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later_attempt)
        async with trioplay.open_runtime(store=store, tools=registry()) as rt:
            with pytest.raises(trioplay.LeaseLost):
                await rt.run(play, {}, run_id="r")
    record = await store.get_run("r")
    assert record is not None
    assert (record.status, record.attempt, record.output_json) == ("completed", 2, "1")


async def test_runs_list_marks_a_running_run_whose_leases_all_expired_as_probably_dead() -> None:
    # On main a run left `running` by a dead process looked live in runs list.
    from trioplay._cli._runs import _runs_listed

    store = MemoryStore()
    for run_id in ("dead", "alive", "done", "quiet"):
        await store.begin_attempt(run_id, "p", "{}", now=1000.0)
    await store.finish_attempt("done", "completed", attempt=1, now=1001.0)
    for run_id, renewed in (("dead", 1010.0), ("alive", 1080.0)):
        [claimed] = await store.claim_many(
            [trioplay.ClaimRequest(f"k-{run_id}", "tool", "t", run_id)],
            owner="o",
            lease_ttl=60.0,
            now=renewed,
        )
        assert isinstance(claimed, trioplay.Claimed)
    listed = await _runs_listed(store, limit=10, lease_ttl=60.0, now=1100.0)
    marks = {run["run_id"]: (run["probably_dead"], run["last_heartbeat"]) for run in listed}
    assert marks == {
        # Its lease expired at 1070, and nothing renewed it since 1010.
        "dead": (True, "1970-01-01T00:16:50+00:00"),
        "alive": (False, "1970-01-01T00:18:00+00:00"),
        "done": (False, None),
        # No lease at all, and begun more than lease_ttl ago.
        "quiet": (True, "1970-01-01T00:16:40+00:00"),
    }
    # Begun just now, holding no lease yet: not dead.
    listed = await _runs_listed(store, limit=10, lease_ttl=60.0, now=1050.0)
    assert {run["run_id"] for run in listed if run["probably_dead"]} == set()


@pytest.mark.deadline(600)
async def test_a_row_that_lost_its_receipt_to_a_peer_gives_the_page_up_not_the_map(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # With on_row_error="fail", a paused process's rows failing with
    # LeaseLost failed its whole map (and its run) on main, although the
    # peer had taken the page over and completed it. A LeaseLost row checks
    # its page's lease at once: the page is lost, the map goes on.
    keys = [str(i) for i in range(5)]
    store = PeerCompletes(keys)
    play = store.play(on_row_error="fail")

    output = await run_play(store, play)
    # Page 0 was the peer's to finish: waited for at the end, found done,
    # its rows handed over to the peer that committed them (not skipped).
    assert output == {"completed": 0, "failed": 0, "skipped": 0}
    rows = await store.read_rows("r", "s")
    assert {(row.status, row.attempt) for row in rows} == {("completed", 9)}
    assert (await store.get_run("r")).status == "completed"  # type: ignore[union-attr]
