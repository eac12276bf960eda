"""The map room's parts on their own: admission, page states, the ledger, the writer's life.

And two rules of the room read from its source: every event it emits goes
through its report, and only the ledger changes a map's counts.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._budget import ByteBudget
from trioplay._cleanup import CleanupBudget
from trioplay._limits import Limits
from trioplay._map._admission import RowAdmission
from trioplay._map._ledger import CommitLedger
from trioplay._map._pages import Page, PageState
from trioplay._map._plan import Plan, RowPlanner
from trioplay._map._report import MapCounts, MapReport
from trioplay._map._result import MapResult
from trioplay._map._writer import TerminalRow, TerminalRowWriter, open_terminal_writer
from trioplay._records import SheetRow, SheetWrite
from trioplay._trace import ListSink, Recorder
from trioplay._trace._listen import EventListener
from trioplay.stores.memory import MemoryStore

ROOM = Path(__file__).resolve().parent.parent / "engine" / "_map"


class _Observer:
    """The one hook of the stall observer a page calls on commit."""

    def __init__(self) -> None:
        self.committed: list[int] = []

    def terminal_committed(self, token: int) -> None:
        self.committed.append(token)


def _page(offset: int = 0) -> Page:
    return Page(offset, Plan([]), _Observer())  # type: ignore[arg-type]


# -- admission ----------------------------------------------------------------
async def test_admission_takes_a_slot_and_the_estimate_then_gives_both_back() -> None:
    limiter, budget = trio.CapacityLimiter(2), ByteBudget(1_000_000)
    admission = RowAdmission(limiter, budget)
    token = object()
    reserved = admission.try_admit(token)
    assert reserved == 64 * 1024  # before any row finished
    assert (limiter.borrowed_tokens, budget.used) == (1, reserved)
    admission.release_slot(token)
    admission.release_bytes(reserved)
    assert (limiter.borrowed_tokens, budget.used) == (0, 0)
    for _ in range(64):
        admission.observe(1000)
    assert admission.estimate() == 3000  # three times the mean size


async def test_a_row_admitted_without_waiting_says_what_it_lacks() -> None:
    limiter, budget = trio.CapacityLimiter(1), ByteBudget(100_000)
    admission = RowAdmission(limiter, budget)
    first = object()
    assert admission.try_admit(first) == 64 * 1024
    # No slot: nothing taken.
    assert admission.try_admit(object()) is None
    assert (limiter.borrowed_tokens, budget.used) == (1, 64 * 1024)
    admission.release_slot(first)
    admission.release_bytes(64 * 1024)
    # A slot but no bytes (someone else holds them): the slot is kept, for admit().
    assert budget.try_acquire(90_000) == 90_000
    second = object()
    assert admission.try_admit(second) == 0
    assert (limiter.borrowed_tokens, budget.used) == (1, 90_000)
    with trio.CancelScope() as scope:
        scope.cancel()
        await admission.admit(second, has_slot=True)
    # Cancelled while it waited for its bytes: it gave its slot back.
    assert (limiter.borrowed_tokens, budget.used) == (0, 90_000)


async def test_admit_waits_for_the_slot_then_for_the_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter, budget = trio.CapacityLimiter(1), ByteBudget(150_000)
    admission = RowAdmission(limiter, budget)
    first = object()
    held = admission.try_admit(first)
    assert held == 64 * 1024
    admission.observe(30_000)  # rows are larger than guessed: the next takes 90,000 bytes
    admitted_at: list[float] = []

    async def second() -> None:
        token = object()
        reserved = await admission.admit(token)
        assert reserved == 90_000
        admitted_at.append(trio.current_time())
        admission.release_slot(token)
        admission.release_bytes(reserved)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.sleep(1)
        assert budget.try_acquire(80_000) == 80_000  # bytes taken while it waits for a slot
        admission.release_slot(first)  # the slot is free, the bytes are not
        admission.release_bytes(held)
        await trio.sleep(1)
        assert admitted_at == []
        assert limiter.borrowed_tokens == 1  # it holds the slot while it waits for bytes
        budget.release(80_000)
    assert admitted_at == [2.0]
    assert (limiter.borrowed_tokens, budget.used) == (0, 0)


# -- page states --------------------------------------------------------------
def test_a_page_runs_starting_running_drained() -> None:
    page = _page()
    assert page.state is PageState.STARTING
    page.outstanding = 2
    page.all_started()
    assert page.state is PageState.RUNNING
    page.row_committed(7, completed=True)
    page.row_committed(8, completed=False)
    assert page.state is PageState.DRAINED
    assert page.settled.is_set()
    assert page.failed == 1
    assert page.observer.committed == [7, 8]  # type: ignore[attr-defined]


def test_a_page_with_no_rows_in_flight_drains_once_all_started() -> None:
    page = _page()
    page.all_started()
    assert page.state is PageState.DRAINED


def test_a_page_lost_or_released_while_starting_stays_so() -> None:
    lost, released = _page(), _page()
    lost.move(PageState.LOST)
    released.move(PageState.RELEASED)
    for page in (lost, released):
        page.all_started()  # its last rows started before the cancellation landed
        assert page.state in (PageState.LOST, PageState.RELEASED)
        assert not page.settled.is_set()


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ([], PageState.DRAINED),  # rows may still be starting
        ([PageState.LOST], PageState.RUNNING),
        ([PageState.RELEASED], PageState.LOST),
        ([PageState.RUNNING, PageState.DRAINED], PageState.RELEASED),
        ([PageState.RUNNING, PageState.LOST], PageState.DRAINED),
    ],
)
def test_a_move_missing_from_the_table_is_refused(
    path: list[PageState], refused: PageState
) -> None:
    page = _page(offset=40)
    for state in path:
        page.move(state)
    with pytest.raises(RuntimeError, match=f"page at row 40: no move from .* to {refused}"):
        page.move(refused)


def test_a_drained_page_can_still_be_lost() -> None:
    page = _page()
    page.all_started()
    page.move(PageState.LOST)
    assert page.state is PageState.LOST


# -- the ledger ---------------------------------------------------------------
class _Map:
    """A ledger and its report, the report's events kept."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        told = EventListener(lambda event: self.events.append((event.type, event.data)))
        self.report = MapReport("r", "ds", Recorder(told), None)
        result = MapResult(dataset="ds", run_id="r", sheet=MemoryStore(), retained_budget=10_000)
        self.ledger = CommitLedger(result, self.done.append, self.report)


