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
run's store calls in flight, since when, and the stall observer names the
store when one of them has gone unanswered for a whole stall interval (rows
then wait on it, whatever their own phase says: a slot held by a call whose
receipt is not yet written, a commit, a claim).
"""

from __future__ import annotations

import inspect
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Literal, cast

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._store import Store

Phase = Literal["resolver", "governor", "fetch", "child"]


class RowPhase:
    """What one row is doing: its phase since when, and the call it is in."""

    __slots__ = (
        "_now",
        "dataset",
        "key",
        "phase",
        "phase_started_at",
        "provider",
        "started_at",
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

    def enter(self, phase: Phase) -> None:
        self.phase = phase
        self.phase_started_at = self._now()

    def calling(self, tool: str, provider: str) -> None:
        self.tool = tool
        self.provider = provider

    def called(self) -> None:
        self.tool = self.provider = None


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
    """The store calls of one run in flight: since when, and which operation."""

    __slots__ = ("_calls", "_next")

    def __init__(self) -> None:
        self._calls: dict[int, tuple[float, str]] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._calls)

    def oldest(self) -> tuple[float, str] | None:
        """``(started_at, operation)`` of the oldest call in flight, or ``None``."""
        return min(self._calls.values(), default=None)

    def watch(self, store: Store) -> Store:
        """``store``, with every call it answers counted here while in flight."""
        return cast("Store", _Watched(store, self))

    def _start(self, operation: str) -> int:
        self._next += 1
        self._calls[self._next] = (trio.current_time(), operation)
        return self._next

    def _end(self, token: int) -> None:
        del self._calls[token]


class _Watched:
    """A store whose coroutine methods report to :class:`StoreCalls` (others pass through)."""

    def __init__(self, store: Store, calls: StoreCalls) -> None:
        self._store = store
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(found):
            return found
        calls = self._calls

        async def watched(*args: Any, **kwargs: Any) -> Any:
            token = calls._start(name)
            try:
                return await found(*args, **kwargs)
            finally:
                calls._end(token)

        setattr(self, name, watched)  # found once per name, then an attribute
        return watched
