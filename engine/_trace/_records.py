"""The typed events of the runtime, and their one JSON writer and reader.

Every event is a frozen, slotted attrs record whose first field is ``at``
(seconds on the recorder's clock, to the microsecond); its class names its ``type`` (``TYPE``). As
JSON, an event is one flat object: ``type``, ``v`` (the schema version,
:data:`VERSION`), then its fields in order. ``docs/events.md`` lists every
type and field with its unit; ``tests/test_trace_records.py`` checks that
it does, and round-trips every type.

The classes are the schema: add a field at the end of a record, with a
default (a line written before it reads as that), and bump :data:`VERSION`
when a field changes meaning, is removed or renamed.
"""

from __future__ import annotations

import json
import types
from typing import Any, ClassVar

import attrs

VERSION = 2
"""The schema version, written as ``v`` in every event (2: no ``call.admitted``)."""


def on_grid(at: float) -> float:
    """``at`` rounded to the microsecond: the time of every event (see :class:`Event`)."""
    return float(f"{at:.6f}")


@attrs.frozen
class Event:
    """What every event has: when it happened (seconds, to the microsecond).

    A record rounds its ``at`` to the microsecond, as the JSON Lines sink
    writes it (six decimals cost a third of the shortest repr of a float,
    the largest part of writing an event): an event read back from a file
    is the event recorded.
    """

    TYPE: ClassVar[str] = ""
    at: float = attrs.field(converter=on_grid)


# -- the run and its maps -----------------------------------------------------
@attrs.frozen
class RunStarted(Event):
    TYPE = "run.started"
    run: str
    play: str
    attempt: int


@attrs.frozen
class RunFinished(Event):
    TYPE = "run.finished"
    run: str
    status: str  # completed, failed, cancelled, waiting
    error: str | None
    stats: dict[str, Any] = attrs.field(factory=dict)  # the run's counters


@attrs.frozen
class ChildStarted(Event):
    TYPE = "child.started"
    run: str  # the caller's run
    child: str  # the child's run
    play: str
    depth: int  # the child's depth (a root is 0)
    map: str | None  # the caller's map and row, for ``rc.play``
    row: str | None


@attrs.frozen
class ChildFinished(Event):
    TYPE = "child.finished"
    run: str
    child: str
    status: str  # completed, failed, cancelled, waiting
    error: str | None


@attrs.frozen
class MapStarted(Event):
    TYPE = "map.started"
    run: str
    map: str
    total: int | None
    # The input's fields when its source names them, then the computed ones
    # (added in 2 with a default: an older line reads as []).
    columns: list[str] = attrs.field(factory=list)


@attrs.frozen
class MapProgress(Event):
    TYPE = "map.progress"
    map: str
    completed: int
    failed: int
    skipped: int
    duplicates: int
    unconfirmed: int
    total: int | None
    run: str = ""  # the run it belongs to (added in 2 with a default: older files read)
    waiting: int = 0  # rows suspended on an event wait (issue 22)
    handed_over: int = 0  # rows left to another owner that took their page over (issue 26)
    pages_handed_over: int = 0  # the pages of those rows


@attrs.frozen
class MapFinished(Event):
    TYPE = "map.finished"
    map: str
    status: str  # completed, failed, waiting
    completed: int
    failed: int
    skipped: int
    duplicates: int
    unconfirmed: int
    total: int | None = None  # added in 2 without a new version: a default
    run: str = ""  # the run it belongs to (added in 2 with a default: older files read)
    waiting: int = 0  # rows suspended on an event wait (issue 22)
    handed_over: int = 0  # rows left to another owner that took their page over (issue 26)
    pages_handed_over: int = 0  # the pages of those rows


@attrs.frozen
class PageStarted(Event):
    TYPE = "page.started"
    map: str
    page: int  # the page's offset in the input
    rows: int


@attrs.frozen
class PageLost(Event):
    TYPE = "page.lost"
    map: str
    page: int
    run: str = ""  # the run it belongs to (added in 2 with a default: older files read)
    # The page's rows not committed here when it was lost, left to its new
    # owner: how many, and their keys (added in 2 with a default).
    rows: int = 0
    keys: list[str] = attrs.field(factory=list)


@attrs.frozen
class PageFinished(Event):
    TYPE = "page.finished"
    map: str
    page: int
    status: str  # done, lost, failed