def test_the_ledger_counts_plans_and_commits() -> None:
    room = _Map()
    ledger, done = room.ledger, room.done
    ledger.planned(Plan([(0, "a", {}), (1, "b", {})], skipped=3, duplicates=1), 0, 5)
    page = _page()
    page.outstanding = 2
    page.all_started()
    batch = [
        TerminalRow(SheetRow("a", 0, "completed", '{"x":1}'), 10, page, 1, {"x": 1}),
        TerminalRow(SheetRow("b", 1, "failed", "{}", "E: no"), 10, page, 2, None),
    ]
    ledger.committed(batch)
    ledger.unconfirmed_rows(4)
    assert ledger.counts() == MapCounts(
        completed=1, failed=1, skipped=3, duplicates=1, unconfirmed=4
    )
    result = ledger.result
    assert (result.completed_count, result.failed_count) == (1, 1)
    assert (result.skipped_count, result.duplicate_count) == (3, 1)
    assert result.preview == [{"x": 1}]
    assert done == ["a", "b"]  # no longer in flight
    assert page.state is PageState.DRAINED
    assert page.failed == 1


def test_the_ledger_accounts_for_every_row_read_or_names_the_missing_ones() -> None:
    room = _Map()
    ledger = room.ledger
    rows: list[tuple[int, str, dict[str, Any]]] = [(i, str(i), {}) for i in range(2, 30)]
    ledger.planned(Plan(rows, skipped=2), 0, 30)
    page = _page()
    page.outstanding = 28
    page.all_started()
    wait = trioplay.WaitRecord(
        wait_key="w", run_id="r", dataset="ds", row_key="2", name="approval",
        key_json='"2"', token="t", deadline=100.0, status="waiting", created_at=0.0,
    )  # fmt: skip
    ledger.waiting(2, "2", wait)
    ledger.committed(
        [
            TerminalRow(SheetRow(str(i), i, "completed", "{}"), 1, page, i, None)
            for i in range(3, 15)
        ]
    )
    with pytest.raises(trioplay.MapAccountingError) as caught:
        ledger.check(30)
    # 2 skipped + 1 waiting + 12 committed: 15 of 30, and the first ten missing named.
    assert caught.value.missing == list(range(15, 25))
    assert (caught.value.read, caught.value.counted) == (30, 15)
    assert "15, 16, 17" in str(caught.value)
    ledger.committed(
        [TerminalRow(SheetRow(str(i), i, "failed", "{}"), 1, page, i, None) for i in range(15, 30)]
    )
    ledger.check(30)  # all there now
    assert ledger.counts().waiting == 1
    assert ledger.result.waiting[0].name == "approval"
    with pytest.raises(trioplay.MapAccountingError):
        ledger.check(31)  # a row read that no page planned


