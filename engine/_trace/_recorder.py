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

One clock: every event's ``at`` is ``trio.current_time()``, the time of the
run's Trio clock (the system clock, or the scenario lab's virtual one), so
records and the ``RuntimeEvent`` events derived from them carry one timestamp.

A *live* sink (``live = True``: the ``on_event`` listener, the command
line's progress) wants the facts of :data:`~._listen.FACTS` as they happen:
while one is attached, each such event hands the batch over at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

from ._listen import FACTS
from ._records import event_of, raw_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._records import Event, Raw


class Sink(Protocol):
    """Receives raw events (``(class, at, *fields)``, see :func:`event_of`) in batches,
    in order; closed once, after the last batch. A sink with a true ``live`` attribute
    wants only the listeners' facts, each at once (see :mod:`._listen`)."""

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
        self._live: dict[type[Event], Any] = {}
        self._relive()
        self.closed = False

    def _relive(self) -> None:
        self._live = FACTS if any(getattr(sink, "live", False) for sink in self.sinks) else {}

    @property
    def detailed(self) -> bool:
        """Whether a sink wants every event, not only the live sinks' facts."""
        return any(not getattr(sink, "live", False) for sink in self.sinks)

    def attach(self, sink: Sink) -> None:
        """Add ``sink`` (``open_runtime`` attaches its ``on_event`` listener)."""
        self.sinks.append(sink)
        self._relive()

    def detach(self, sink: Sink) -> None:
        """Remove ``sink``, not closed."""
        self.sinks.remove(sink)
        self._relive()

    def bind_clock(self) -> None:
        """Read the current Trio run's clock directly from now on (``open_runtime`` calls it).

        The one clock of every event: ``trio.current_time()``, read through
        the clock itself (one method call, no lookup of the run per event).
        """
        self._now = trio.lowlevel.current_clock().current_time

    def add(self, kind: type[Event], *fields: Any) -> None:
        """Record one ``kind`` event happening now, its fields after ``at`` in order."""
        pending = self._pending
        # Concatenated: one tuple, where (kind, now, *fields) builds a list first.
        pending.append((kind, self._now()) + fields)  # noqa: RUF005
        if kind in self._live or len(pending) >= self._batch:
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