# -- rows ---------------------------------------------------------------------
@attrs.frozen
class RowAdmitted(Event):
    TYPE = "row.admitted"
    map: str
    page: int
    row: str


@attrs.frozen
class RowResolverStarted(Event):
    TYPE = "row.resolver_started"
    map: str
    row: str


@attrs.frozen
class RowTerminal(Event):
    TYPE = "row.terminal"
    map: str
    row: str
    status: str  # completed, failed


@attrs.frozen
class RowWriterAdmitted(Event):
    TYPE = "row.writer_admitted"
    map: str
    row: str


@attrs.frozen
class RowCommitted(Event):
    TYPE = "row.committed"
    map: str
    row: str
    status: str  # completed, failed


# -- calls (tools, steps, fetches) --------------------------------------------
@attrs.frozen
class CallQueued(Event):
    TYPE = "call.queued"
    call: str  # the receipt key
    operation: str  # tool, step, fetch
    tool: str
    provider: str | None
    row: str | None


@attrs.frozen
class CallStarted(Event):
    TYPE = "call.started"
    call: str
    tool: str
    provider: str | None
    attempt: int


@attrs.frozen
class CallFinished(Event):
    TYPE = "call.finished"
    call: str
    outcome: str  # ok, error, timeout, lease_lost, retry, cancelled
    error: str | None


@attrs.frozen
class CallSettled(Event):
    TYPE = "call.settled"
    call: str
    outcome: str  # completed, failed, released, lease_lost, not_recorded, cancelled


# -- receipts and leases ------------------------------------------------------
@attrs.frozen
class ReceiptClaimed(Event):
    TYPE = "receipt.claimed"
    call: str


@attrs.frozen
class ReceiptReplayed(Event):
    TYPE = "receipt.replayed"
    call: str
    status: str  # completed, failed, corrupt


@attrs.frozen
class ReceiptFollowed(Event):
    TYPE = "receipt.followed"
    call: str


@attrs.frozen
class ReceiptWaited(Event):
    TYPE = "receipt.waited"
    call: str
    owner: str  # the lease owner it waits for


@attrs.frozen
class LeaseRenewed(Event):
    TYPE = "lease.renewed"
    calls: int
    lost: int


@attrs.frozen
class LeaseLost(Event):
    TYPE = "lease.lost"
    call: str


# -- the writer ---------------------------------------------------------------
@attrs.frozen
class WriterBatchStarted(Event):
    TYPE = "writer.batch_started"
    map: str
    rows: int
    bytes: int


@attrs.frozen
class WriterBatchCommitted(Event):
    TYPE = "writer.batch_committed"
    map: str
    rows: int


@attrs.frozen
class WriterBatchFailed(Event):
    TYPE = "writer.batch_failed"
    map: str
    rows: int
    error: str
    unknown: bool  # the write may have taken effect


# -- fetches ------------------------------------------------------------------
@attrs.frozen
class FetchStarted(Event):
    TYPE = "fetch.started"
    fetch: int  # numbers the runtime's fetches
    method: str
    url: str  # secrets redacted
    row: str | None


@attrs.frozen
class FetchPhase(Event):
    TYPE = "fetch.phase"
    fetch: int
    phase: str  # headers, body, retry
    attempt: int


@attrs.frozen
class FetchFinished(Event):
    TYPE = "fetch.finished"
    fetch: int
    status: int | None
    bytes: int
    error: str | None


# -- diagnostics --------------------------------------------------------------
@attrs.frozen
class MapStall(Event):
    TYPE = "map.stall"
    map: str
    page: int
    phase: str  # the stall line's oldest_phase
    cause: str  # a one-line reading of the stall line
    report: dict[str, Any]  # the whole [runtime.map_stall] line
    run: str = ""  # the run it belongs to (added in 2 with a default: older files read)


@attrs.frozen
class LoopLag(Event):
    TYPE = "loop.lag"
    lag_ms: float
    threshold_ms: float
    run: str = ""  # the run it belongs to (added in 2 with a default: older files read)


@attrs.frozen
class PlayLog(Event):
    TYPE = "play.log"
    message: str
    map: str | None
    row: str | None
    run: str = ""  # the run it belongs to (added in 2 with a default: older files read)