def test_rows_of_a_lost_page_count_as_left_to_its_new_owner() -> None:
    ledger = _Map().ledger
    plan = Plan([(i, str(i), {}) for i in range(10)])
    ledger.planned(plan, 0, 10)
    page = _page()
    page.outstanding = 10
    page.all_started()
    ledger.committed([TerminalRow(SheetRow("0", 0, "completed", "{}"), 1, page, 0, None)])
    left = ledger.page_lost(0, plan, [(i, str(i)) for i in range(10)])
    assert left == [str(i) for i in range(1, 10)]  # what the page.lost event names
    assert ledger.counts()[-2:] == (9, 1)  # 9 rows of 1 page, already while it is lost
    ledger.check(10)
    assert ledger.handed_off == 9
    assert ledger.counts()[-2:] == (9, 1)


def test_a_lost_page_planned_again_counts_its_skipped_rows_once() -> None:
    # Rows 0-1 completed in an earlier attempt (skipped); row 2 commits here;
    # the page is lost, then planned again once its new owner is done with it
    # (rows 3-9 completed by that owner: handed over; row 2 ours: not again).
    ledger = _Map().ledger
    first = Plan([(i, str(i), {}) for i in range(2, 10)], skipped=2)
    ledger.planned(first, 0, 10)
    page = _page()
    page.outstanding = 8
    page.all_started()
    ledger.committed([TerminalRow(SheetRow("2", 2, "completed", "{}"), 1, page, 0, None)])
    ledger.page_lost(0, first, [(i, str(i)) for i in range(2, 10)])
    assert ledger.left_to_peer(0) == frozenset(range(3, 10))
    ledger.planned(Plan([], skipped=2, handed_over=7), 0, 10)
    ledger.check(10)
    counts = ledger.counts()
    assert (counts.completed, counts.skipped, ledger.handed_off) == (1, 2, 7)
    assert (counts.handed_over, counts.pages_handed_over) == (7, 1)


async def test_a_lost_page_planned_again_hands_over_the_rows_its_new_owner_ran() -> None:
    # Attempt 2 left rows 1-4 to a peer when it lost the page. Row 0 was an
    # earlier attempt's (skipped, as before); rows 1 and 2 the peer ran, one
    # as attempt 2, one as another attempt (handed over); row 3 the peer failed
    # in another attempt and row 4 it never wrote (both run here).
    sheet = MemoryStore()
    written = [
        SheetRow("a", 0, "completed", "{}", None, 1),
        SheetRow("b", 1, "completed", "{}", None, 2),
        SheetRow("c", 2, "completed", "{}", None, 7),
        SheetRow("d", 3, "failed", "{}", "E: no", 7),
    ]
    await sheet.write_terminal_rows("r", "ds", written)
    planner = RowPlanner(sheet, "r", "ds", "k", 2)
    chunk = [{"k": key} for key in "abcde"]
    plan = await planner.plan(chunk, 0, again=True, left=frozenset({1, 2, 3, 4}))
    assert [position for position, _, _ in plan.rows] == [3, 4]
    assert (plan.skipped, plan.handed_over) == (1, 2)


def test_a_foreign_plan_drops_the_retained_rows() -> None:
    ledger = _Map().ledger
    assert ledger.result.retained_rows_complete
    ledger.planned(Plan([], skipped=1, foreign=True), 0, 1)
    assert not ledger.result.retained_rows_complete


