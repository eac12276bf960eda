"""Row admission: a row slot and the row's estimated bytes, taken before a row starts.

Both are the runtime's, shared by every map it runs: the row limiter
(``max_concurrent_rows``) and the byte budget (``active_rows_budget_bytes``).
A row takes its slot first, then its bytes, and gives both back when the
terminal-row writer admits it. What a row will cost is estimated per map,
from the sizes of its rows finished so far.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._budget import ByteBudget


class RowAdmission:
    """Admits a map's rows by slot and by bytes; see the module docstring.

    A row's reservation is ``_OVERHEAD`` times the running mean size of the
    last rows as JSON (the JSON text, the parsed values and the receipt
    payload live at once); before any row finished it is ``_INITIAL``.

    The borrower of a slot is a token the caller makes per row, as
    :class:`trio.CapacityLimiter` wants. :meth:`try_admit` is the path
    without a checkpoint, :meth:`admit` the one that waits for what it
    could not take::

        reserved = admission.try_admit(token)
        if not reserved:
            reserved = await admission.admit(token, has_slot=reserved == 0)
    """

    __slots__ = ("_budget", "_count", "_limiter", "_mean", "release_bytes", "release_slot")

    _OVERHEAD = 3
    _WINDOW = 64
    _INITIAL = 64 * 1024

    def __init__(self, limiter: trio.CapacityLimiter, budget: ByteBudget) -> None:
        self._limiter = limiter
        self._budget = budget
        self._mean = 0.0
        self._count = 0
        # Giving a row's admission back, as ``release_slot(token)`` and
        # ``release_bytes(reserved)``: the limiter's and the budget's own
        # methods, bound once, so a row's release costs no frame of ours.
        self.release_slot: Callable[[object], None] = limiter.release_on_behalf_of
        self.release_bytes: Callable[[int], None] = budget.release

    def try_admit(self, token: object) -> int | None:
        """Admit a row now if it can be, without a checkpoint; returns the bytes taken.

        ``None``: no slot is free, nothing is held. ``0``: the row holds its
        slot, but its bytes are not free. Either way :meth:`admit` then
        waits for what is missing.
        """
        try:
            self._limiter.acquire_on_behalf_of_nowait(token)
        except trio.WouldBlock:
            return None
        # estimate(), inline: this runs once per row.
        if self._count == 0:
            estimate = self._INITIAL
        else:
            estimate = max(1024, int(self._mean * self._OVERHEAD))
        reserved = self._budget.try_acquire(estimate)
        return 0 if reserved is None else reserved  # a reservation is never 0 bytes

    async def admit(self, token: object, *, has_slot: bool = False) -> int:
        """Wait for a row slot (unless it ``has_slot``), then for the row's bytes.

        Returns the bytes taken. If it is cancelled, it gives back the slot.
        """
        limiter = self._limiter
        if not has_slot:
            await limiter.acquire_on_behalf_of(token)
        try:
            estimate = self.estimate()
            reserved = self._budget.try_acquire(estimate)
            if reserved is None:
                reserved = await self._budget.acquire(estimate)
        except BaseException:
            limiter.release_on_behalf_of(token)
            raise
        return reserved

    async def wait_for_slot(self) -> None:
        """Wait until a row slot is free, holding none.

        The page loop waits here before it claims a page, so that a process
        claims a page only when a row of it can start: a page it could not
        start yet is left to a peer that can (docs/scale-out.md).
        """
        token = object()
        await self._limiter.acquire_on_behalf_of(token)
        self._limiter.release_on_behalf_of(token)

    def lend_slot(self) -> None:
        """A row lingers for an outside event: one more row may run meanwhile."""
        self._limiter.total_tokens += 1

    def take_back_slot(self) -> None:
        """The lingering row goes on: the slot it lent is taken back (rows then
        drain down to the limit as they finish; nothing waits here)."""
        self._limiter.total_tokens -= 1

    def observe(self, size: int) -> None:
        """A row finished at ``size`` bytes (its JSON, its key and some overhead)."""
        self._count += 1
        weight = 1 / min(self._count, self._WINDOW)
        self._mean += (size - self._mean) * weight

    def estimate(self) -> int:
        """What the next row is expected to hold in memory."""
        if self._count == 0:
            return self._INITIAL
        return max(1024, int(self._mean * self._OVERHEAD))
