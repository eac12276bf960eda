"""A byte budget: admission of work by its estimated size.

Rows are admitted while their estimated bytes fit ``active_rows_budget_bytes``
(shared by every map of a runtime), so a map whose rows grow large (tools
returning megabytes) runs fewer rows at once instead of running out of memory.
Waiters are served in arrival order, so a large row is not starved by small ones.
Its methods are protected from ``KeyboardInterrupt``, as Trio's own primitives
are, so Ctrl-C never lands halfway through its accounting.
"""

from __future__ import annotations

from collections import deque

import trio


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, trio.Event]] = deque()

    @trio.lowlevel.enable_ki_protection
    def try_acquire(self, size: int) -> int | None:
        """Take ``size`` bytes now if they fit and nobody waits (no checkpoint)."""
        size = min(size, self.capacity)
        if not self._waiters and self.used + size <= self.capacity:
            self.used += size
            return size
        return None

    @trio.lowlevel.enable_ki_protection
    async def acquire(self, size: int) -> int:
        """Wait until ``size`` bytes fit; returns the amount taken (capped at capacity)."""
        taken = self.try_acquire(size)
        if taken is not None:
            return taken
        size = min(size, self.capacity)
        entry = (size, trio.Event())
        self._waiters.append(entry)
        try:
            await entry[1].wait()
        except BaseException:
            if entry[1].is_set():
                self.release(size)  # granted just as we were cancelled
            else:
                self._waiters.remove(entry)
                self._wake()
            raise
        return size

    @trio.lowlevel.enable_ki_protection
    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.capacity:
            size, event = self._waiters.popleft()
            self.used += size
            event.set()