async def test_progress_is_reported_only_after_counts_changed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    room = _Map()
    ledger, report = room.ledger, room.report
    report.started(5)
    page = _page()
    page.outstanding = 1
    page.all_started()
    ledger.planned(Plan([(0, "a", {})]), 0, 1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(report.keep_reporting, 1.0, ledger.counts)
        await trio.sleep(2.5)  # two ticks, nothing changed
        ledger.committed([TerminalRow(SheetRow("a", 0, "completed", "{}"), 1, page, 1, None)])
        await trio.sleep(1)  # the third tick reports it
        nursery.cancel_scope.cancel()
    progress = [data for kind, data in room.events if kind == "map.progress"]
    assert progress == [
        {
            "map": "ds",
            "completed": 1,
            "failed": 0,
            "skipped": 0,
            "duplicates": 0,
            "unconfirmed": 0,
            "total": 5,
            "waiting": 0,
            "handed_over": 0,
            "pages_handed_over": 0,
        }
    ]


# -- the writer's life ----------------------------------------------------------
class _Writes:
    """The writer's ``commits``: what it was told, in order."""

    def __init__(self) -> None:
        self.committed_keys: list[str] = []
        self.unconfirmed: list[int] = []

    def committed(self, batch: list[TerminalRow]) -> None:
        self.committed_keys += [item.row.key for item in batch]

    def refused(self, items: list[tuple[TerminalRow, SheetWrite]]) -> None:
        raise AssertionError(f"nothing is fenced here: {items}")

    def unconfirmed_rows(self, count: int) -> None:
        self.unconfirmed.append(count)

    def open(self, store: MemoryStore, report: MapReport | None = None) -> open_terminal_writer:
        limits = Limits(writer_buffer_bytes=1000, writer_max_flush=10.0)
        writer = TerminalRowWriter(
            store, "r", "ds", limits, cleanup=CleanupBudget(1.0), commits=self, report=report
        )
        return open_terminal_writer(writer)


def _row(key: str) -> TerminalRow:
    return TerminalRow(SheetRow(key, int(key), "completed", "{}"), 10, _page(), 0, None)


async def _admit_then_raise(writer_block: open_terminal_writer, error: Exception) -> None:
    async with writer_block as writer:
        await writer.admit(_row("1"))
        raise error


async def test_leaving_the_writer_block_commits_what_it_was_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writes, store = _Writes(), MemoryStore(write_delay=2.0)
    async with writes.open(store) as writer:
        for key in "123":
            await writer.admit(_row(key))
    # No flush deadline to wait out (the input ended), one write of 2 s.
    assert trio.current_time() == 2.0
    assert writes.committed_keys == ["1", "2", "3"]
    assert writer.finished.is_set()


async def test_an_error_in_the_block_waits_for_the_writer_then_is_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writes, store = _Writes(), MemoryStore(write_delay=5.0)
    with pytest.raises(ValueError, match="a row failed"):
        await _admit_then_raise(writes.open(store), ValueError("a row failed"))
    assert trio.current_time() == 5.0
    assert writes.committed_keys == ["1"]
    assert writes.unconfirmed == []


@pytest.mark.parametrize(
    "error",
    [
        trioplay.StoreError("memory://: claim_page: gone"),
        trioplay.PersistenceLatchTripped("a receipt could not be written"),
    ],
)
async def test_a_store_error_in_the_block_cancels_the_writer(
    autojump_clock: trio.testing.MockClock, error: Exception
) -> None:
    writes, store = _Writes(), MemoryStore(write_delay=5.0)
    recorder = Recorder(sink := ListSink())
    report = MapReport("r", "ds", None, recorder)
    with pytest.raises(type(error)) as info:
        await _admit_then_raise(writes.open(store, report=report), error)
    assert info.value is error
    # Not the 5 s write: one last try within the cleanup budget, which it outlasts.
    assert trio.current_time() == 1.0
    assert writes.committed_keys == []
    assert writes.unconfirmed == [1]
    recorder.close()
    # The write in flight, cancelled; then the final flush, which runs out of time.
    assert [(event.TYPE, getattr(event, "error", None)) for event in sink.events] == [
        ("writer.batch_started", None),
        ("writer.batch_started", None),
        ("writer.batch_failed", "Cancelled"),
    ]


async def test_a_failed_writer_is_raised_in_place_of_the_block_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writes, store = _Writes(), MemoryStore()
    failure = trioplay.StoreError("memory://: write_terminal_rows: disk full")
    store.fail_writes(failure)
    with pytest.raises(trioplay.StoreError) as info:
        await _admit_then_raise(writes.open(store), ValueError("a row failed"))
    assert info.value is failure
    assert not any("further error" in note for note in getattr(failure, "__notes__", []))
    assert writes.committed_keys == []


async def test_a_cancelled_writer_block_makes_one_last_flush(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writes, store = _Writes(), MemoryStore(write_delay=0.5)
    with trio.move_on_after(3):
        async with writes.open(store) as writer:
            await writer.admit(_row("1"))
            await trio.sleep_forever()
    # Cancelled at 3 s, before its 10 s flush deadline: committed by the final flush.
    assert trio.current_time() == 3.5
    assert writes.committed_keys == ["1"]


# -- rules of the room, read from its source ----------------------------------
def _room_modules() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text(encoding="utf-8")) for path in ROOM.glob("*.py")}


def test_every_event_of_the_map_room_goes_through_its_report() -> None:
    offenders = []
    for name, tree in _room_modules().items():
        if name == "_report.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and "_trace" in (node.module or ""):
                offenders.append(f"{name}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                named = node.args and isinstance(node.args[0], ast.Constant)
                if node.func.attr in ("emit", "_emit") and named:
                    offenders.append(f"{name}:{node.lineno} emits an event itself")
    assert offenders == []


def test_only_the_ledger_changes_a_maps_counts() -> None:
    counters = {"completed_count", "failed_count", "skipped_count", "duplicate_count"}
    offenders = []
    engine = ROOM.parent
    for path in sorted(engine.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.AugAssign):
                targets = [node.target]
            elif isinstance(node, ast.Assign):
                targets = list(node.targets)
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in counters:
                    where = f"{path.relative_to(engine)}:{node.lineno}"
                    # MapResult starts them at zero; the ledger alone moves them.
                    initial = isinstance(node.value, ast.Constant) and node.value.value == 0
                    if path.name != "_ledger.py" and not (path.name == "_result.py" and initial):
                        offenders.append(where)
    assert offenders == []
