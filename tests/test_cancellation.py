"""Acceptance: cancelling a run stops all of it, promptly, and loses no commit."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import trio

import trioplay
from trioplay._json import canonical_json
from trioplay._runtime import default_run_id
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, find_email, leads, registry

FROZEN = 10.0  # real seconds of idleness before a MockClock jumps: never, in a passing test


def runtime_tasks() -> set[trio.lowlevel.Task]:
    """Every task now alive under the root task."""
    seen: set[trio.lowlevel.Task] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None or task in seen:
            continue
        seen.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return seen


class HangAfter:
    """Answers the first ``n`` distinct rows at once, hangs on the rest.

    ``hanging`` is set when the first call hangs.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.active = 0
        self.hanging = trio.Event()

    async def __call__(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        self.active += 1
        try:
            if int(input["id"]) >= self.n:
                self.hanging.set()
                await trio.sleep_forever()
            return {"ok": input["id"]}
        finally:
            self.active -= 1


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_cancelled_run_returns_fast_and_leaves_nothing(
    store_kind: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    # "Fast", on a clock that stops at the cancel: until then it runs as
    # fast as the real one; from then on it moves only after ten real
    # seconds with nothing to do. So a timer the cancelled run waited for
    # (a cleanup timeout, a flush interval) shows as elapsed time, however
    # slowly a busy machine ran the cleanup itself (SQLite's thread too).
    mock_clock.rate = 1.0
    store: Any = MemoryStore() if store_kind == "memory" else f"sqlite:///{tmp_path}/c.db"
    tool = HangAfter(300)
    reported: list[int] = []
    enough_committed = trio.Event()

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            reported.append(event.data["completed"])
            # Rows 0-255 are admitted before any hung row, so 200 commits are
            # certain; past that, hung rows may hold every provider slot.
            if event.data["completed"] >= 200:
                enough_committed.set()

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("t", {"id": row["id"]})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = ({"id": str(i)} for i in range(10_000))
        return await ctx.dataset("s", rows).with_column("x", resolver).run(key="id")

    limits = trioplay.Limits(progress_flush_interval=0.01, writer_max_flush=0.02)
    async with trioplay.open_runtime(
        store=store, tools=registry(t=tool), limits=limits, on_event=on_event
    ) as rt:
        before = runtime_tasks()
        cancelled_at = 0.0
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def run() -> None:
                with scope:
                    await rt.run(play, {}, run_id="r")

            nursery.start_soon(run)
            await enough_committed.wait()
            await tool.hanging.wait()
            assert tool.active > 0
            mock_clock.rate = 0.0
            mock_clock.autojump_threshold = FROZEN
            cancelled_at = trio.current_time()
            scope.cancel()
        elapsed = trio.current_time() - cancelled_at
        assert elapsed < limits.writer_max_flush
        assert scope.cancelled_caught
        assert tool.active == 0
        assert runtime_tasks() == before
        status = await rt.store.get_run("r")
        assert status is not None
        assert status.status == "interrupted"
        counts = await rt.store.count_rows("r", "s")
        # Every row reported committed is in the sheet.
        assert counts.get("completed", 0) >= max(reported) >= 200
        # The cancelled attempt released its leases: a rerun claims at once.
        held = await rt.store.count_receipts("r")
        assert held.get("running", 0) == 0


async def test_cancelled_runtime_closes_the_sqlite_thread(tmp_path: Path) -> None:
    import threading

    threads = set(threading.enumerate())
    playing = trio.Event()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        playing.set()
        await trio.sleep_forever()

    with trio.CancelScope() as scope:
        async with trioplay.open_runtime(store=f"sqlite:///{tmp_path}/t.db") as rt:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.run, play, {})
                await playing.wait()
                assert {t for t in threading.enumerate() if t.is_alive()} - threads
                scope.cancel()
    # The runtime joined its thread before it returned.
    assert {t for t in threading.enumerate() if t.is_alive()} - threads == set()


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_result_returned_after_the_cancel_is_still_recorded(
    store_kind: str, tmp_path: Path
) -> None:
    # A tool that finishes its work although its run was cancelled (a shielded
    # request, or one that returned without a checkpoint just as the cancel
    # came) settles after the settler's last write; it was paid for all the same.
    store: Any = MemoryStore() if store_kind == "memory" else f"sqlite:///{tmp_path}/c.db"
    started = trio.Event()
    paid: list[str] = []

    async def stubborn(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        started.set()
        with trio.CancelScope(shield=True):
            await trio.sleep(0.1)
        paid.append(call.idempotency_key)
        return {"ok": input["id"]}

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("t", {"id": row["id"]})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"id": "a"}]).with_column("x", resolver).run(key="id")

    async with trioplay.open_runtime(store=store, tools=registry(t=stubborn)) as rt:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.run, play, {})
                await started.wait()
                scope.cancel()
        assert paid
        held = await rt.store.count_receipts(default_run_id("p", canonical_json({})))
        assert held == {"completed": 1}


CLEANUP = 0.5
CANCEL_TIMEOUT = 0.25  # as PostgresStore's default cancel_timeout


