"""The terminal-row writer: one task per dataset run, fed by a memory channel.

Finished rows travel from the map's pages to the writer through a
``trio.open_memory_channel``. The writer owns the channel; each page takes
its own clone of the send side with :meth:`TerminalRowWriter.sender` and
closes it when its rows are done, and the writer ends on end-of-channel,
after committing the last rows it received. :meth:`TerminalRowWriter.admit`
sends through the writer's own send side (tests and single producers);
:meth:`TerminalRowWriter.close_input` closes it.

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
``writer_max_flush`` after its first row arrived, whichever comes first; only
then is each row *committed* (``on_commit``). One batch is written at a time
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
``unconfirmed`` counts them, and the map reports the count, since a rerun
finds them in the sheet or runs them again.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import trio

from .._errors import StoreError
from .._trace._records import WriterBatchCommitted, WriterBatchFailed, WriterBatchStarted
from ._stall import WriterDiagnostics

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    from .._cleanup import CleanupBudget
    from .._records import SheetRow
    from .._store import SheetStore
    from .._trace import Recorder


class TerminalRow:
    """A finished row on its way to the sheet, with what the map needs at commit."""

    __slots__ = ("data", "page", "row", "size", "token")

    def __init__(
        self, row: SheetRow, size: int, page: Any, token: int, data: dict[str, Any] | None
    ) -> None:
        self.row = row
        self.size = size
        self.page = page
        self.token = token
        self.data = data


class TerminalRowSender:
    """One producer's clone of the writer's send side; close it (or use ``with``) when done."""

    __slots__ = ("_channel", "_writer", "send")

    def __init__(
        self, writer: TerminalRowWriter, channel: trio.MemorySendChannel[TerminalRow]
    ) -> None:
        self._writer = writer
        self._channel = channel
        # ``await sender.send(row)`` hands a row to the writer and returns once
        # it is admitted; bound once here, so a send costs no extra frame.
        self.send: Callable[[TerminalRow], Awaitable[None]] = functools.partial(
            writer._send, channel
        )

    def close(self) -> None:
        self._channel.close()
        self._writer._poke()  # the writer may be waiting for the end of input

    def __enter__(self) -> TerminalRowSender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class TerminalRowWriter:
    def __init__(
        self,
        store: SheetStore,
        run_id: str,
        dataset: str,
        *,
        buffer_bytes: int,
        max_flush: float,
        cleanup: CleanupBudget,
        on_commit: Callable[[list[TerminalRow]], None],
        trace: Recorder | None = None,
    ) -> None:
        self._trace = trace
        self._store = store
        self._run_id = run_id
        self._dataset = dataset
        self._cap = buffer_bytes
        self._max_flush = max_flush
        self._cleanup = cleanup
        self._on_commit = on_commit
        self._input, self._output = trio.open_memory_channel[TerminalRow](math.inf)
        self._buffered_bytes = 0  # sent, not yet taken into a batch
        self._buffered_rows = 0
        self._first_at = 0.0  # when the oldest row not yet taken was sent
        self._wakeup = trio.Event()  # the buffer filled or a sender closed
        self._space = trio.Event()  # a batch left the buffer
        self._active: list[TerminalRow] = []
        self._active_started_at: float | None = None
        self._blocked = 0
        self.error: BaseException | None = None
        self.unconfirmed = 0  # rows of a failed write that may have committed
        self.finished = trio.Event()

    # -- producers ----------------------------------------------------------
    def sender(self) -> TerminalRowSender:
        """A clone of the send side for one producer (a page)."""
        return TerminalRowSender(self, self._input.clone())

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
                if self._buffered_bytes < self._cap and self._input_open():
                    # Wait out the flush deadline unless the buffer fills or
                    # the input ends first.
                    with trio.move_on_at(self._first_at + self._max_flush):
                        while self._buffered_bytes < self._cap and self._input_open():
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
        self._space.set()
        self._space = trio.Event()

    async def _write(self, batch: list[TerminalRow]) -> None:
        self._active = batch
        self._active_started_at = trio.current_time()
        if self._trace is not None:
            self._traced(WriterBatchStarted, batch, sum(item.size for item in batch))
        try:
            await self._store.write_terminal_rows(
                self._run_id, self._dataset, [item.row for item in batch]
            )
        except trio.Cancelled:
            raise
        except BaseException as exc:
            self.error = exc
            unknown = isinstance(exc, StoreError) and exc.outcome_unknown
            if unknown:
                self.unconfirmed = len(batch)
            self._active = []
            if self._trace is not None:
                self._traced(WriterBatchFailed, batch, type(exc).__name__, unknown)
            raise
        self._active = []
        self._active_started_at = None
        if self._trace is not None:
            self._traced(WriterBatchCommitted, batch)
        self._on_commit(batch)

    def _traced(self, kind: type[Any], batch: list[TerminalRow], *more: Any) -> None:
        assert self._trace is not None
        self._trace.add(kind, self._dataset, len(batch), *more)

    async def _final_flush(self, taken: list[TerminalRow]) -> None:
        # Rows whose write was cancelled may or may not have committed; writing
        # them again is safe (rows upsert by key) and only then are they reported.
        cancelled = self._active if self._active is not taken else []
        batch = cancelled + taken
        self._active = []
        if not batch or self.error is not None:
            return
        if self._trace is not None:
            self._traced(WriterBatchStarted, batch, sum(item.size for item in batch))
        with self._cleanup.shielded() as scope:
            try:
                await self._store.write_terminal_rows(
                    self._run_id, self._dataset, [item.row for item in batch]
                )
            except Exception as exc:
                unknown = isinstance(exc, StoreError) and exc.outcome_unknown
                self.unconfirmed = len(batch) if unknown else len(cancelled)
                if self._trace is not None:
                    self._traced(WriterBatchFailed, batch, type(exc).__name__, unknown)
                return
        if scope.cancelled_caught:
            self.unconfirmed = len(batch)
            if self._trace is not None:
                self._traced(WriterBatchFailed, batch, "Cancelled", True)
        else:
            if self._trace is not None:
                self._traced(WriterBatchCommitted, batch)
            self._on_commit(batch)