# -- event waits (issue 22) ------------------------------------------------------
@attrs.frozen
class WaitRegistered(Event):
    TYPE = "wait.registered"
    wait: str  # the wait key
    map: str | None  # None for the play's own wait
    row: str | None
    name: str
    key: str  # the key, as canonical JSON
    deadline: float  # wall-clock instant, epoch seconds (written once)
    status: str  # as registered: waiting, or already delivered, rejected, timed_out, cancelled


@attrs.frozen
class WaitSettled(Event):
    TYPE = "wait.settled"
    wait: str
    status: str  # delivered, rejected, timed_out (default given or not), cancelled


@attrs.frozen
class RowWaiting(Event):
    TYPE = "row.waiting"
    map: str
    row: str
    wait: str
    name: str
    deadline: float


@attrs.frozen
class EventSent(Event):
    TYPE = "event.sent"
    run: str
    name: str
    key: str
    event: str  # the event id
    outcome: str  # delivered, buffered, duplicate
    map: str | None  # on delivered: the dataset of the row it went to (None: the play's wait)
    row: str | None


EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        RunStarted,
        RunFinished,
        ChildStarted,
        ChildFinished,
        MapStarted,
        MapProgress,
        MapFinished,
        PageStarted,
        PageLost,
        PageFinished,
        RowAdmitted,
        RowResolverStarted,
        RowTerminal,
        RowWriterAdmitted,
        RowCommitted,
        CallQueued,
        CallStarted,
        CallFinished,
        CallSettled,
        ReceiptClaimed,
        ReceiptReplayed,
        ReceiptFollowed,
        ReceiptWaited,
        LeaseRenewed,
        LeaseLost,
        WriterBatchStarted,
        WriterBatchCommitted,
        WriterBatchFailed,
        FetchStarted,
        FetchPhase,
        FetchFinished,
        MapStall,
        LoopLag,
        PlayLog,
        WaitRegistered,
        WaitSettled,
        RowWaiting,
        EventSent,
    )
}
"""Every event class by its ``type``."""


def declared(field: attrs.Attribute[Any]) -> str:
    """A field's declared type, spelled as in the source: ``str``, ``int | None``..."""
    return _spelled(field.type)


def _spelled(kind: Any) -> str:
    if isinstance(kind, str):  # not resolved: as the source spells it
        return kind
    if isinstance(kind, types.UnionType):
        return " | ".join("None" if arg is type(None) else _spelled(arg) for arg in kind.__args__)
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).replace("typing.", "")


Raw = tuple[Any, ...]
"""An event as the recorder keeps it: ``(class, at, *fields)``, its fields in order."""


def event_of(raw: Raw) -> Event:
    """The record of a raw event."""
    kind: type[Event] = raw[0]
    return kind(*raw[1:])


def raw_of(event: Event) -> Raw:
    """The raw event of a record (what :func:`event_of` makes it from)."""
    return (type(event), *attrs.astuple(event, recurse=False))


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SCALARS: dict[type, Any] = {
    str: json.encoder.encode_basestring,
    int: int.__repr__,
    float: float.__repr__,  # the events' floats are finite: json writes them the same
    bool: lambda value: "true" if value else "false",
    type(None): lambda _: "null",
}
# What writes a field of each declared type (a wrong type raises TypeError).
_WRITERS = {"str": "S", "int": "I", "float": "F", "bool": "B"}


def _value(value: Any) -> str:
    write = _SCALARS.get(type(value))
    return write(value) if write is not None else _encode(value)


def _at_text(at: float) -> str:
    """``at`` as JSON writes ``on_grid(at)``: the general way (see :func:`_line_function`)."""
    return float.__repr__(on_grid(at))


# The first statements of every line function: ``a``, the event's time as
# JSON writes on_grid(raw[1]). Six decimals with the zeros stripped are that
# text wherever it has at most 15 significant digits and repr writes no
# exponent (1e-4 <= at < 1e9, or 0): elsewhere the general way.
_AT = """    at = raw[1]
    a = f'{at:.6f}'
    if not (0.0001 <= at < 1e9 or at == 0.0):
        a = A(at)
    elif a[-1] == '0':
        a = a.rstrip('0')
        if a[-1] == '.':
            a += '0'
"""


