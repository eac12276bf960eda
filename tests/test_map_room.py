"""The map room's parts on their own."""

from __future__ import annotations

import trio
import trio.testing

from trioplay._budget import ByteBudget
from trioplay._map._admission import RowAdmission


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