class GoesSilent:
    """A memory store that stops answering at the first call of ``operation``.

    From then on every call hangs, and a cancelled one takes ``CANCEL_TIMEOUT``
    to give up, as a PostgreSQL call waits for the server to confirm its cancel
    (a black-holed network never does). ``log`` holds each silent call as
    ``(operation, started, ended)``.
    """

    def __init__(self, operation: str) -> None:
        self._store = MemoryStore()
        self.operation = operation
        self.silent = trio.Event()
        self.log: list[tuple[str, float, float]] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name in ("open", "aclose") or not inspect.iscoroutinefunction(found):
            return found

        async def answer(*args: Any, **kwargs: Any) -> Any:
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled before it began
            if name == self.operation:
                self.silent.set()
            if not self.silent.is_set():
                return await found(*args, **kwargs)
            started = trio.current_time()
            try:
                await trio.sleep_forever()
            finally:  # cancelled: the cancel is never confirmed
                with trio.CancelScope(shield=True):
                    await trio.sleep(CANCEL_TIMEOUT)
                self.log.append((name, started, trio.current_time()))

        return answer


@pytest.mark.parametrize("operation", ["write_terminal_rows", "finish_page", "complete_many"])
async def test_cleanup_after_a_cancel_shares_one_cleanup_timeout(
    autojump_clock: trio.testing.MockClock, operation: str
) -> None:
    # The store goes silent at a sheet write, a page's finish or a settlement,
    # and the run is cancelled 0.3 s later. Every shielded cleanup (the
    # writer's last flush, the settler's last write, lease releases, the run's
    # end) shares the one cleanup_timeout that began with the cancel, so the
    # run returns within it, plus the store's own wait for a cancel it was
    # asked at that deadline. Before, a cleanup that began after a cancelled
    # call (the last flush after the cancelled write, the page's release
    # after its cancelled finish) got a whole cleanup_timeout of its own.
    store = GoesSilent(operation)
    limits = trioplay.Limits(writer_max_flush=0.02, cleanup_timeout=CLEANUP)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        dataset = ctx.dataset("s", leads(3000)).with_column("email", find_email)
        return await dataset.run(key="domain", page_size=100)

    async with trioplay.open_runtime(
        store=store, tools=registry(finder=CountingTool(delay=0.002)), limits=limits
    ) as rt:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.run, play, {})
                await store.silent.wait()
                await trio.sleep(0.3)
                cancelled_at = trio.current_time()
                scope.cancel()
        elapsed = trio.current_time() - cancelled_at
    # The silent calls, from the cancel: (operation, started, ended), by their end.
    calls = {(op, round(a - cancelled_at, 3), round(b - cancelled_at, 3)) for op, a, b in store.log}
    log = sorted(calls, key=lambda call: call[2])
    assert scope.cancelled_caught
    assert elapsed <= CLEANUP + CANCEL_TIMEOUT + 0.01, (elapsed, log)


async def test_an_interrupted_run_resumes_as_its_next_attempt_and_a_cancelled_one_never(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A cancel scope around rt.run (Ctrl-C, a timeout) interrupts the run: the
    # same run id runs again as attempt 2. `trioplay cancel` (cancel_run) ends
    # a run for good: it never runs again.
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        await trio.sleep(10)
        return "done"

    store = MemoryStore()
    with trio.fail_after(600):
        async with trioplay.open_runtime(store=store) as rt:
            with trio.move_on_after(1):
                await rt.run(play, {}, run_id="r")
            interrupted = await store.get_run("r")
            assert interrupted is not None
            assert (interrupted.status, interrupted.attempt) == ("interrupted", 1)
            assert await rt.run(play, {}, run_id="r") == "done"
            resumed = await store.get_run("r")
            assert resumed is not None
            assert (resumed.status, resumed.attempt) == ("completed", 2)

            with trio.move_on_after(1):
                await rt.run(play, {}, run_id="c")
            await store.cancel_run("c", now=0.0)
            with pytest.raises(trioplay.RunCancelled, match="trioplay cancel"):
                await rt.run(play, {}, run_id="c")
            ended = await store.get_run("c")
            assert ended is not None
            assert (ended.status, ended.attempt) == ("cancelled", 1)


async def test_a_cancelled_call_gives_its_lease_back_once() -> None:
    # The executor releases a cancelled call's lease; its owner's task must
    # not release the same lease again on its way out (one store call, not two).
    released: list[str] = []

    class Counting(MemoryStore):
        async def release_many(self, leases: Any, *, now: float) -> Any:
            released.extend(lease.key for lease in leases)
            return await super().release_many(leases, now=now)

    started = trio.Event()

    async def hangs(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        started.set()
        await trio.sleep_forever()

    async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.tool("t", {"id": row["id"]})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"id": "a"}]).with_column("x", resolver).run(key="id")

    with trio.fail_after(30):
        async with trioplay.open_runtime(store=Counting(), tools=registry(t=hangs)) as rt:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(rt.run, play, {})
                    await started.wait()
                    scope.cancel()
    assert len(released) == 1, released
