"""The map room's parts on their own."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trioplay._budget import ByteBudget
from trioplay._map._admission import RowAdmission
from trioplay._map._pages import Page, PageState
from trioplay._map._plan import Plan


class _Observer:
    """The one hook of the stall observer a page calls on commit."""

    def __init__(self) -> None:
        self.committed: list[int] = []

    def terminal_committed(self, token: int) -> None:
        self.committed.append(token)


def _page(offset: int = 0) -> Page:
    return Page(offset, Plan([]), _Observer(), None)  # type: ignore[arg-type]


# -- admission ----------------------------------------------------------------
async def test_admission_takes_a_slot_and_the_estimate_then_gives_both_back() -> None:
    limiter, budget = trio.CapacityLimiter(2), ByteBudget(1_000_000)
    admission = RowAdmission(limiter, budget)
    token = object()
    reserved = admission.try_admit(token)
    assert reserved == 64 * 1024  # before any row finished
    assert (limiter.borrowed_tokens, budget.used) == (1, reserved)
    admission.release(token, reserved)
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
    admission.release(first, 64 * 1024)
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
        admission.release(token, reserved)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.sleep(1)
        assert budget.try_acquire(80_000) == 80_000  # bytes taken while it waits for a slot
        admission.release(first, held)  # the slot is free, the bytes are not
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
