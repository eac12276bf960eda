"""The phase a map row is in, as its page's stall observer reports it.

The map runner gives each row task a :class:`RowPhase` through a context
variable, so the code that runs the row's calls in the row's own task finds
it without being handed it. The dispatcher names the call a row is in (tool
and provider) and carries the row to the governor; the governor sets phase
``governor`` while a call waits for a global slot, a concurrency slot, a
rate turn or the end of a pause; a fetch sets phase ``fetch`` from the
moment its request is admitted. The stall observer reads them only when it
reports.

The cost on the path of a call that does not wait: one context variable
read and naming the call (four attribute writes in all). A phase change
reads the clock, and happens only when a call waits or fetches.

Phase ``store`` is the run's, not a row's: :class:`StoreCalls` counts the
run's store calls in flight, since when, and how long the store was busy,
and the stall observer names the store when it was busy for at least half
of a stall interval, or one call has gone unanswered for a whole one (rows
then wait on it, whatever their own phase says: a slot held by a call whose
receipt is not yet written, a commit, a claim).
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Literal, cast

import trio

from ._errors import StoreError
from ._store import StoreWrapping

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._loop_lag import LoopWatch
    from ._store import Store

Phase = Literal["resolver", "governor", "fetch", "receipt", "child"]


class RowPhase:
    """What one row is doing: its phase since when, and the call it is in.

    ``task`` is the row's task (created in it): the stall line shows what it
    awaits. ``owner`` is, in phase ``receipt``, the owner whose lease on the
    call's receipt the row waits out.
    """

    __slots__ = (
        "_now",
        "dataset",
        "key",
        "owner",
        "phase",
        "phase_started_at",
        "provider",
        "started_at",
        "task",
        "tool",
    )

    def __init__(
        self, key: str | None, now: Callable[[], float], dataset: str | None = None
    ) -> None:
        self._now = now  # the Trio clock's current_time
        self.key = key
        self.dataset = dataset  # recorded with the row's failed calls (trioplay retry)
        self.phase: Phase = "resolver"
        self.phase_started_at = self.started_at = now()
        self.tool: str | None = None
        self.provider: str | None = None
        self.owner: str | None = None
        self.task = trio.lowlevel.current_task()

    def enter(self, phase: Phase) -> None:
        self.phase = phase
        self.phase_started_at = self._now()

    def calling(self, tool: str, provider: str) -> None:
        self.tool = tool
        self.provider = provider

    def waiting_for(self, owner: str) -> None:
        """The call's receipt is leased by ``owner``: the row waits it out (phase ``receipt``)."""
        self.owner = owner
        self.enter("receipt")

    def receipt_ours(self) -> None:
        """The wait on another owner's receipt ended: back to the row's own code."""
        if self.phase == "receipt":
            self.owner = None
            self.enter("resolver")

    def called(self) -> None:
        self.tool = self.provider = None
        if self.phase == "receipt":  # the wait ended in a delivery (replay, time-out)
            self.receipt_ours()


_current: ContextVar[RowPhase | None] = ContextVar("trioplay_row_phase", default=None)


def current_row() -> RowPhase | None:
    """The row the calling task runs, or ``None`` outside a map's row."""
    return _current.get()


def calling(tool: str, provider: str) -> RowPhase | None:
    """The calling task's row, told which call it is in (``None`` outside a row)."""
    row = _current.get()
    if row is not None:
        row.tool = tool
        row.provider = provider
    return row


def waiting_on_child(run_id: str) -> Token[RowPhase | None] | None:
    """The calling task's row (if any) waits on the child run ``run_id``: phase ``child``.

    A child play runs in its caller's task, but its own calls are not its
    caller row's: the task leaves the row until :func:`child_done` (the
    child's rows enter their own). Returns the token for :func:`child_done`.
    """
    row = _current.get()
    if row is None:
        return None
    row.enter("child")
    row.tool, row.provider = run_id, "play"
    return _current.set(None)


def child_done(token: Token[RowPhase | None] | None) -> None:
    """The child of :func:`waiting_on_child` has ended: its caller's row goes on."""
    if token is None:
        return
    _current.reset(token)
    row = _current.get()
    if row is not None:
        row.called()
        row.enter("resolver")


def enter_row(row: RowPhase) -> Token[RowPhase | None]:
    """Make ``row`` the calling task's row; pass the token to :func:`leave_row`."""
    return _current.set(row)


def leave_row(token: Token[RowPhase | None]) -> None:
    _current.reset(token)


class StoreCalls:
    """The store calls of one run in flight: since when, and which operation.

    It also keeps how long the store has been busy in all (at least one call
    in flight), so that a run stalled by a store that answers slowly, call
    after call (a lock, a statement that waits for its timeout), is told
    from one stalled elsewhere although no single call lasts a whole stall
    interval: see :meth:`busy_time`.
    """

    __slots__ = ("_busy", "_busy_since", "_calls", "_next", "loop_watch")

    def __init__(self) -> None:
        self.loop_watch: LoopWatch | None = None
        """The run's loop-lag watchdog, once it runs: a failed call names a loop stall."""
        self._calls: dict[int, tuple[float, str]] = {}
        self._next = 0
        self._busy = 0.0  # seconds with a call in flight, up to _busy_since
        self._busy_since = 0.0  # when the calls in flight began to be in flight

    def __len__(self) -> int:
        return len(self._calls)

    def oldest(self) -> tuple[float, str] | None:
        """``(started_at, operation)`` of the oldest call in flight, or ``None``."""
        return min(self._calls.values(), default=None)

    def busy_time(self, now: float) -> float:
        """Seconds, up to ``now``, during which at least one store call was in flight.

        Only differences mean anything: the busy time of an interval is this
        at its end minus this at its start.
        """
        return self._busy + (now - self._busy_since if self._calls else 0.0)

    def watch(self, store: Store) -> Store:
        """``store``, with every call it answers counted here while in flight."""
        return cast("Store", StoreWrapping(store, self._watched))

    def _watched(self, name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        """``method``, its calls counted here while in flight (see :meth:`watch`)."""

        async def watched(*args: Any, **kwargs: Any) -> Any:
            token = self._start(name)
            try:
                return await method(*args, **kwargs)
            except StoreError as exc:
                self._blame_the_loop(token, exc)
                raise
            finally:
                self._end(token)

        return watched

    def _start(self, operation: str) -> int:
        self._next += 1
        now = trio.current_time()
        if not self._calls:
            self._busy_since = now
        self._calls[self._next] = (now, operation)
        return self._next

    def _blame_the_loop(self, token: int, error: StoreError) -> None:
        """Say so on ``error`` when the event loop was blocked while its call was in flight.

        A resolver that runs for a minute without ``await`` holds up every
        task, and the store's own deadlines pass meanwhile: the call may
        then fail for want of an answer the database gave in time.
        """
        watch = self.loop_watch
        if watch is None:
            return
        lag = watch.lag_since(self._calls[token][0])
        if lag > 0:
            error.add_note(
                f"trioplay: the event loop was blocked for {lag:.1f}s while this store call was"
                " in flight (a loop stall: code that ran without await; see the loop.lag"
                " event), which may be why it failed rather than the database"
            )

    def _end(self, token: int) -> None:
        del self._calls[token]
        if not self._calls:  # idle again: one clock read, only then
            self._busy += trio.current_time() - self._busy_since
