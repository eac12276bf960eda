"""The map stall observer: say what a quiet page is waiting for.

One observer per page, its task living in the page's nursery. It tracks
resolvers (each a :class:`~trioplay._phase.RowPhase`: phase ``resolver``,
``governor`` or ``fetch``, and the tool and provider of the call it is in),
terminal rows waiting for writer admission and rows waiting for their
commit, and reads the writer's diagnostics. Its timer starts when something
becomes unresolved and fires every ``stall_log_interval`` while anything
stays unresolved; when it fires and no terminal row committed during the
last interval, it logs exactly one ``[runtime.map_stall] {...}`` line
(logger ``trioplay.stall``, WARNING) and emits the same data as a
``map.stall`` event. When nothing is unresolved the timer is cancelled, so a
finished or idle page never speaks.

The line keeps the reference runtime's keys, in its order, and adds after
them: ``governor_waiting`` and ``oldest_governor_ms`` (rows whose call waits
for a slot, a rate turn or a pause), ``oldest_tool``,
``oldest_provider`` and ``oldest_row_key`` of the oldest unsettled item (the
one ``oldest_phase`` names; ``null`` where it has none), and
``store_active``, ``oldest_store_ms`` and ``oldest_store_operation``: the
run's store calls in flight and the oldest of them (its operation ``null``
while it has been in flight for less than a millisecond); and ``loop_lag_ms``, the
largest lateness of the event loop during the last interval (see
:mod:`trioplay._loop_lag`; 0 when it stayed under ``loop_lag_threshold``);
then ``oldest_receipt_owner``, in phase ``receipt`` the owner whose lease on
the call's receipt the oldest row waits out, and ``oldest_awaiting``, what
the oldest row's task awaits (:func:`trioplay._awaits.await_stack`: the
play's and trioplay's frames, innermost last; ``null`` when the oldest item
is no resolver).

``oldest_phase`` is ``store`` when a store call has gone unanswered for a
whole interval, or when the run's store was busy (a call in flight) for at
least half of the interval while the oldest row waits for something else
than the writer (``writer_admission`` and ``writer_commit`` already say
that a row waits on sheet writes, and which row): a lock, or statements
that each wait for their timeout, show in the first line although no one
call lasts an interval. Whatever else waits (rows for a slot that a call keeps
until its receipt is written, rows for their commit, calls for their claim)
then waits on the store. It is ``loop`` when the event loop was blocked for
``loop_lag_threshold`` or more during the last interval (``loop_lag_ms``):
then nothing ran while it was, heartbeats included, and whatever the rows
wait for is late because of it. ``oldest_tool``, ``oldest_provider`` and
``oldest_row_key`` are ``null`` for both: no row is to blame.

Slow progress, not only no progress: a page that still commits, but at a
fifth of its own recent rate or less for two intervals running
(``SLOW_*`` below), also logs a line at the tick, with the same cause
fields, and ``slow_progress`` says how slow: ``{"commits": 3,
"recent_commits": 240.0, "intervals": 2}`` (commits in the interval just
ended, the mean of the recent normal intervals, how many intervals running
were slow). On every other line ``slow_progress`` is ``null``.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._awaits import await_stack
from .._phase import Phase, RowPhase

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._loop_lag import LoopWatch
    from .._phase import StoreCalls

log = logging.getLogger("trioplay.stall")

# The writer's phases: rows that wait on sheet writes, which say so with the row's key.
_WRITER = ("writer_admission", "writer_commit")
SLOW_FACTOR = 5
"""Slow progress: a page's commits per interval fell below a fifth of its recent rate ..."""
SLOW_INTERVALS = 2
"""... for two intervals running ..."""
SLOW_WINDOW = 5
"""... its recent rate being the mean of its last five normal intervals ..."""
SLOW_MIN_RECENT = 4
"""... of at least four commits each (below that there is no rate to fall from)."""

# An unsettled item: since when, its phase, its row key, tool and provider, and
# its resolver's record (for its task and the receipt's owner; None if none).
_Item = tuple[float, str, str | None, str | None, str | None, RowPhase | None]


@attrs.frozen
class WriterDiagnostics:
    """What the writer is doing now (read by the stall observer)."""

    active_rows: int
    active_kind: str | None
    active_started_at: float | None
    queued_terminal_rows: int
    blocked_terminal_rows: int


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


