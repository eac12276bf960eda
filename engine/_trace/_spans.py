"""Spans: the one place that pairs the records that start something with those that end it.

A span is something that lasted: a run, a child play's call (on its
caller's run track, the child's own run within it), a row (admitted to committed), a
row's phase, a call (started to finished), a call's governor slot (started
to settled), a fetch and its phases, a writer batch. :class:`Spans` reads
records in order and says when a span begins (``begun``) and when it ends
(``ended``, with its start, end and what its records said); the Chrome
trace sink writes a slice of each, the timeline picture counts them. At the
end, :meth:`Spans.close` ends what is still open at the last event's time,
marked ``unfinished``.

A row's phases, one after the other while it is in flight:

========================  ===============================================
``resolver``              from ``row.resolver_started``, and again when a
                          call or fetch of the row is done waiting
``governor``              a claimed call of the row waits for its slot
                          (``receipt.claimed`` to ``call.started``)
``fetch``                 a fetch of the row (``fetch.started`` to
                          ``fetch.finished``)
``child``                 the row waits on a child play (``child.started``
                          to ``child.finished``)
``writer admission``      from ``row.terminal``
``writer commit``         from ``row.writer_admitted`` to ``row.committed``
``waiting``               from ``row.waiting`` (suspended on an event wait:
                          never written in this attempt) to the end
========================  ===============================================

A fetch's phases are ``headers`` and ``body`` (``fetch.phase``).

A page is a span too (``page.started`` to ``page.finished``, its status in
``status``: ``done``, ``lost``, ``failed``). When a page is lost to a peer
(``page.lost``: its lease passed to another process, which runs its rows
not committed here, ``keys``), each of those rows still in flight ends
there, with ``status`` ``lost`` (a ``page.lost`` without ``keys``, from an
older file: each row of the page still in flight); what such a row records
afterwards belongs to no span of this run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from . import _records as r

if TYPE_CHECKING:
    from collections.abc import Callable

PHASES = (
    "resolver",
    "governor",
    "fetch",
    "child",
    "writer admission",
    "writer commit",
    "waiting",
)
"""A row's phases, in the order a row goes through them."""


class Span(NamedTuple):
    """Something that lasted from ``start`` to ``end``.

    ``kind``: ``run``, ``page``, ``row``, ``call``, ``slot``, ``fetch``, ``batch`` or
    ``phase``; ``key`` pairs its records (a phase's is its row's or fetch's
    key: ``("row", (map, row))``, ``("fetch", n)``); ``group`` the track it
    belongs on (the run, ``"<map> page <n>"``, a provider, ``fetches``, a
    map); ``name`` what it is; ``args`` what its records said.
    """

    kind: str
    key: Any
    group: str
    name: str
    start: float
    end: float
    args: dict[str, Any]


class _Open(NamedTuple):
    kind: str
    group: str
    name: str
    start: float
    args: dict[str, Any]


def _none(_kind: str, _key: Any, _group: str) -> None:
    return None


