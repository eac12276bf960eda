"""The recorder: where the runtime's emit points put events, and who reads them.

Emit points hold a ``Recorder | None`` and test it before anything else::

    trace = self._trace
    if trace is not None:
        trace.add(RowAdmitted, self.name, offset, key)

so a runtime opened without a recorder builds no record and no tuple: the
cost of an emit point nobody listens to is one attribute read and one test.
With a recorder, :meth:`Recorder.add` appends one tuple ``(class, at,
*fields)`` to a list, nothing more; every ``batch`` events (and on
:meth:`Recorder.flush`) the tuples go to the sinks, in order, in the task
that emitted the last one; each sink makes of them what it writes (the JSON
Lines sink writes text straight from the tuples, without a record). No thread, no task and no
clock read beyond the event's own: under ``trio.testing.MockClock`` the same
run records the same events.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

import trio

from .._trio_private import SystemClock
from ._records import event_of, raw_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._records import Event, Raw


class Sink(Protocol):
    """Receives raw events (``(class, at, *fields)``, see :func:`event_of`) in batches,
    in order; closed once, after the last batch."""

    def write(self, batch: list[Raw]) -> None: ...

    def close(self) -> None: ...


class ListSink:
    """Keeps every event in :attr:`events` (tests, scenarios, a play's own analysis)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def write(self, batch: list[Raw]) -> None:
        self.events.extend([event_of(raw) for raw in batch])

    def close(self) -> None:
        pass


def _no_clock() -> float:
    return trio.current_time()


class Recorder:
    """Collects events for its sinks; pass it as ``open_runtime(recorder=...)``.

    ``batch`` is how many events wait before they are handed to the sinks.
    :meth:`close` (after the runtime closed) hands over the rest and closes
    every sink.
    """

    def __init__(self, *sinks: Sink, batch: int = 4096) -> None:
        self.sinks = list(sinks)
        self._batch = batch
        self._pending: list[tuple[Any, ...]] = []
        self._now: Callable[[], float] = _no_clock
        self.closed = False

    def bind_clock(self) -> None:
        """Read the current Trio run's clock directly from now on (``open_runtime`` calls it).

        Trio's own clock is ``time.perf_counter()`` plus a random offset:
        with it the recorder reads the counter itself, a C function instead
        of a Python method per event (the times' origin is arbitrary either
        way, see ``docs/events.md``). Any other clock (``MockClock``) is read
        as it is.
        """
        clock = trio.lowlevel.current_clock()
        self._now = time.perf_counter if type(clock) is SystemClock else clock.current_time

    def add(self, kind: type[Event], *fields: Any) -> None:
        """Record one ``kind`` event happening now, its fields after ``at`` in order."""
        pending = self._pending
        # Concatenated: one tuple, where (kind, now, *fields) builds a list first.
        pending.append((kind, self._now()) + fields)  # noqa: RUF005
        if len(pending) >= self._batch:
            self.flush()

    def flush(self) -> None:
        """Hand every pending event to the sinks."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        for sink in self.sinks:
            sink.write(pending)

    def close(self) -> None:
        """Flush, then close every sink (once)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.flush()
        finally:
            for sink in self.sinks:
                sink.close()


def replay(events: Iterable[Event], *sinks: Sink) -> None:
    """Hand recorded ``events`` (records) to ``sinks`` as a recorder would have, then close them.

    A scenario keeps its run's records and writes them afterwards:
    ``replay(result.events, JsonlSink(file))`` writes the bytes that
    ``--events`` would have.
    """
    batch = [raw_of(event) for event in events]
    for sink in sinks:
        sink.write(batch)
        sink.close()