@attrs.define(eq=False, kw_only=True)
class MapStallObserver:
    """Tracks one page; see the module docstring. All hooks are synchronous."""

    _map_name: str
    _page_offset: int
    _interval: float
    _writer_diagnostics: Callable[[], WriterDiagnostics | None]
    _emit: Callable[[dict[str, Any]], None]
    _store_calls: StoreCalls | None = None
    _loop_watch: LoopWatch | None = None
    _resolvers: dict[int, RowPhase] = attrs.field(init=False, factory=dict)
    # Terminal rows: since when they wait, and their keys.
    _admission: dict[int, tuple[float, str | None]] = attrs.field(init=False, factory=dict)
    _commit: dict[int, tuple[float, str | None]] = attrs.field(init=False, factory=dict)
    _token: int = attrs.field(init=False, default=0)
    _terminal_committed: int = attrs.field(init=False, default=0)
    # Slow progress: commits counted at the last tick, the counts of the
    # recent normal intervals, how many intervals running were slow.
    _counted: int = attrs.field(init=False, default=0)
    _recent: deque[int] = attrs.field(init=False, factory=lambda: deque(maxlen=SLOW_WINDOW))
    _slow_for: int = attrs.field(init=False, default=0)
    # The clock's own method: the hooks below read it per row, and
    # trio.current_time() costs two more frames each time.
    _now: Callable[[], float] = attrs.field(init=False)
    _last_commit_at: float = attrs.field(init=False)
    _busy: trio.Event = attrs.field(init=False, factory=trio.Event)
    _timer: trio.CancelScope | None = attrs.field(init=False, default=None)
    # The store's busy time when the interval being timed began.
    _store_busy_mark: float = attrs.field(init=False, default=0.0)

    def __attrs_post_init__(self) -> None:
        self._now = now = trio.lowlevel.current_clock().current_time
        self._last_commit_at = now()
        if self._store_calls is not None:
            self._store_busy_mark = self._store_calls.busy_time(now())

    # -- hooks --------------------------------------------------------------
    def resolver_started(self, key: str | None = None) -> int:
        self._token += 1
        self._resolvers[self._token] = RowPhase(key, self._now, self._map_name)
        self._busy.set()  # the timer runs while anything is unresolved
        return self._token

    def row_phase(self, token: int) -> RowPhase:
        """The phase record of a running resolver, for its row task (see :mod:`.._phase`)."""
        return self._resolvers[token]

    def resolver_finished(self, token: int) -> None:
        self._resolvers.pop(token, None)
        self._cancel_if_idle()

    def resolver_parked(self, token: int) -> RowPhase | None:
        """A resolver lingers for an outside event: not unresolved while it does."""
        phase = self._resolvers.pop(token, None)
        self._cancel_if_idle()
        return phase

    def resolver_unparked(self, token: int, phase: RowPhase | None) -> None:
        if phase is not None:
            self._resolvers[token] = phase
            self._busy.set()

    def set_phase(self, token: int, phase: Phase) -> None:
        resolver = self._resolvers.get(token)
        if resolver is not None:
            resolver.enter(phase)

    def terminal_queued(self, key: str | None = None) -> int:
        self._token += 1
        self._admission[self._token] = (self._now(), key)
        self._busy.set()
        return self._token

    def terminal_admitted(self, token: int) -> None:
        queued = self._admission.pop(token, None)
        if queued is not None:
            self._commit[token] = (self._now(), queued[1])

    def terminal_committed(self, token: int) -> None:
        self._admission.pop(token, None)
        if self._commit.pop(token, None) is not None:
            self._terminal_committed += 1
            self._last_commit_at = self._now()
        self._cancel_if_idle()

    def terminal_failed(self, token: int) -> None:
        self._admission.pop(token, None)
        self._commit.pop(token, None)
        self._cancel_if_idle()

    # -- the timer ----------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The observer's task; runs until its page's nursery is cancelled."""
        task_status.started()
        while True:
            await self._busy.wait()
            with trio.CancelScope() as timer:
                self._timer = timer
                if self._store_calls is not None:
                    self._store_busy_mark = self._store_calls.busy_time(self._now())
                await trio.sleep(self._interval)
            self._timer = None
            if timer.cancelled_caught:
                continue
            self.emit_if_stalled()
            if not self._has_unresolved() and self._busy.is_set():
                self._busy = trio.Event()

    def _cancel_if_idle(self) -> None:
        if self._resolvers or self._admission or self._commit:  # _has_unresolved, inline
            return
        if self._timer is not None:
            self._timer.cancel()
        if self._busy.is_set():
            self._busy = trio.Event()

    def _has_unresolved(self) -> bool:
        return bool(self._resolvers or self._admission or self._commit)

    # -- the report ---------------------------------------------------------
    def _slow_progress(self, committed: int) -> dict[str, Any] | None:
        """The collapse of the page's commit rate, if it lasted ``SLOW_INTERVALS`` ticks.

        ``committed``: the page's commits during the interval just ended.
        Its recent rate is the mean of its last normal intervals (a slow one
        does not lower it); a rate below ``1 / SLOW_FACTOR`` of that, for
        ``SLOW_INTERVALS`` intervals running, is slow progress. An interval
        with no commit at all is a stall line anyway.
        """
        recent = self._recent
        rate = sum(recent) / len(recent) if len(recent) >= 2 else 0.0
        if rate >= SLOW_MIN_RECENT and committed < rate / SLOW_FACTOR:
            self._slow_for += 1
        else:
            self._slow_for = 0
            recent.append(committed)
        if self._slow_for < SLOW_INTERVALS or committed == 0:
            return None
        return {
            "commits": committed,
            "recent_commits": round(rate, 1),
            "intervals": self._slow_for,
        }

    def snapshot(self, *, slow: bool = False) -> dict[str, Any] | None:
        """The stall report now, or ``None`` when there is nothing to report.

        ``slow``: the page's progress collapsed; report although it committed.
        """
        now = self._now()
        if now - self._last_commit_at < self._interval and not slow:
            return None
        writer = self._writer_diagnostics()
        unresolved = len(self._resolvers) + len(self._admission) + len(self._commit)
        if writer is not None:
            unresolved += (
                writer.active_rows + writer.queued_terminal_rows + writer.blocked_terminal_rows
            )
        if unresolved == 0:
            return None
        candidates: list[_Item] = [
            (r.started_at, r.phase, r.key, r.tool, r.provider, r) for r in self._resolvers.values()
        ]
        candidates += [
            (at, "writer_admission", key, None, None, None) for at, key in self._admission.values()
        ]
        candidates += [
            (at, "writer_commit", key, None, None, None) for at, key in self._commit.values()
        ]
        starts = [item[0] for item in candidates]
        if writer is not None and writer.active_started_at is not None:
            starts.append(writer.active_started_at)
            if writer.active_kind == "terminal" and writer.active_rows > 0:
                candidates.append(
                    (writer.active_started_at, "writer_commit", None, None, None, None)
                )
        oldest = min(candidates, key=lambda c: c[0]) if candidates else None
        store_active = len(self._store_calls) if self._store_calls is not None else 0
        store = self._store_calls.oldest() if self._store_calls is not None else None
        busy = (
            self._store_calls.busy_time(now) - self._store_busy_mark
            if self._store_calls is not None
            else 0.0
        )
        if store is not None and now - store[0] >= self._interval:
            oldest = (store[0], "store", None, None, None, None)
        elif busy >= self._interval / 2 and (oldest is None or oldest[1] not in _WRITER):
            oldest = (
                store[0] if store is not None else now - busy,
                "store",
                None,
                None,
                None,
                None,
            )
        lag = self._loop_watch.lag_since(now - self._interval) if self._loop_watch else 0.0
        if lag > 0:
            oldest = (now - lag, "loop", None, None, None, None)
        fetch_starts = [r.phase_started_at for r in self._resolvers.values() if r.phase == "fetch"]
        governor_starts = [
            r.phase_started_at for r in self._resolvers.values() if r.phase == "governor"
        ]
        row = oldest[5] if oldest is not None else None
        return {
            "map": self._map_name,
            "page_offset": self._page_offset,
            "resolver_active": len(self._resolvers),
            "fetch_active": len(fetch_starts),
            "oldest_fetch_ms": _ms(now - min(fetch_starts, default=now)),
            "terminal_admission_waiting": len(self._admission),
            "terminal_commit_waiting": len(self._commit),
            "terminal_write_active": (
                writer.active_rows if writer is not None and writer.active_kind == "terminal" else 0
            ),
            "terminal_queued": (
                writer.queued_terminal_rows + writer.blocked_terminal_rows if writer else 0
            ),
            "terminal_committed": self._terminal_committed,
            "oldest_unsettled_ms": _ms(now - min(starts, default=now)),
            "oldest_phase": oldest[1] if oldest is not None else "resolver",
            "last_terminal_commit_ms": _ms(now - self._last_commit_at),
            # Ours, after the reference's keys.
            "governor_waiting": len(governor_starts),
            "oldest_governor_ms": _ms(now - min(governor_starts, default=now)),
            "oldest_tool": oldest[3] if oldest is not None else None,
            "oldest_provider": oldest[4] if oldest is not None else None,
            "oldest_row_key": oldest[2] if oldest is not None else None,
            "store_active": store_active,
            "oldest_store_ms": _ms(now - store[0]) if store is not None else 0,
            # A call in flight for no measurable time is no one's cause.
            "oldest_store_operation": (
                store[1] if store is not None and _ms(now - store[0]) > 0 else None
            ),
            "loop_lag_ms": _ms(lag),
            "oldest_receipt_owner": row.owner if row is not None else None,
            "oldest_awaiting": await_stack(row.task) if row is not None else None,
        }

    def emit_if_stalled(self) -> None:
        """At each tick of the timer: a stall line if the page stalled or its progress collapsed."""
        committed = self._terminal_committed - self._counted
        self._counted = self._terminal_committed
        slow = self._slow_progress(committed)
        report = self.snapshot(slow=slow is not None)
        if report is None:
            return
        report["slow_progress"] = slow
        log.warning("[runtime.map_stall] %s", json.dumps(report, separators=(",", ":")))
        self._emit(report)
