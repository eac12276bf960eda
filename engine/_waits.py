"""Event waits: a row (or the play) suspended on an outside event (issue 22).

``rc.wait_for_event(name, key=..., timeout=...)`` registers a wait in the
store and either returns at once (an event was already there: it was
buffered, or delivered before this attempt), or raises
:class:`~trioplay._errors.RowSuspended`, a ``BaseException`` that ends the
row as *waiting* (the map counts it; nothing is written) or, at play level,
ends the run as ``waiting``. Resume is a rerun: the row runs again from the
top, replays its receipts, meets the same wait (its key is derived like a
receipt key from run, dataset, row, name, key and occurrence) and takes the
payload the store copied into the wait.

What is decided before any store call (the bound: ``timeout=`` or
``deadline=``, one of them, at most ``Limits.max_event_wait``; the name, the
key, the linger) is in :mod:`trioplay._wait_terms`, with the event a sender
sends: a bad value raises :class:`~trioplay.InvalidWait` naming the
argument, and nothing is written.

:class:`RunWaits` is a run's: it registers waits in groups (one store call
for the waits that arrive while the previous call is out: group commit, as
the receipts' lanes do), polls every lingering wait of the run in one store
call per ``Limits.event_poll_interval``, and remembers the waits this
attempt suspended on (the run's ``RunWaiting``).
"""

from __future__ import annotations

import logging
import math
import secrets
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ._errors import (
    EventRefused,
    EventRejected,
    EventWaitTimeout,
    RowSuspended,
    RunWaiting,
)
from ._json import loads
from ._keys import wait_key
from ._records import WaitRecord, WaitRequest
from ._trace._records import WaitRegistered, WaitSettled
from ._wait_terms import MISSING, check_linger, check_name, key_json, wait_deadline

if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from contextlib import AbstractContextManager

    from ._run_facts import RunFacts
    from ._store import WaitStore

log = logging.getLogger("trioplay")

_BATCH = 1000  # waits registered in one store call at most


class Parking(Protocol):
    """How a map row lingers: ``with parking.parked():`` it lends its row slot and
    is no unresolved resolver for the stall line (the map runner makes one per row)."""

    def parked(self) -> AbstractContextManager[None]: ...


