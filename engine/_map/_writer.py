"""The terminal-row writer: one task per dataset run, fed by a memory channel.

Finished rows travel from the map's pages to the writer through a
``trio.open_memory_channel``. The writer owns the channel; each page takes
its own clone of the send side with :meth:`TerminalRowWriter.sender` and
closes it when its rows are done, and the writer ends on end-of-channel,
after committing the last rows it received. :meth:`TerminalRowWriter.admit`
sends through the writer's own send side (tests and single producers);
:meth:`TerminalRowWriter.close_input` closes it. A map opens its writer with
:class:`open_terminal_writer`, which runs the writer's task in a nursery of
its own and decides, as the block is left, whether to wait for the writer's
last commits or to cancel it.

Admission is by bytes, not by count: the channel's count buffer is unbounded
and a sender waits while the rows sent but not yet taken into a batch hold
``writer_buffer_bytes`` or more (backpressure). A row is *admitted* when its
send returns. Sends that do not wait cost no trip through the scheduler
(``send_nowait`` after the byte check; a plain ``send`` checkpoints once per
row), and the writer is woken once per batch, not once per row: it waits
for the first row of a batch in ``receive()``, then for the buffer to fill,
the flush deadline or the end of input, and takes the whole batch with
``receive_nowait``.

A batch is written in one store transaction when the buffer is full or
``writer_max_flush`` after its first row arrived, whichever comes first, or
at once when the map says no more rows are coming (:meth:`TerminalRowWriter.flush_now`:
its source is read and no row of it is running); only
then is each row *committed* (``commits.committed``). The write is fenced: each row
goes with its page's lease, and the store writes it only while that lease
is the page's own and never replaces a completed row with a failed one;
the rows it refused go to ``commits.refused`` with the store's answer
(``fenced``: the page passed to another process; ``kept``: a completed row
stays). One batch is written at a time
while the next one fills, so at most twice the buffer is in memory. The
writer need not wait for receipts: a row reaches it only after its calls
returned, and a call returns a value only once its receipt is recorded.

A failed write latches: the writer raises the store's error (which fails the
map), and any later send raises it at once. On cancellation the writer makes
one last shielded attempt, within the run's cleanup budget (what is left of
``cleanup_timeout`` since the run began to unwind), to commit what it had
admitted. Rows of a write that may or may not have taken effect (its
commit was sent but never confirmed, it was cancelled mid-flight and the
retry failed, or the retry ran out of time) are neither committed nor lost:
``commits.unconfirmed_rows`` is told their count, and the map reports it, since a
rerun finds them in the sheet or runs them again.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from .._errors import PersistenceLatchTripped, StoreError
from .._groups import open_nursery, start
from ._stall import WriterDiagnostics

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    from .._cleanup import CleanupBudget
    from .._limits import Limits
    from .._records import PageLease, SheetRow, SheetWrite
    from .._store import SheetStore
    from ._pages import Page
    from ._report import MapReport


# One per row: no weakref slot, so it stays the size of the hand-written class it replaced.
@attrs.define(eq=False, weakref_slot=False)
class TerminalRow:
    """A finished row on its way to the sheet, with what the map needs at commit."""

    row: SheetRow
    size: int
    page: Page
    token: int
    data: dict[str, Any] | None


class TerminalRowSender:
    """One producer's clone of the writer's send side; close it (or use ``with``) when done.

    Made by :meth:`TerminalRowWriter.sender`, which hands it the two things
    it needs of the writer: its send (``send(channel, row)``) and its
    wake-up (``closed()``: the writer may be waiting for the end of input).
    """

    __slots__ = ("_channel", "_closed", "send")

    def __init__(
        self,
        channel: trio.MemorySendChannel[TerminalRow],
        send: Callable[[trio.MemorySendChannel[TerminalRow], TerminalRow], Awaitable[None]],
        closed: Callable[[], None],
    ) -> None:
        self._channel = channel
        self._closed = closed
        # ``await sender.send(row)`` hands a row to the writer and returns once
        # it is admitted; bound once here, so a send costs no extra frame.
        self.send: Callable[[TerminalRow], Awaitable[None]] = functools.partial(send, channel)

    def close(self) -> None:
        self._channel.close()
        self._closed()

    def __enter__(self) -> TerminalRowSender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Commits(Protocol):
    """Who the writer tells how each batch ended: a map's :class:`CommitLedger`."""

    def committed(self, batch: list[TerminalRow]) -> None:
        """These rows are in the sheet."""

    def refused(self, items: list[tuple[TerminalRow, SheetWrite]]) -> None:
        """The store wrote none of these rows, for the reason given with each."""

    def unconfirmed_rows(self, count: int) -> None:
        """``count`` rows went with a write whose outcome is unknown."""


