"""Lanes: calls coalesced into batches, each claimed in one store call.

A tool's lane (:class:`_Lane`) batches by **group commit** by default
(``tool_batch_window`` 0): an idle lane claims a call at once, in its own
task, and the calls made while that claim is out are the next batch. With a
positive ``tool_batch_window`` (the reference runtime's way) calls coalesce
for that window from the first call (it never resets) and each batch is
handed to the claimer's ``flush``, which claims it in a task of its own. Either way a
batch holds at most ``tool_batch_max`` calls / ``tool_batch_max_bytes`` of
input. The run's lane of direct effects, steps and fetches
(:class:`_EffectLane`), always uses group commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import trio

from ._call import QUEUED

if TYPE_CHECKING:
    from .._limits import Limits
    from .._tools import ToolSpec
    from ._call import _Call


class Claims(Protocol):
    """Where a lane's batches go: the run's :class:`~trioplay._receipts._claims.Claimer`."""

    def flush(self, calls: list[_Call], spec: ToolSpec) -> None:
        """Claim ``calls`` in a task of their own."""

    async def claim(self, calls: list[_Call], spec: ToolSpec | None = None) -> None:
        """Claim ``calls`` and return when that is done."""


class _Lane:
    """The batching of one tool's calls.

    Each batch goes to ``claims``: with ``claim`` (group commit: the lane
    waits for it) or ``flush`` (a window: it does not).
    """

    def __init__(self, claims: Claims, spec: ToolSpec, limits: Limits) -> None:
        self._claims = claims
        self._spec = spec
        self._window = limits.tool_batch_window
        self._max = limits.tool_batch_max
        self._max_bytes = limits.tool_batch_max_bytes
        self._queue: list[_Call] = []
        self._bytes = 0
        self._first_at = 0.0
        self._wakeup = trio.Event()

    def submit(self, call: _Call) -> None:
        if not self._queue:
            self._first_at = trio.current_time()
            self._wakeup.set()
        self._queue.append(call)
        self._bytes += call.size
        if len(self._queue) >= self._max or self._bytes >= self._max_bytes:  # _full(), inline
            self._wakeup.set()

    def _full(self) -> bool:
        return len(self._queue) >= self._max or self._bytes >= self._max_bytes

    def _take(self) -> list[_Call]:
        """The next batch: at most ``tool_batch_max`` calls and (but for one) the byte cap."""
        taken = 0
        size = 0
        for call in self._queue:
            if taken >= self._max or (taken and size + call.size > self._max_bytes):
                break
            taken += 1
            size += call.size
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        self._bytes -= size
        if self._queue:
            # The rest waits a window of its own, starting now.
            self._first_at = trio.current_time()
        return batch

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            if not self._queue:
                continue
            if self._window <= 0:
                # Group commit: claim now, in this task; what arrives meanwhile
                # is the next batch.
                await self._claims.claim(self._take(), self._spec)
            else:
                if not self._full():
                    with trio.move_on_at(self._first_at + self._window):
                        while not self._full():
                            await self._wakeup.wait()
                            self._wakeup = trio.Event()
                self._claims.flush(self._take(), self._spec)
            if self._queue:
                self._wakeup.set()


class _EffectLane:
    """Direct effects (steps and fetches), claimed in bulk by group commit.

    A call made while no claim of the lane is out is claimed at once, alone
    (no window: a lone step waits for nothing); the calls made while a claim
    is out wait for it and leave together as the next batch (at most
    ``tool_batch_max``), claimed in this lane's task.
    """

    def __init__(self, claims: Claims, limits: Limits) -> None:
        self._claim = claims.claim
        self._max = limits.tool_batch_max
        self._queue: list[_Call] = []
        self._wakeup = trio.Event()

    def submit(self, call: _Call) -> None:
        self._queue.append(call)
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            while self._queue:
                # Calls whose owners left while queued need no claim.
                queue = [call for call in self._queue if call.state is QUEUED]
                batch, self._queue = queue[: self._max], queue[self._max :]
                if batch:
                    await self._claim(batch)