def _line_function(kind: type[Event]) -> Any:
    """A function writing ``kind``'s raw events, each field by its declared type."""
    head = _encode({"type": kind.TYPE, "v": VERSION})[:-1]
    pieces = [repr(head)]
    for index, field in enumerate(attrs.fields(kind), 1):
        spelled = declared(field)
        optional = spelled.endswith(" | None")
        writer = _WRITERS.get(spelled.removesuffix(" | None"), "E")
        value = "a" if index == 1 else f"{writer}(raw[{index}])"
        if optional:
            value = f"('null' if raw[{index}] is None else {value})"
        pieces += [repr(f",{_encode(field.name)}:"), value]
    pieces.append(repr("}\n"))
    source = "def line(raw):\n" + _AT + "    return " + " + ".join(pieces) + "\n"
    scope = {
        "S": json.encoder.encode_basestring,
        "I": int.__repr__,
        "F": float.__repr__,
        "B": _SCALARS[bool],
        "E": _encode,
        "A": _at_text,
    }
    exec(source, scope)
    return scope["line"]


class _Lines(dict[type, Any]):
    """The line function of each event class, made on its first event."""

    def __missing__(self, kind: type[Event]) -> Any:
        line = self[kind] = _line_function(kind)
        return line


_LINES = _Lines()


def json_line(raw: Raw) -> str:
    """``raw`` as one line of JSON text, exactly as ``to_json`` of its record dumps.

    The JSON Lines sink's fast path: no record and no dict; each field is
    written by the C encoder's own function for its declared type, in code
    made once per event class (a value not of its declared type falls back
    to the general encoder). ``tests/test_trace_records.py`` checks that
    both ways agree for every event type.
    """
    try:
        return _LINES[raw[0]](raw)  # type: ignore[no-any-return]
    except TypeError:
        kind = raw[0]
        names = [field.name for field in attrs.fields(kind)]
        values = [_encode(names[0]) + ":" + _at_text(raw[1])]
        values += [f"{_encode(n)}:{_value(v)}" for n, v in zip(names[1:], raw[2:], strict=True)]
        return _encode({"type": kind.TYPE, "v": VERSION})[:-1] + "," + ",".join(values) + "}\n"


def json_lines(batch: list[Raw]) -> str:
    """The lines of ``batch``, as :func:`json_line` writes each (no call of it per event)."""
    lines = _LINES
    try:
        return "".join([lines[raw[0]](raw) for raw in batch])
    except TypeError:
        return "".join([json_line(raw) for raw in batch])


def to_json(event: Event) -> dict[str, Any]:
    """``event`` as a JSON-able dict: ``type``, ``v``, then its fields (its line, read)."""
    return json.loads(json_line(raw_of(event)))  # type: ignore[no-any-return]


def _fits(value: Any, spelled: str) -> bool:
    """Whether ``value`` (read from JSON) is of the declared type ``spelled``."""
    if spelled.endswith(" | None"):
        return value is None or _fits(value, spelled.removesuffix(" | None"))
    if isinstance(value, bool):
        return spelled == "bool"
    if spelled == "list[str]":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    kind = _READ.get(spelled)
    return kind is not None and isinstance(value, kind)


# What a value read from JSON may be, per declared type (an int is a float too).
_READ: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "float": (int, float),
    "dict[str, Any]": dict,
}


def from_json(data: dict[str, Any]) -> Event:
    """The event a dict of :func:`to_json` holds; ``ValueError`` if it is not one.

    Every field must be there, of its declared type, and no other: the
    reading side of the schema that :func:`json_line` writes.
    """
    kind = EVENT_TYPES.get(data.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise ValueError(f"not an event type: {data.get('type')!r}")
    if data.get("v") != VERSION:
        raise ValueError(f"{kind.TYPE}: schema version {data.get('v')!r}, not {VERSION}")
    fields = attrs.fields(kind)
    extra = set(data) - {"type", "v"} - {field.name for field in fields}
    if extra:
        raise ValueError(f"{kind.TYPE}: extra fields {sorted(extra)}")
    values = []
    for field in fields:
        if field.name not in data:
            if field.default is not attrs.NOTHING:
                break  # added later: a line written before has not it (nor those after)
            raise ValueError(f"{kind.TYPE}: missing field {field.name!r}")
        value, spelled = data[field.name], declared(field)
        if not _fits(value, spelled):
            raise ValueError(f"{kind.TYPE}: {field.name} must be {spelled}, not {value!r}")
        values.append(float(value) if spelled == "float" else value)
    return kind(*values)