class TerminalRowWriter:
    """The writer of one map: see the module docstring; run by :class:`open_terminal_writer`.

    Rows are written to ``dataset`` of ``run_id`` in ``store``, in batches of
    up to ``limits.writer_buffer_bytes`` flushed ``limits.writer_max_flush``
    after their first row; ``commits`` is told how each batch ended.
    """

    def __init__(
        self,
        store: SheetStore,
        run_id: str,
        dataset: str,
        limits: Limits,
        *,
        cleanup: CleanupBudget,
        commits: Commits,
        report: MapReport | None = None,
    ) -> None:
        self._write_rows = functools.partial(store.write_terminal_rows, run_id, dataset)
        self._cap = limits.writer_buffer_bytes
        self._max_flush = limits.writer_max_flush
        self._cleanup = cleanup
        self._commits = commits
        self._report = report
        self._input, self._output = trio.open_memory_channel[TerminalRow](math.inf)
        self._buffered_bytes = 0  # sent, not yet taken into a batch
        self._buffered_rows = 0
        self._first_at = 0.0  # when the oldest row not yet taken was sent
        self._wakeup = trio.Event()  # the buffer filled, a sender closed, or flush_now
        self._now = False  # flush_now: write what is buffered without waiting
        self._space = trio.Event()  # a batch left the buffer
        self._active: list[TerminalRow] = []
        self._active_started_at: float | None = None
        self._blocked = 0
        self.error: BaseException | None = None
        self.finished = trio.Event()

    # -- producers ----------------------------------------------------------
    def sender(self) -> TerminalRowSender:
        """A clone of the send side for one producer (a page)."""
        return TerminalRowSender(self._input.clone(), self._send, self._poke)

    async def admit(self, item: TerminalRow) -> None:
        """Send ``item`` through the writer's own send side."""
        await self._send(self._input, item)

    def close_input(self) -> None:
        """Close the writer's own send side; the writer ends once every clone is closed too."""
        self._input.close()
        self._poke()

    async def _send(self, channel: trio.MemorySendChannel[TerminalRow], item: TerminalRow) -> None:
        if self.error is not None:
            raise self.error
        if self._buffered_bytes >= self._cap or self._blocked:
            self._blocked += 1
            try:
                while self._buffered_bytes >= self._cap:
                    await self._space.wait()
                    if self.error is not None:
                        raise self.error
            finally:
                self._blocked -= 1
        try:
            channel.send_nowait(item)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise RuntimeError("the terminal-row writer has stopped") from None
        if self._buffered_bytes == 0:
            self._first_at = trio.current_time()
        self._buffered_bytes += item.size
        self._buffered_rows += 1
        if self._buffered_bytes >= self._cap:
            self._poke()

    def _poke(self) -> None:
        self._wakeup.set()

    def flush_now(self) -> None:
        """No more rows are coming soon: write those buffered without waiting out the deadline.

        The map calls it when its source is read and none of its rows is
        running. Waiting longer could only delay its last commits, and
        every process of a shared run pays that wait at its end.
        """
        if self._buffered_rows:
            self._now = True
            self._poke()

    def diagnostics(self) -> WriterDiagnostics:
        return WriterDiagnostics(
            active_rows=len(self._active),
            active_kind="terminal" if self._active else None,
            active_started_at=self._active_started_at,
            queued_terminal_rows=self._buffered_rows,
            blocked_terminal_rows=self._blocked,
        )

    # -- the task -----------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._output:
                task_status.started()
                await self._flush_loop()
        finally:
            self._space.set()  # wake blocked producers: they see the error or the end
            self.finished.set()

    def _input_open(self) -> bool:
        return self._output.statistics().open_send_channels > 0

    async def _flush_loop(self) -> None:
        batch: list[TerminalRow] = []
        try:
            while True:
                try:
                    batch.append(await self._output.receive())
                except trio.EndOfChannel:
                    return
                if self._buffered_bytes < self._cap and self._input_open() and not self._now:
                    # Wait out the flush deadline unless the buffer fills,
                    # the input ends or nothing more is coming first.
                    with trio.move_on_at(self._first_at + self._max_flush):
                        while (
                            self._buffered_bytes < self._cap
                            and self._input_open()
                            and not self._now
                        ):
                            self._wakeup = trio.Event()
                            await self._wakeup.wait()
                self._take(batch)
                await self._write(batch)
                batch = []
        except trio.Cancelled:
            self._take(batch)
            await self._final_flush(batch)
            raise

    def _take(self, batch: list[TerminalRow]) -> None:
        """Move every row sent so far into ``batch``, freeing the buffer for the next one."""
        while True:
            try:
                batch.append(self._output.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self._buffered_bytes = 0
        self._buffered_rows = 0
        self._now = False
        self._space.set()
        self._space = trio.Event()

    async def _write(self, batch: list[TerminalRow]) -> None:
        self._active = batch
        self._active_started_at = trio.current_time()
        report = self._report
        if report is not None:
            report.batch_started(batch)
        try:
            rows, leases = _rows_and_leases(batch)
            answers = await self._write_rows(rows, leases=leases)
        except trio.Cancelled:
            raise
        except BaseException as exc:
            self.error = exc
            unknown = isinstance(exc, StoreError) and exc.outcome_unknown
            if unknown:
                self._commits.unconfirmed_rows(len(batch))
            self._active = []
            if report is not None:
                report.batch_failed(batch, type(exc).__name__, unknown)
            raise
        self._active = []
        self._active_started_at = None
        if report is not None:
            report.batch_committed(batch)
        self._committed(batch, answers)

    def _committed(self, batch: list[TerminalRow], answers: list[SheetWrite]) -> None:
        """Hand on the rows written and the rows refused to ``commits``."""
        if answers.count("written") == len(batch):
            self._commits.committed(batch)
            return
        written: list[TerminalRow] = []
        refused: list[tuple[TerminalRow, SheetWrite]] = []
        for item, answer in zip(batch, answers, strict=True):
            if answer == "written":
                written.append(item)
            else:
                refused.append((item, answer))
        if written:
            self._commits.committed(written)
        self._commits.refused(refused)

    async def _final_flush(self, taken: list[TerminalRow]) -> None:
        # Rows whose write was cancelled may or may not have committed; writing
        # them again is safe (rows upsert by key) and only then are they reported.
        cancelled = self._active if self._active is not taken else []
        batch = cancelled + taken
        self._active = []
        if not batch or self.error is not None:
            return
        report = self._report
        if report is not None:
            report.batch_started(batch)
        answers: list[SheetWrite] = []
        with self._cleanup.shielded() as scope:
            try:
                rows, leases = _rows_and_leases(batch)
                answers = await self._write_rows(rows, leases=leases)
            except Exception as exc:
                unknown = isinstance(exc, StoreError) and exc.outcome_unknown
                self._commits.unconfirmed_rows(len(batch) if unknown else len(cancelled))
                if report is not None:
                    report.batch_failed(batch, type(exc).__name__, unknown)
                return
        if scope.cancelled_caught:
            self._commits.unconfirmed_rows(len(batch))
            if report is not None:
                report.batch_failed(batch, "Cancelled", True)
        else:
            if report is not None:
                report.batch_committed(batch)
            self._committed(batch, answers)


def _rows_and_leases(
    batch: list[TerminalRow],
) -> tuple[list[SheetRow], list[PageLease | None]]:
    """The sheet rows of a batch and, row by row, the page lease each is written under."""
    return [item.row for item in batch], [item.page.lease for item in batch]


class open_terminal_writer:
    """``async with open_terminal_writer(TerminalRowWriter(...)) as writer:`` it runs.

    The writer's task runs in a nursery this context manager owns, started
    with ``nursery.start`` before the block begins, so no row is sent to a
    writer not yet ready. Leaving the block closes the writer's own send side
    (each page closes its clone itself), and then:

    - normally, or with an error that is not the store's: waits until the
      writer has committed every row it was given and ended (those rows
      count; the block's error is raised after);
    - with a :class:`StoreError` or :class:`PersistenceLatchTripped`:
      cancels the writer at once, since waiting for each write it still
      owes could take a store deadline apiece; the writer makes one bounded
      try (its final flush) at what it admitted;
    - with a ``BaseException`` (cancellation, Ctrl-C): cancels the writer
      the same way.

    A failure of the writer itself is raised in place of the block's error.
    A class rather than an ``asynccontextmanager``, with ``__aenter__`` and
    ``__aexit__`` protected from ``KeyboardInterrupt``, for the reason given
    in :class:`~trioplay._groups.open_nursery`.
    """

    __slots__ = ("_nursery", "_scope", "writer")

    def __init__(self, writer: TerminalRowWriter) -> None:
        self.writer = writer
        self._nursery = open_nursery()
        self._scope: trio.CancelScope | None = None

    @trio.lowlevel.enable_ki_protection
    async def __aenter__(self) -> TerminalRowWriter:
        nursery = await self._nursery.__aenter__()
        self._scope = nursery.cancel_scope
        try:
            await start(nursery, self.writer.run)
        except BaseException as exc:
            await self._nursery.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self.writer

    @trio.lowlevel.enable_ki_protection
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        writer = self.writer
        writer.close_input()
        if exc is not None and not isinstance(exc, Exception):
            # Cancelled or Ctrl-C: the nursery cancels the writer as the error passes.
            return await self._nursery.__aexit__(exc_type, exc, traceback)
        if isinstance(exc, (StoreError, PersistenceLatchTripped)):
            assert self._scope is not None
            self._scope.cancel()
        else:
            try:
                await writer.finished.wait()
            except BaseException as stopped:
                # The writer failed (its nursery was cancelled), or we were cancelled.
                if await self._nursery.__aexit__(type(stopped), stopped, stopped.__traceback__):
                    return False
                raise
        # The writer's own failure, if any, is raised here, in place of ``exc``.
        await self._nursery.__aexit__(None, None, None)
        return False
