"""The settler: writes the settlements of many calls in few store calls, and the persistence latch.

If recording a completion fails after the provider succeeded, the latch
trips: no further provider call starts in this run, and the map and the run
that see it fail with :class:`PersistenceLatchTripped`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .._errors import PersistenceLatchTripped
from .._records import Completion, Failure, Lease
from ._call import _Call

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._governor import ProviderGate
    from .._store import ReceiptStore

log = logging.getLogger("trioplay")


class _Settler:
    """Writes the settlements (complete, fail, release) of many calls in few store calls.

    A call's owner hands its settlement over and goes on: its result is
    delivered at once, while the governor slot and the call's in-flight entry
    stay taken until the write is done (``forget``, then the slot's
    ``release``). So the concurrency limit still bounds results waiting for
    their write, and the owner's task costs no second scheduler round trip.
    """

    def __init__(
        self,
        store: ReceiptStore,
        now: Callable[[], float],
        cleanup_timeout: float,
        forget: Callable[[_Call], None],
        release: Callable[[ProviderGate | None, object], None],
    ) -> None:
        self._store = store
        self._now = now
        self._cleanup_timeout = cleanup_timeout
        self._forget = forget
        self._release = release
        self._pending: list[_Entry] = []
        self._writing: list[_Entry] = []
        self._wakeup = trio.Event()
        # Entries ever handed over, and how many of the first ones are written:
        # batches are written in order, so "written >= n" covers the first n.
        self._submitted = 0
        self._written = 0
        self._progress = trio.Event()  # set (and replaced) each time a batch is written
        self.latch: BaseException | None = None  # why the persistence latch tripped, if it did

    def latch_error(self, subject: str) -> PersistenceLatchTripped:
        """The error ``subject`` (a call, a map, a run) fails with once the latch tripped.

        The one place that reads the latch for an error: the executor, the
        map runner and the run all fail with this message.
        """
        assert self.latch is not None
        error = PersistenceLatchTripped(
            f"{subject}: an earlier completion could not be recorded ({self.latch}); "
            "no further provider call starts in this run"
        )
        error.__cause__ = self.latch
        return error

    def submit(
        self, entries: list[tuple[Completion | Failure | Lease, _Call]], borrower: _Call | None
    ) -> None:
        """Queue ``entries`` for the next write; the governor slot of ``borrower``
        (the executed call, if it took one) is released once all are written."""
        group = _Group(len(entries), borrower)
        self._pending += [(item, call, group) for item, call in entries]
        self._submitted += len(entries)
        self._wakeup.set()

    async def written_up_to_now(self) -> None:
        """Wait until every settlement handed over before this call is written (or failed)."""
        mark = self._submitted
        while self._written < mark:
            await self._progress.wait()

    async def drain(self) -> None:
        """Wait until no settlement is left, including any handed over meanwhile."""
        while self._written < self._submitted:
            await self._progress.wait()

    def _advance(self, count: int) -> None:
        self._written += count
        self._progress.set()
        self._progress = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                self._writing, self._pending = self._pending, []
                count = len(self._writing)
                await self._write(self._writing)
                self._advance(count)
        except trio.Cancelled:
            # Settlements of paid calls are worth one bounded, shielded try;
            # a write cut short by the cancellation is tried again (a
            # settlement is fenced by its lease, so writing it twice is harmless).
            batch = self._writing + self._pending
            self._writing, self._pending = [], []
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + self._cleanup_timeout
                await self._write(batch)
            # Written or not, nothing more will be: release whoever waits on them.
            self._advance(self._submitted - self._written)
            raise

    async def write_late(self, deadline: float) -> None:
        """Write what was handed over after :meth:`run` ended (shielded, until ``deadline``).

        A call whose tool returned without a checkpoint as its run was being
        cancelled settles after the settler's last write; its result was paid
        for. The run calls this once no task of its dispatcher is left.
        """
        batch, self._pending = self._pending, []
        if batch:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = deadline
                await self._write(batch)
        self._advance(self._submitted - self._written)

    async def _write(self, batch: list[_Entry]) -> None:
        """Write ``batch``; entries leave it as they settle (a cancelled write leaves the rest)."""
        kinds: dict[type, list[_Entry]] = {Completion: [], Failure: [], Lease: []}
        for entry in batch:
            kinds[type(entry[0])].append(entry)
        store = self._store
        writes: tuple[Callable[..., Awaitable[list[bool]]], ...] = (
            store.complete_many,
            store.fail_many,
            store.release_many,
        )
        for write, entries in zip(writes, kinds.values(), strict=True):
            if not entries:
                continue
            outcomes: list[bool | BaseException]
            try:
                outcomes = list(await write([entry[0] for entry in entries], now=self._now()))
            except Exception as exc:
                outcomes = [exc] * len(entries)
            written = {id(entry) for entry in entries}
            batch[:] = [entry for entry in batch if id(entry) not in written]
            for (item, call, group), outcome in zip(entries, outcomes, strict=True):
                self._settled(call, item, outcome)
                group.remaining -= 1
                if group.remaining == 0 and group.borrower is not None:
                    self._release(group.borrower.gate, group.borrower)

    def _settled(
        self, call: _Call, item: Completion | Failure | Lease, outcome: bool | BaseException
    ) -> None:
        """A settlement was written (``True``), fenced off (``False``) or failed (an error)."""
        self._forget(call)
        if isinstance(item, Completion):
            if isinstance(outcome, BaseException):
                if self.latch is None:
                    self.latch = outcome
                log.error(
                    "%s %r succeeded but its receipt could not be recorded (%s); "
                    "no further provider call will start in this run",
                    call.operation,
                    call.name,
                    outcome,
                )
            elif not outcome:
                log.warning(
                    "%s %r: its lease was taken over before its result was recorded; "
                    "the receipt keeps the new owner's result",
                    call.operation,
                    call.name,
                )
        elif isinstance(item, Failure) and isinstance(outcome, BaseException):
            log.warning(
                "%s %r: recording its failure also failed: %s", call.operation, call.name, outcome
            )


class _Group:
    """The settlements of one execution, which share one governor slot (that of ``borrower``)."""

    __slots__ = ("borrower", "remaining")

    def __init__(self, remaining: int, borrower: _Call | None) -> None:
        self.remaining = remaining
        self.borrower = borrower


_Entry = tuple[Completion | Failure | Lease, _Call, _Group]
