"""The garbage collector during a run: start-up frozen, young threshold raised, both undone."""

from __future__ import annotations

import gc
from typing import Any

import trio

import trioplay
from trioplay._collector import RUN_YOUNG_THRESHOLD, tuned_for_run


def settings() -> tuple[tuple[int, int, int], bool]:
    """The thresholds, and whether objects are frozen. Not the frozen count: a frozen object
    freed by its reference count (in another thread, say: pytest-xdist's worker has one)
    leaves the permanent generation, so the count can fall at any time."""
    return gc.get_threshold(), gc.get_freeze_count() > 0


async def test_a_run_tunes_the_collector_and_restores_it() -> None:
    seen: list[tuple[tuple[int, int, int], int]] = []

    @trioplay.play("gc-seen")
    async def look(ctx: trioplay.PlayContext, input: Any) -> None:
        seen.append(settings())

    before = settings()
    assert before[0][0] < RUN_YOUNG_THRESHOLD
    assert not before[1]
    with trio.fail_after(10):
        async with trioplay.open_runtime(store="memory://") as rt:
            await rt.run(look, {})
            assert settings() == before
            try:
                await rt.run(_failing, {})
            except ValueError:
                pass
    [(threshold, frozen)] = seen
    assert threshold == (RUN_YOUNG_THRESHOLD, *before[0][1:])
    assert frozen  # the objects alive at the run's start
    assert settings() == before  # after a failed run too


@trioplay.play("gc-fails")
async def _failing(ctx: trioplay.PlayContext, input: Any) -> None:
    assert gc.get_freeze_count() > 0
    raise ValueError("the play failed")


def test_overlapping_runs_restore_once_the_last_ends() -> None:
    before = settings()
    first = tuned_for_run()
    second = tuned_for_run()
    first.__enter__()
    tuned = settings()
    second.__enter__()
    first.__exit__(None, None, None)
    assert settings() == tuned  # the second run is still active
    second.__exit__(None, None, None)
    assert settings() == before


def test_a_programs_own_settings_are_kept() -> None:
    before = gc.get_threshold()
    gc.set_threshold(50_000, *before[1:])  # higher than a run's: left as it is
    try:
        with tuned_for_run():
            assert gc.get_threshold()[0] == 50_000
        gc.set_threshold(0, *before[1:])  # automatic collection off: left off
        with tuned_for_run():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
    gc.freeze()  # the program froze objects itself: not unfrozen by a run
    try:
        frozen = gc.get_freeze_count()
        with tuned_for_run():  # neither frozen again (the count would grow) nor unfrozen
            assert 0 < gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