class Spans:
    """Pairs start and end records into spans, one record at a time (see the module)."""

    def __init__(
        self,
        ended: Callable[[Span], None],
        begun: Callable[[str, Any, str], None] = _none,
    ) -> None:
        self._ended = ended
        self._begun = begun
        self._open: dict[Any, _Open] = {}
        self._phase: dict[Any, tuple[str, float]] = {}  # owner key -> (phase, since)
        self._live: dict[str, Any] = {}  # row key -> its owner key while in flight
        self._call_row: dict[str, str] = {}  # call -> its row's key
        self._fetch_row: dict[int, str] = {}  # fetch -> its row's key
        self._child_row: dict[str, str] = {}  # child run -> its caller row's key
        self._lost: set[Any] = set()  # rows of a lost page: their later records are ignored

    # -- spans ------------------------------------------------------------
    def _begin(
        self, kind: str, key: Any, group: str, name: str, at: float, args: dict[str, Any]
    ) -> None:
        if key in self._open:  # begun again without an end (a retried call): end the first
            self._end(key, at, {})
        self._open[key] = _Open(kind, group, name, at, args)
        self._begun(kind, key, group)

    def _end(self, key: Any, at: float, more: dict[str, Any]) -> None:
        opened = self._open.pop(key, None)
        if opened is not None:
            kind, group, name, start, args = opened
            self._ended(Span(kind, key, group, name, start, at, {**args, **more}))

    def _enter(self, owner: Any, phase: str | None, at: float) -> None:
        """End ``owner``'s current phase (if any) and begin ``phase`` (unless ``None``)."""
        if owner in self._lost:
            return
        current = self._phase.pop(owner, None)
        if current is not None:
            self._ended(Span("phase", owner, "", current[0], current[1], at, {}))
        if phase is not None:
            self._phase[owner] = (phase, at)

    def _row(self, row: str | None, phase: str, at: float) -> None:
        """A row named by its key alone (a call's, a fetch's) enters ``phase``, if in flight."""
        owner = self._live.get(row) if row is not None else None
        if owner is not None and owner in self._phase:
            self._enter(owner, phase, at)

    def feed(self, e: r.Event) -> None:
        """Read the next record."""
        at = e.at
        key: Any
        if isinstance(e, r.RowAdmitted):
            key = ("row", (e.map, e.row))
            self._lost.discard(key)  # planned again after its page came back
            self._begin(
                "row", key, f"{e.map} page {e.page}", e.row, at, {"map": e.map, "page": e.page}
            )
        elif isinstance(e, r.RowResolverStarted):
            owner = ("row", (e.map, e.row))
            self._live[e.row] = owner
            self._enter(owner, "resolver", at)
        elif isinstance(e, r.RowTerminal):
            self._enter(("row", (e.map, e.row)), "writer admission", at)
        elif isinstance(e, r.RowWriterAdmitted):
            owner = ("row", (e.map, e.row))
            if owner in self._phase:
                self._enter(owner, "writer commit", at)
        elif isinstance(e, r.RowWaiting):  # suspended: its own state, to the end
            owner = ("row", (e.map, e.row))
            self._enter(owner, "waiting", at)
            self._live.pop(e.row, None)
        elif isinstance(e, r.RowCommitted):
            owner = ("row", (e.map, e.row))
            self._enter(owner, None, at)
            self._live.pop(e.row, None)
            if owner not in self._lost:
                self._end(owner, at, {"status": e.status})
        elif isinstance(e, r.PageStarted):
            args = {"map": e.map, "page": e.page, "rows": e.rows}
            self._begin("page", ("page", (e.map, e.page)), e.map, f"page {e.page:,}", at, args)
        elif isinstance(e, r.PageLost):
            self._page_lost(e, at)
        elif isinstance(e, r.PageFinished):
            self._end(("page", (e.map, e.page)), at, {"status": e.status})
        elif isinstance(e, r.CallQueued):
            if e.row is not None:
                self._call_row[e.call] = e.row
        elif isinstance(e, r.ReceiptClaimed):
            self._row(self._call_row.get(e.call), "governor", at)
        elif isinstance(e, r.CallStarted):
            self._row(self._call_row.get(e.call), "resolver", at)
            args = {"call": e.call, "attempt": e.attempt}
            self._begin("call", ("call", e.call), e.provider or e.tool, e.tool, at, args)
            if e.provider is not None:  # a step holds no governor slot
                self._open.pop(("slot", e.call), None)  # a retry's counts from its last start
                self._begin("slot", ("slot", e.call), e.provider, e.tool, at, {})
        elif isinstance(e, r.CallFinished):
            self._end(("call", e.call), at, {"outcome": e.outcome, "error": e.error})
        elif isinstance(e, r.CallSettled):
            self._call_row.pop(e.call, None)
            self._end(("slot", e.call), at, {"outcome": e.outcome})
        elif isinstance(e, r.FetchStarted):
            key = ("fetch", e.fetch)
            self._begin("fetch", key, "fetches", f"{e.method} {e.url}", at, {"row": e.row})
            if e.row is not None:
                self._fetch_row[e.fetch] = e.row
                self._row(e.row, "fetch", at)
        elif isinstance(e, r.FetchPhase):
            key = ("fetch", e.fetch)
            if key in self._open:
                self._enter(key, e.phase if e.phase in ("headers", "body") else None, at)
        elif isinstance(e, r.FetchFinished):
            key = ("fetch", e.fetch)
            self._enter(key, None, at)
            self._end(key, at, {"status": e.status, "bytes": e.bytes, "error": e.error})
            self._row(self._fetch_row.pop(e.fetch, None), "resolver", at)
        elif isinstance(e, r.WriterBatchStarted):
            args = {"rows": e.rows, "bytes": e.bytes}
            self._begin("batch", ("batch", e.map), e.map, f"write {e.rows} rows", at, args)
        elif isinstance(e, r.WriterBatchCommitted):
            self._end(("batch", e.map), at, {"outcome": "committed"})
        elif isinstance(e, r.WriterBatchFailed):
            more = {"outcome": "failed", "error": e.error, "unknown": e.unknown}
            self._end(("batch", e.map), at, more)
        elif isinstance(e, r.RunStarted):
            args = {"play": e.play, "attempt": e.attempt}
            self._begin("run", ("run", e.run), "run", f"run {e.run}", at, args)
        elif isinstance(e, r.RunFinished):
            self._end(("run", e.run), at, {"status": e.status, "error": e.error})
        elif isinstance(e, r.ChildStarted):
            args = {"play": e.play, "depth": e.depth, "caller": e.run, "row": e.row}
            name = f"child {e.child} (depth {e.depth})"
            self._begin("child", ("child", e.child), "run", name, at, args)
            if e.row is not None:
                self._child_row[e.child] = e.row
                self._row(e.row, "child", at)
        elif isinstance(e, r.ChildFinished):
            self._end(("child", e.child), at, {"status": e.status, "error": e.error})
            self._row(self._child_row.pop(e.child, None), "resolver", at)

    def _page_lost(self, e: r.PageLost, at: float) -> None:
        """A peer took the page over: the rows it left to the peer end here, ``lost``."""
        if e.keys:
            owners = [("row", (e.map, key)) for key in e.keys]
        else:  # an older record: the page's rows in flight
            owners = [
                key
                for key, opened in self._open.items()
                if opened.kind == "row"
                and (opened.args.get("map"), opened.args.get("page")) == (e.map, e.page)
            ]
        for owner in owners:
            if owner in self._open:
                self._enter(owner, None, at)
                self._live.pop(owner[1][1], None)
                self._end(owner, at, {"status": "lost"})
                self._lost.add(owner)

    def close(self, at: float) -> None:
        """End every span still open at ``at`` (the last event's time), ``unfinished``:
        each phase before the span it belongs to."""
        for owner, (phase, since) in list(self._phase.items()):
            self._ended(Span("phase", owner, "", phase, since, at, {"unfinished": True}))
        self._phase.clear()
        for key in list(self._open):
            self._end(key, at, {"unfinished": True})
