"""The Trio internals trioplay leans on are still where engine/_trio_private.py looks.

If one of these fails after a Trio upgrade, its message names the private
name that moved and what trioplay needs it for: update engine/_trio_private.py
(the only module that touches Trio's private names).
"""

from __future__ import annotations

import types

import trio
import trio.testing

from trioplay import _trio_private
from trioplay._trio_private import problems, seeded_scheduler


def test_every_private_name_trioplay_uses_is_where_it_was() -> None:
    missing = problems()
    assert not missing, "\n".join(missing)


def test_a_moved_name_is_named_with_what_to_update() -> None:
    # A stand-in for a trio._core._run that lost everything trioplay reads.
    moved = problems(types.SimpleNamespace(_r=None))
    assert len(moved) == 2
    for message, name in zip(moved, ["_r", "_ALLOW_DETERMINISTIC_SCHEDULING"], strict=True):
        assert message.startswith(f"trio._core._run.{name} moved: trioplay needs ")
        assert message.endswith("update engine/_trio_private.py")
    assert problems(None) == moved


def _wake_order() -> list[int]:
    """The order in which 12 tasks woken by one event run."""
    order: list[int] = []

    async def main() -> None:
        event = trio.Event()

        async def task(number: int) -> None:
            await event.wait()
            order.append(number)

        async with trio.open_nursery() as nursery:
            for number in range(12):
                nursery.start_soon(task, number)
            await trio.testing.wait_all_tasks_blocked()
            event.set()

    trio.run(main)
    return order


def test_the_seeded_scheduler_repeats_the_order_of_woken_tasks() -> None:
    orders = {}
    for seed in range(4):
        with seeded_scheduler(seed):
            first = _wake_order()
        with seeded_scheduler(seed):
            again = _wake_order()
        assert first == again, (
            "seeding trio._core._run._r with _ALLOW_DETERMINISTIC_SCHEDULING on no longer"
            " repeats the scheduler's order; update engine/_trio_private.py"
        )
        orders[seed] = tuple(first)
    assert len(set(orders.values())) > 1, "the seed does not change the order at all"


def test_the_seeded_scheduler_puts_trio_back() -> None:
    run = _trio_private._core_run
    switch = run._ALLOW_DETERMINISTIC_SCHEDULING
    state = run._r.getstate()
    with seeded_scheduler(5):
        assert run._ALLOW_DETERMINISTIC_SCHEDULING is True
    assert run._ALLOW_DETERMINISTIC_SCHEDULING is switch
    assert run._r.getstate() == state
