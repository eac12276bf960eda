"""What ``on_event`` listeners receive: ``RuntimeEvent`` objects derived from the records.

The typed records are the runtime's only account of what it does. A
listener's events are read from them by one table, :data:`FACTS`: a record
type, the ``RuntimeEvent`` type it becomes and the ``data`` it carries. So
every fact is emitted once, as a record, and a new listener-facing event is
one record and one row here. A record type not in the table (a row's steps,
a call's) reaches no listener.

A sink whose ``live`` is true (:class:`EventStream` and its kind) receives
the table's records as they happen: the recorder hands its batch over at
each one (see :class:`~._recorder.Recorder`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from .._events import RuntimeEvent, deliver
from ._records import (
    ChildFinished,
    ChildStarted,
    EventSent,
    LoopLag,
    MapFinished,
    MapProgress,
    MapStall,
    MapStarted,
    PageLost,
    PlayLog,
    RunFinished,
    RunStarted,
    event_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._events import EventSink
    from ._records import Event, Raw


class Fact(NamedTuple):
    """A row of :data:`FACTS`: the ``RuntimeEvent`` type, and its ``data`` of a record
    (``None``: this record is no event for listeners)."""

    type: str
    data: Callable[[Any], dict[str, Any] | None]


def _counts(e: MapProgress | MapFinished) -> dict[str, Any]:
    return {
        "map": e.map,
        "completed": e.completed,
        "failed": e.failed,
        "skipped": e.skipped,
        "duplicates": e.duplicates,
        "unconfirmed": e.unconfirmed,
        "total": e.total,
        "waiting": e.waiting,
        "handed_over": e.handed_over,
        "pages_handed_over": e.pages_handed_over,
    }


def _finished(e: MapFinished) -> dict[str, Any] | None:
    # A failed map says so by its run; one with rows waiting is done for this attempt.
    return _counts(e) if e.status in ("completed", "waiting") else None


def _log(e: PlayLog) -> dict[str, Any]:
    if e.map is None:
        return {"message": e.message}
    return {"message": e.message, "map": e.map, "row": e.row}


FACTS: dict[type[Event], Fact] = {
    RunStarted: Fact("run.started", lambda e: {"play": e.play, "attempt": e.attempt}),
    RunFinished: Fact(
        "run.finished", lambda e: {"status": e.status, "error": e.error, "stats": dict(e.stats)}
    ),
    MapStarted: Fact(
        "map.started", lambda e: {"map": e.map, "total": e.total, "columns": list(e.columns)}
    ),
    MapProgress: Fact("map.progress", _counts),
    MapFinished: Fact("map.finished", _finished),
    MapStall: Fact("map.stall", lambda e: dict(e.report)),
    PageLost: Fact(
        "map.page_lost",
        lambda e: {"map": e.map, "page_offset": e.page, "rows": e.rows, "keys": list(e.keys)},
    ),
    LoopLag: Fact(
        "loop.lag", lambda e: {"lag_ms": int(e.lag_ms), "threshold_ms": int(e.threshold_ms)}
    ),
    PlayLog: Fact("play.log", _log),
    ChildStarted: Fact(
        "child.started",
        lambda e: {"child": e.child, "play": e.play, "depth": e.depth, "map": e.map, "row": e.row},
    ),
    ChildFinished: Fact(
        "child.finished", lambda e: {"child": e.child, "status": e.status, "error": e.error}
    ),
    EventSent: Fact(
        "event.sent",
        lambda e: {
            "name": e.name,
            "key": e.key,
            "event_id": e.event,
            "outcome": e.outcome,
            "dataset": e.map,
            "row": e.row,
        },
    ),
}
"""Record type -> the ``RuntimeEvent`` listeners get of it (docs/events.md, "Listeners")."""


class EventStream:
    """A sink that reads its batches as ``RuntimeEvent`` objects (by :data:`FACTS`) and tells each.

    Every record of :data:`FACTS` names its run, so each event says whose it is
    even when several runs of one runtime record at once.
    """

    live: ClassVar[bool] = True

    def write(self, batch: list[Raw]) -> None:
        for raw in batch:
            fact = FACTS.get(raw[0])
            if fact is None:
                continue
            record: Any = event_of(raw)
            data = fact.data(record)
            if data is not None:
                self.tell(RuntimeEvent(fact.type, record.run, record.at, data))

    def tell(self, event: RuntimeEvent) -> None:
        """One event of the stream (a subclass says what to do with it)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class EventListener(EventStream):
    """The ``on_event`` callable of ``open_runtime``, as a sink: a failing one is logged."""

    def __init__(self, on_event: EventSink) -> None:
        super().__init__()
        self._on_event = on_event

    def tell(self, event: RuntimeEvent) -> None:
        deliver(self._on_event, event)
