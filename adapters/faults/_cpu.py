"""A CPU-bound resolver: code that blocks the event loop for a while.

Under the system clock, :func:`block_loop` spins for the given time without
yielding: nothing else in the process runs meanwhile. Under
``trio.testing.MockClock`` it jumps the virtual clock by that time instead,
in the same step: virtual time passes as if the work had taken it, and
nothing else runs meanwhile either. So a scenario can starve the loop for
minutes in microseconds, and the engine's loop-lag watchdog sees it the
same way in both cases.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import Collection

    from trioplay import Row, RowContext


def block_loop(seconds: float) -> None:
    """Hold the event loop for ``seconds`` (real or, under a MockClock, virtual)."""
    from trio.testing import MockClock  # here: trio.testing imports pytest

    clock = trio.lowlevel.current_clock()
    if isinstance(clock, MockClock):
        clock.jump(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class CpuHog:
    """A sync resolver that blocks the loop for ``seconds`` on rows whose ``field`` is in ``keys``.

    Other rows (every row, without ``keys``) return ``value`` at once.
    ``blocked`` counts the rows that blocked.
    """

    def __init__(
        self,
        seconds: float,
        *,
        field: str = "id",
        keys: Collection[str] | None = None,
        value: Any = "computed",
    ) -> None:
        self.seconds = seconds
        self.field = field
        self.keys = None if keys is None else frozenset(keys)
        self.value = value
        self.blocked = 0

    def __call__(self, row: Row, _rc: RowContext) -> Any:
        if self.keys is None or str(row.get(self.field)) in self.keys:
            self.blocked += 1
            block_loop(self.seconds)
        return self.value
