"""What a map tells the world: every event the map room emits, in one place.

A map speaks in the typed records of :mod:`trioplay._trace`, its one stream:
its facts (started, progress, finished, stall, page lost) go to ``facts``
whenever anyone listens (``on_event`` listeners read them from there, see
:mod:`trioplay._trace._listen`), its pages, rows and batches to ``trace``
when a sink wants every event. :class:`MapReport` is the only code of the
room that writes to either: the runner, the page leases, the stall observer
(through its ``emit`` hook) and the terminal-row writer call its methods, so
a change to the stream changes this file alone.

The per-row methods (``row_*``) record only when :attr:`MapReport.trace` is
set; their callers test it first, so a map that nobody records pays one
attribute read per row and no call.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import trio

from .._trace._cause import stall_cause
from .._trace._records import (
    MapFinished,
    MapProgress,
    MapStall,
    MapStarted,
    PageFinished,
    PageLost,
    PageStarted,
    RowAdmitted,
    RowCommitted,
    RowResolverStarted,
    RowTerminal,
    RowWaiting,
    RowWriterAdmitted,
    WriterBatchCommitted,
    WriterBatchFailed,
    WriterBatchStarted,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._records import SheetRow
    from .._trace import Recorder

log = logging.getLogger("trioplay")


class MapCounts(NamedTuple):
    """A map's counts so far (see :class:`~._ledger.CommitLedger`), in the events' order."""

    completed: int
    failed: int
    skipped: int
    duplicates: int
    unconfirmed: int
    waiting: int = 0  # rows suspended on an event wait: not written, not failed
    handed_over: int = 0  # rows left to another owner that took their page over
    pages_handed_over: int = 0  # the pages of those rows


def handed_over_text(rows: int, pages: int) -> str:
    """``3 rows of 1 page``: rows left to another owner that took their pages over."""
    row = "row" if rows == 1 else "rows"
    return f"{rows:,} {row} of {pages:,} {'page' if pages == 1 else 'pages'}"


class _Batched(Protocol):
    """A row of a writer batch, as the report reads it (a ``TerminalRow``)."""

    row: SheetRow
    size: int


class MapReport:
    """The events of one map: started, progress, finished, stalls, pages, rows, batches."""

    __slots__ = ("_changed", "_dirty", "_facts", "_run_id", "_total", "name", "trace")

    def __init__(
        self,
        run_id: str,
        name: str,
        facts: Recorder | None,
        trace: Recorder | None,
    ) -> None:
        self._run_id = run_id
        self.name = name
        self._facts = facts  # None when nobody listens
        self.trace = trace  # None when nobody records: test it before a row_* call
        self._total: int | None = None
        self._dirty = False  # counts changed since the last progress event
        self._changed = trio.Event()  # set with _dirty: wakes keep_reporting

    # -- the whole map ------------------------------------------------------
    def started(self, total: int | None, columns: Sequence[str] = ()) -> None:
        """``columns``: the input's fields when its source names them, then the computed ones."""
        self._total = total
        if self._facts is not None:
            self._facts.add(MapStarted, self._run_id, self.name, total, list(columns))

    def progress(self, counts: MapCounts) -> None:
        if self._facts is not None:
            c = counts  # the record's order: total, run and the rest were added later
            self._facts.add(MapProgress, self.name, *c[:5], self._total, self._run_id, *c[5:])

    def changed(self) -> None:
        """The counts changed: the next progress tick reports them."""
        if not self._dirty:
            self._dirty = True
            self._changed.set()

    async def keep_reporting(self, interval: float, counts: Callable[[], MapCounts]) -> None:
        """Emit ``map.progress`` at the ticks ``interval`` apart at which the counts changed.

        The task sleeps until a change, then until the next tick: a map that
        waits hours for one row costs no wake (in virtual time, none either).
        """
        clock = trio.lowlevel.current_clock()
        start = clock.current_time()
        while True:
            await self._changed.wait()
            ticks = math.floor((clock.current_time() - start) / interval) + 1
            await trio.sleep_until(start + ticks * interval)
            self._dirty = False
            self._changed = trio.Event()
            self.progress(counts())

    def ended(self, status: str, counts: MapCounts) -> None:
        """The ``map.finished`` record, of a map that completed, failed or has rows waiting."""
        if self._facts is not None:
            c = counts
            self._facts.add(
                MapFinished, self.name, status, *c[:5], self._total, self._run_id, *c[5:]
            )

    def stalled(self, report: dict[str, Any]) -> None:
        """A page's stall line (the observer's ``emit`` hook), as a record."""
        if self._facts is not None:
            phase = str(report.get("oldest_phase"))
            cause = stall_cause(report)
            self._facts.add(
                MapStall, self.name, report["page_offset"], phase, cause, dict(report), self._run_id
            )

    # -- pages --------------------------------------------------------------
    def page_started(self, offset: int, rows: int) -> None:
        if self.trace is not None:
            self.trace.add(PageStarted, self.name, offset, rows)

    def page_finished(self, offset: int, status: str) -> None:
        if self.trace is not None:
            self.trace.add(PageFinished, self.name, offset, status)

    def page_lost(self, offset: int, keys: list[str]) -> None:
        """The page passed to another process; ``keys``: its rows not committed here, left to it."""
        log.warning(
            "dataset %r: the page at row %d passed to another process; "
            "its %d unfinished rows are left to it",
            self.name,
            offset,
            len(keys),
        )
        if self._facts is not None:
            self._facts.add(PageLost, self.name, offset, self._run_id, len(keys), keys)

    # -- rows (called only while ``trace`` is set) ---------------------------
    def row_admitted(self, offset: int, key: str) -> None:
        if self.trace is not None:
            self.trace.add(RowAdmitted, self.name, offset, key)

    def row_resolver_started(self, key: str) -> None:
        if self.trace is not None:
            self.trace.add(RowResolverStarted, self.name, key)

    def row_terminal(self, key: str, status: str) -> None:
        if self.trace is not None:
            self.trace.add(RowTerminal, self.name, key, status)

    def row_waiting(self, key: str, wait_key: str, name: str, deadline: float) -> None:
        """A row suspended on an event wait: it is neither written nor failed."""
        if self.trace is not None:
            self.trace.add(RowWaiting, self.name, key, wait_key, name, deadline)

    def row_writer_admitted(self, key: str) -> None:
        if self.trace is not None:
            self.trace.add(RowWriterAdmitted, self.name, key)

    # -- the writer's batches -----------------------------------------------
    def batch_started(self, batch: Sequence[_Batched]) -> None:
        if self.trace is not None:
            size = sum(item.size for item in batch)
            self.trace.add(WriterBatchStarted, self.name, len(batch), size)

    def batch_failed(self, batch: Sequence[_Batched], error: str, unknown: bool) -> None:
        if self.trace is not None:
            self.trace.add(WriterBatchFailed, self.name, len(batch), error, unknown)

    def batch_committed(self, batch: Sequence[_Batched]) -> None:
        """A batch committed, and with it each of its rows."""
        trace = self.trace
        if trace is not None:
            name = self.name
            trace.add(WriterBatchCommitted, name, len(batch))
            for item in batch:
                trace.add(RowCommitted, name, item.row.key, item.row.status)