class Occurrences:
    """How many waits on each ``(name, key)`` a row (or the play) made so far in this attempt."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}

    def next(self, name: str, key: str) -> int:
        seen = self._seen.get((name, key), 0)
        self._seen[(name, key)] = seen + 1
        return seen


@attrs.define(eq=False)
class _Pending:
    """A wait handed to the registrar, and what became of it."""

    request: WaitRequest
    done: trio.Event = attrs.field(factory=trio.Event)
    record: WaitRecord | None = None
    error: Exception | None = None


@attrs.define(eq=False)
class _Lingering:
    record: WaitRecord
    settled: trio.Event = attrs.field(factory=trio.Event)


@attrs.define(eq=False, kw_only=True)
class RunWaits:
    """The event waits of one run attempt (see the module docstring)."""

    _run: RunFacts
    _spawn: Callable[..., None]
    _send: trio.MemorySendChannel[_Pending] | None = attrs.field(init=False, default=None)
    _lingering: dict[str, _Lingering] = attrs.field(init=False, factory=dict)
    _poller: bool = attrs.field(init=False, default=False)
    suspended: dict[str, WaitRecord] = attrs.field(init=False, factory=dict)
    """The waits this attempt suspended on, by wait key (the run ends ``waiting``)."""
    play_occurrences: Occurrences = attrs.field(init=False, factory=Occurrences)
    """The occurrences of the play's own waits (``ctx.wait_for_event``)."""

    # -- registering -------------------------------------------------------------
    def request(
        self,
        *,
        dataset: str | None,
        row_key: str | None,
        occurrences: Occurrences,
        name: object,
        key: object,
        timeout: object,
        deadline: object,
    ) -> WaitRequest:
        """The wait to register, every argument checked (nothing is written on a bad one)."""
        checked = check_name(name)
        key_text = key_json(key)
        run = self._run
        at = wait_deadline(timeout, deadline, now=run.wall_clock(), limits=run.limits)
        occurrence = occurrences.next(checked, key_text)
        return WaitRequest(
            wait_key=wait_key(run.run_id, dataset, row_key, checked, key_text, occurrence),
            run_id=run.run_id,
            dataset=dataset,
            row_key=row_key,
            name=checked,
            key_json=key_text,
            deadline=at,
            token=secrets.token_urlsafe(24),
        )

    async def register(self, request: WaitRequest) -> WaitRecord:
        """Register ``request`` (or find it registered), with the others of its group."""
        send = self._send
        if send is None:
            send, receive = trio.open_memory_channel[_Pending](math.inf)
            self._send = send
            self._spawn(self._registrar, receive)
        pending = _Pending(request)
        send.send_nowait(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.record is not None
        record = pending.record
        trace = self._run.trace
        if trace is not None:
            trace.add(
                WaitRegistered,
                record.wait_key,
                record.dataset,
                record.row_key,
                record.name,
                record.key_json,
                record.deadline,
                record.status,
            )
        return record

    async def _registrar(self, receive: trio.MemoryReceiveChannel[_Pending]) -> None:
        """Register the waits sent meanwhile in one store call, one group after another."""
        async with receive:
            async for first in receive:
                batch = [first]
                while len(batch) < _BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except trio.WouldBlock:
                        break
                try:
                    records = await self._run.store.register_waits(
                        [pending.request for pending in batch], now=self._run.wall_clock()
                    )
                except Exception as exc:
                    for pending in batch:
                        pending.error = exc
                        pending.done.set()
                    continue
                for pending, record in zip(batch, records, strict=True):
                    pending.record = record
                    pending.done.set()

    def on_child(self, waiting: RunWaiting) -> RowSuspended:
        """The caller's suspension on a child run that ended ``waiting``.

        The child's waits become this run's (its ``RunWaiting`` names them,
        so the root's names every wait of its tree); the row, or the play,
        suspends on the first still open.
        """
        for wait in waiting.waits:
            self.suspended[wait.wait_key] = wait
        open_ = [wait for wait in waiting.waits if wait.status == "waiting"]
        return RowSuspended((open_ or list(waiting.waits))[0])

    # -- settling ----------------------------------------------------------------
    async def outcome(
        self,
        record: WaitRecord,
        *,
        default: Any,
        linger: float | None,
        parking: Parking | None = None,
    ) -> Any:
        """The wait's value: its payload, its default, or its error; else suspend.

        A waiting wait lingers first (``linger`` seconds, within its
        deadline), then raises :class:`RowSuspended`.
        """
        if record.status == "waiting" and linger is not None:
            if parking is None:
                record = await self._linger(record, linger)
            else:
                with parking.parked():
                    record = await self._linger(record, linger)
        if record.status == "waiting":
            self.suspended[record.wait_key] = record
            raise RowSuspended(record)
        trace = self._run.trace
        if trace is not None:
            trace.add(WaitSettled, record.wait_key, record.status)
        return settled_value(record, default, self._run.run_id)

    async def _linger(self, record: WaitRecord, seconds: float) -> WaitRecord:
        """Wait in-process up to ``seconds`` for the wait to settle.

        A linger that reaches past the deadline lasts until the poll after
        it, which times the wait out: the row then gets its default (or
        ``EventWaitTimeout``) in this attempt instead of suspending.
        """
        left = record.deadline - self._run.wall_clock()
        if seconds >= left:
            seconds = max(0.0, left) + 2 * self._run.limits.event_poll_interval
        lingering = _Lingering(record)
        self._lingering[record.wait_key] = lingering
        if not self._poller:
            self._poller = True
            self._spawn(self._poll)
        try:
            with trio.move_on_after(seconds):
                await lingering.settled.wait()
        finally:
            del self._lingering[record.wait_key]
        return lingering.record

    async def _poll(self) -> None:
        """Poll every lingering wait of the run in one store call per interval."""
        interval = self._run.limits.event_poll_interval
        try:
            while self._lingering:
                await trio.sleep(interval)
                keys = list(self._lingering)
                if not keys:
                    break
                try:
                    records = await self._run.store.poll_waits(keys, now=self._run.wall_clock())
                except Exception:
                    continue  # a store hiccup: the next interval asks again
                for key, record in zip(keys, records, strict=True):
                    lingering = self._lingering.get(key)
                    if lingering is not None and record is not None and record.status != "waiting":
                        lingering.record = record
                        lingering.settled.set()
        finally:
            self._poller = False


def settled_value(record: WaitRecord, default: Any, run_id: str) -> Any:
    """What a settled wait gives its row: the payload, the default, or an error."""
    status = record.status
    if status == "delivered":
        assert record.payload_json is not None
        return loads(record.payload_json)
    if status == "rejected":
        raise EventRejected(record.name, record.key_json, record.reason or "")
    if status == "timed_out":
        if default is not MISSING:
            return default
        raise EventWaitTimeout(record.name, record.key_json, record.deadline)
    raise EventRefused(run_id, "cancelled")


class EventWait:
    """A registered wait: its ``token`` (for a webhook URL) before it is awaited.

    ``await handle`` (or ``await handle.result()``) gives what
    ``wait_for_event`` would: the payload, the default, an error, or the
    row's suspension. ``token``, ``deadline`` (epoch seconds) and
    ``wait_key`` are the stored ones: the same on every rerun.
    """

    __slots__ = ("_default", "_linger", "_parking", "_record", "_waits")

    def __init__(
        self,
        waits: RunWaits,
        record: WaitRecord,
        default: Any,
        linger: float | None,
        parking: Parking | None = None,
    ) -> None:
        self._waits = waits
        self._record = record
        self._default = default
        self._linger = linger
        self._parking = parking

    @property
    def token(self) -> str:
        """The wait's opaque token: ``send-event RUN --token TOKEN`` addresses this wait."""
        return self._record.token

    @property
    def deadline(self) -> float:
        return self._record.deadline

    @property
    def wait_key(self) -> str:
        return self._record.wait_key

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def status(self) -> str:
        """The status as registered: ``waiting``, or how it was settled already."""
        return self._record.status

    async def result(self) -> Any:
        return await self._waits.outcome(
            self._record, default=self._default, linger=self._linger, parking=self._parking
        )

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    def __repr__(self) -> str:
        return f"EventWait(name={self.name!r}, status={self.status!r}, deadline={self.deadline})"


async def open_wait(
    waits: RunWaits,
    *,
    dataset: str | None,
    row_key: str | None,
    occurrences: Occurrences,
    parking: Parking | None,
    name: object,
    key: object,
    timeout: object,
    deadline: object,
    default: Any,
    linger: object,
) -> EventWait:
    """Check, register and hand back one wait (both contexts' ``event_wait``)."""
    lingers = check_linger(linger)
    request = waits.request(
        dataset=dataset,
        row_key=row_key,
        occurrences=occurrences,
        name=name,
        key=key,
        timeout=timeout,
        deadline=deadline,
    )
    record = await waits.register(request)
    return EventWait(waits, record, default, lingers, parking)


def suspension(error: BaseException) -> RowSuspended | None:
    """The suspension ``error`` stands for: itself, or a group of suspensions only."""
    if isinstance(error, RowSuspended):
        return error
    if isinstance(error, BaseExceptionGroup):
        match, rest = error.split(RowSuspended)
        if match is not None and rest is None:
            leaf: BaseException = match
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            assert isinstance(leaf, RowSuspended)
            return leaf
    return None


__all__ = [
    "MISSING",
    "EventWait",
    "Occurrences",
    "RunWaits",
    "open_wait",
    "suspension",
]


async def run_waiting(
    store: WaitStore, run_id: str, suspended: list[WaitRecord], now: float
) -> RunWaiting:
    """The run's :class:`RunWaiting`: its waits as they are now (one store call)."""
    try:
        polled = await store.poll_waits([wait.wait_key for wait in suspended], now=now)
        waits = [now_ or then for now_, then in zip(polled, suspended, strict=True)]
    except Exception as exc:
        log.warning("run %s: could not read its waits: %s", run_id, exc)
        waits = suspended
    waits.sort(key=lambda wait: (wait.deadline, wait.wait_key))
    open_ = [wait for wait in waits if wait.status == "waiting"]
    next_deadline = min((wait.deadline for wait in open_), default=None)
    return RunWaiting(run_id, tuple(waits), next_deadline)
