"""The settler: writes the settlements of many calls in few store calls, then delivers them.

A call's owner hands its settlement over and parks. Once the write is done,
the settler delivers the call's outcome to its owner, followers and cohort:

- a completion written: the value;
- a completion (or failure) fenced off: :class:`LeaseLost` (another owner
  took the lease over; the receipt keeps that owner's result);
- a completion that could not be written: :class:`ReceiptNotRecorded`, and
  the persistence latch trips: no further provider call starts in this run,
  and the map and the run that see it fail with
  :class:`PersistenceLatchTripped`;
- a failure or a release: the call's own error.

So no caller has a value its receipt does not hold, and a row that used one
commits only on a recorded receipt.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from .._errors import LeaseLost, PersistenceLatchTripped, ReceiptNotRecorded
from .._records import Completion, Failure, Lease
from .._trace._records import CallSettled
from ._call import SETTLING, _Call

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._setup import DispatchSetup

log = logging.getLogger("trioplay")

Settlement = tuple[Completion | Failure | Lease, _Call, Any, BaseException | None]
"""What a call hands the settler: the write, the call, and the value or error to deliver."""


class _Settler:
    """Writes the settlements (complete, fail, release) of many calls in few store calls.

    Each call is delivered once its write is done; its governor slot is
    released then too (``release``), so the concurrency limit also bounds
    results waiting for their write.
    """

    def __init__(self, setup: DispatchSetup, deliver: Callable[..., None]) -> None:
        self._trace = setup.trace
        self._store = setup.store
        self._now = setup.wall_clock
        self._cleanup = setup.cleanup
        self._deliver = deliver
        self._release = setup.governor.release
        self._pending: list[_Entry] = []
        self._writing: list[_Entry] = []
        self._wakeup = trio.Event()
        # Entries ever handed over, and how many of them are written (or failed).
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

    def submit(self, entries: list[Settlement], borrower: _Call | None) -> None:
        """Queue ``entries`` for the next write; the governor slot of ``borrower``
        (the executed call, if it took one) is released once all are written."""
        # One call (the common case) needs no group: its borrower is released with it.
        group = _Group(len(entries), borrower) if len(entries) > 1 else borrower
        pending = self._pending
        for item, call, value, error in entries:  # a loop: a comprehension is a frame
            pending.append((item, call, value, error, group))
        self._submitted += len(entries)
        self._wakeup.set()

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
            # Settlements of paid calls are worth one shielded try within the
            # cleanup budget; a write cut short by the cancellation is tried
            # again (a settlement is fenced by its lease, so writing it twice
            # is harmless).
            batch = self._writing + self._pending
            self._writing, self._pending = [], []
            with self._cleanup.shielded():
                await self._write(batch)
            # What is left was not written, and nothing more will be: fail its
            # callers (no value without its receipt), release whoever waits.
            for entry in batch:
                self._settled(entry, None)
            self._advance(self._submitted - self._written)
            raise

    async def write_late(self) -> None:
        """Write what was handed over after :meth:`run` ended (shielded, within the budget).

        A call whose tool returned without a checkpoint as its run was being
        cancelled settles after the settler's last write; its result was paid
        for. The run calls this once no task of its dispatcher is left.
        """
        batch, self._pending = self._pending, []
        if batch:
            with self._cleanup.shielded():
                await self._write(batch)
        for entry in batch:  # not written (in time): as in run's cancelled path
            self._settled(entry, None)
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
        lists = list(kinds.values())
        for index, (write, entries) in enumerate(zip(writes, lists, strict=True)):
            if not entries:
                continue
            outcomes: list[bool | BaseException]
            try:
                outcomes = list(await write([entry[0] for entry in entries], now=self._now()))
            except Exception as exc:
                outcomes = [exc] * len(entries)
            batch[:] = [entry for later in lists[index + 1 :] for entry in later]
            for entry, outcome in zip(entries, outcomes, strict=True):
                self._settled(entry, outcome)

    def _settled(self, entry: _Entry, outcome: bool | BaseException | None) -> None:
        """Deliver a call whose settlement was written (``True``), fenced off
        (``False``), failed (an error) or never written (``None``: the run ended)."""
        item, call, value, error, group = entry
        if isinstance(item, Completion):
            if outcome is None or isinstance(outcome, BaseException):
                value, error = None, self._unrecorded(call, outcome)
            elif not outcome:
                value, error = None, _taken_over(call)
        elif isinstance(item, Failure):
            if isinstance(outcome, BaseException):
                log.warning(
                    "%s %r: recording its failure also failed: %s",
                    call.operation,
                    call.name,
                    outcome,
                )
            elif outcome is not None and not outcome:
                error = _taken_over(call)
        if self._trace is not None:
            self._trace.add(CallSettled, call.key, _settled_as(item, outcome))
        if call.state is SETTLING:  # not if its owner left meanwhile (a native batch)
            self._deliver(call, value, error)
        if isinstance(group, _Group):
            group.remaining -= 1
            if group.remaining == 0 and group.borrower is not None:
                self._release(group.borrower.gate, group.borrower)
        elif group is not None:
            self._release(group.gate, group)

    def _unrecorded(self, call: _Call, outcome: BaseException | None) -> ReceiptNotRecorded:
        """The error of a call whose result was not recorded (a failed write trips the latch)."""
        if outcome is None:
            reason, latched = "the run ended before it was written", ""
        else:
            reason, latched = str(outcome), "; no further provider call starts in this run"
            if self.latch is None:
                self.latch = outcome
            log.error(
                "%s %r succeeded but its receipt could not be recorded (%s); "
                "no further provider call will start in this run",
                call.operation,
                call.name,
                outcome,
            )
        error = ReceiptNotRecorded(
            f"{call.operation} {call.name!r} succeeded, but its receipt {call.key[:16]} could "
            f"not be recorded ({reason}): the call fails rather than return a value its "
            f"receipt does not hold{latched}",
            key=call.key,
        )
        error.__cause__ = outcome
        return error


def _settled_as(item: Completion | Failure | Lease, outcome: bool | BaseException | None) -> str:
    """What ``call.settled`` says of a settlement and its write's outcome."""
    if isinstance(item, Lease):
        return "released"
    if outcome is True:
        return "completed" if isinstance(item, Completion) else "failed"
    return "lease_lost" if outcome is False else "not_recorded"


def _taken_over(call: _Call) -> LeaseLost:
    """The error of a call whose fenced write found its lease taken over by another owner."""
    log.warning(
        "%s %r: its lease was taken over before its result was recorded; "
        "the caller gets LeaseLost and the receipt keeps the new owner's result",
        call.operation,
        call.name,
    )
    return LeaseLost(
        call.key,
        f"{call.operation} {call.name!r}: the lease of receipt {call.key[:16]} was taken over "
        "by another owner before this result was recorded; the receipt keeps that owner's result",
    )


class _Group:
    """The settlements of one execution, which share one governor slot (that of ``borrower``)."""

    __slots__ = ("borrower", "remaining")

    def __init__(self, remaining: int, borrower: _Call | None) -> None:
        self.remaining = remaining
        self.borrower = borrower


# The last field: the group of the entry's execution, or for an execution of
# one call, the call whose governor slot its write releases (None: no slot).
_Entry = tuple[
    Completion | Failure | Lease, _Call, Any, BaseException | None, "_Group | _Call | None"
]
