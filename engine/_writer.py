"""The terminal-row writer: one task per dataset run.

A row is *admitted* when it enters the writer's buffer. While the buffer holds
``writer_buffer_bytes`` or more, :meth:`TerminalRowWriter.admit` waits
(backpressure); otherwise it appends at once, without a trip through the
scheduler (DESIGN §3.2 says "memory channel": a channel costs two task
switches per row, which the map's hot path cannot afford; admission means the
same thing here). A batch is written in one store transaction when the buffer
is full or ``writer_max_flush`` after its first row arrived, whichever comes
first; only then is each row *committed* (``on_commit``). One batch is
written at a time while the next one fills, so at most twice the buffer is in
memory. Before each batch the writer awaits ``before_write``: the map passes
a wait for the receipts of every call its rows used, so a row never commits
before them.

A failed write latches: the writer raises the store's error (which fails the
map), and any later :meth:`admit` raises it at once. On cancellation the
writer makes one last shielded attempt, bounded by ``cleanup_timeout``, to
commit what it had admitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._records import SheetRow
    from ._store import Store


@attrs.frozen
class WriterDiagnostics:
    """What the writer is doing now (read by the stall observer)."""

    active_rows: int
    active_kind: str | None
    active_started_at: float | None
    queued_terminal_rows: int
    blocked_terminal_rows: int


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


class TerminalRowWriter:
    def __init__(
        self,
        store: Store,
        run_id: str,
        dataset: str,
        *,
        buffer_bytes: int,
        max_flush: float,
        cleanup_timeout: float,
        on_commit: Callable[[list[TerminalRow]], None],
        before_write: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._run_id = run_id
        self._dataset = dataset
        self._cap = buffer_bytes
        self._max_flush = max_flush
        self._cleanup_timeout = cleanup_timeout
        self._on_commit = on_commit
        # Awaited before each batch: the map waits there for the receipts of
        # the calls its rows used, so no row commits before them.
        self._before_write = before_write
        self._buffer: list[TerminalRow] = []
        self._buffered_bytes = 0
        self._first_at = 0.0
        self._input_closed = False
        self._wakeup = trio.Event()  # the first row arrived, the buffer filled, or input closed
        self._space = trio.Event()  # a batch left the buffer
        self._active: list[TerminalRow] = []
        self._active_started_at: float | None = None
        self._blocked = 0
        self.error: BaseException | None = None
        self.finished = trio.Event()

    # -- producers ----------------------------------------------------------
    async def admit(self, item: TerminalRow) -> None:
        """Hand a row to the writer; returns once it is in the buffer."""
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
        if self._input_closed:
            raise RuntimeError("the terminal-row writer has stopped")
        if not self._buffer:
            self._first_at = trio.current_time()
            self._wakeup.set()
        self._buffer.append(item)
        self._buffered_bytes += item.size
        if self._buffered_bytes >= self._cap:
            self._wakeup.set()

    def close_input(self) -> None:
        """No more rows: the writer commits what it holds and finishes."""
        self._input_closed = True
        self._wakeup.set()

    def diagnostics(self) -> WriterDiagnostics:
        return WriterDiagnostics(
            active_rows=len(self._active),
            active_kind="terminal" if self._active else None,
            active_started_at=self._active_started_at,
            queued_terminal_rows=len(self._buffer),
            blocked_terminal_rows=self._blocked,
        )

    # -- the task -----------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            task_status.started()
            await self._flush_loop()
        finally:
            self._space.set()  # wake blocked producers: they see the error or the end
            self.finished.set()

    async def _flush_loop(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                if not self._buffer:
                    if self._input_closed:
                        return
                    continue
                if not self._input_closed and self._buffered_bytes < self._cap:
                    # Wait out the flush deadline unless the buffer fills first.
                    with trio.move_on_at(self._first_at + self._max_flush):
                        while not self._input_closed and self._buffered_bytes < self._cap:
                            await self._wakeup.wait()
                            self._wakeup = trio.Event()
                await self._write(self._take())
                if self._buffer or self._input_closed:
                    self._wakeup.set()
        except trio.Cancelled:
            await self._final_flush()
            raise

    def _take(self) -> list[TerminalRow]:
        batch, self._buffer = self._buffer, []
        self._buffered_bytes = 0
        self._space.set()
        self._space = trio.Event()
        return batch

    async def _write(self, batch: list[TerminalRow]) -> None:
        self._active = batch
        self._active_started_at = trio.current_time()
        try:
            if self._before_write is not None:
                await self._before_write()
            await self._store.write_terminal_rows(
                self._run_id, self._dataset, [item.row for item in batch]
            )
        except trio.Cancelled:
            raise
        except BaseException as exc:
            self.error = exc
            self._active = []
            raise
        self._active = []
        self._active_started_at = None
        self._on_commit(batch)

    async def _final_flush(self) -> None:
        # Rows whose write was cancelled may or may not have committed; writing
        # them again is safe (rows upsert by key) and only then are they reported.
        batch = self._active + self._buffer
        self._active, self._buffer = [], []
        if not batch or self.error is not None:
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._cleanup_timeout
            try:
                if self._before_write is not None:
                    await self._before_write()
                await self._store.write_terminal_rows(
                    self._run_id, self._dataset, [item.row for item in batch]
                )
            except Exception:
                return
        if not scope.cancelled_caught:
            self._on_commit(batch)
