"""A call in flight: :class:`_Call`, its turn, its cohort, and the table of calls in flight.

A call's owner (the caller that made it) parks until the call is delivered
or is its to run (:func:`park`, :func:`wake`): one parked task and one
reschedule, cheaper than an Event per call. Identical calls made meanwhile
follow it through :class:`InFlight` instead of claiming its receipt again.
``park``, ``wake`` and ``InFlight.deliver`` are protected from
``KeyboardInterrupt``, as Trio's own primitives are: Ctrl-C landing between
naming the parked task and parking it would leave a wake-up addressed to a
task that is gone (a ``TrioInternalError``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._errors import ToolExecutionError
from .._tools import ToolCall

if TYPE_CHECKING:
    from .._governor import ProviderGate
    from .._phase import RowPhase
    from .._records import Claimed

Execute = Callable[[ToolCall], Awaitable[Any]]


@attrs.define
class DispatchStats:
    """Counters of one run attempt (shown in the CLI summary and run stats)."""

    provider_calls: int = 0
    replayed: int = 0
    followed: int = 0
    waited: int = 0
    failed_calls: int = 0
    steps_run: int = 0
    fetches: int = 0
    children_run: int = 0


class CallState(enum.IntEnum):
    """Where a call is in its life; the order is that of the life.

    ====================  ==================================================
    from                  to, and who moves it
    ====================  ==================================================
    ``QUEUED``            ``CLAIMED`` (its claim came back ours: ``_claims``),
                          ``DELIVERED`` (replayed, a recorded failure, the
                          claim failed, the wait timed out, its owner left)
    ``CLAIMED``           ``LOST`` (a heartbeat found its lease gone),
                          ``SETTLING`` (its result or error is handed to the
                          settler: ``_execute``), ``DELIVERED`` (its owner
                          left before it settled; its lease is released)
    ``LOST``              ``SETTLING`` (with :class:`LeaseLost`), ``DELIVERED``
    ``SETTLING``          ``DELIVERED`` (its settlement is written, fenced off
                          or failed: ``_settler`` delivers the outcome)
    ====================  ==================================================

    A caller never has a result before its settlement is written: a value
    reaches its owner, followers and cohort only once its receipt is
    completed, so a row that used it commits on a recorded receipt.
    """

    QUEUED = 0  # made; its claim is not back yet
    CLAIMED = 1  # its receipt is leased to us: to be run, or running
    LOST = 2  # a heartbeat found its lease gone before it settled
    SETTLING = 3  # its settlement is with the settler; delivered once written
    DELIVERED = 4  # delivered, out of flight; nothing (more) to write


QUEUED = CallState.QUEUED
CLAIMED = CallState.CLAIMED
LOST = CallState.LOST
SETTLING = CallState.SETTLING
DELIVERED = CallState.DELIVERED


# eq=False: a call is a governor borrower, so it hashes (and compares) by identity.
@attrs.define(eq=False, kw_only=True)
class _Call:
    """One logical effect and the callers waiting for it.

    The fields after ``row`` are its state and keep their defaults at
    construction (defaults in the signature cost nothing per call; attrs'
    ``init=False`` fields would). Its life is :attr:`state` (a
    :class:`CallState`); beside it, ``woken`` is the handshake with its
    parked owner (see :func:`park`) and ``slotted`` says the owner holds a
    governor slot taken for it: neither is a stage of the call's life.
    """

    operation: str
    name: str
    key: str
    execute: Callable[..., Awaitable[Any]]  # a tool's fn(input, call), else fn(call)
    gate: ProviderGate | None
    kind: str  # "provider", "fetch" or "local": which gates apply
    queues: bool = False  # may queue for a global slot without a task (Executor.admit)
    input: Any = None
    size: int = 0
    force: bool = False
    stale_after: float | None = None
    timeout: float | None = None
    receipt_wait: float | None = None
    record_failures: bool = True
    retries: int = 0
    row: RowPhase | None = None  # the map row whose task makes the call (stall phases)

    state: CallState = QUEUED
    followers: trio.Event | None = None  # set on delivery, for identical calls
    # Its owner waits (parked) until the call is delivered or is its to run.
    owner: trio.lowlevel.Task | None = None
    woken: bool = False
    claim: Claimed | None = None
    cohort: _Cohort | None = None
    value: Any = None
    error: BaseException | None = None
    lease_id: str = ""  # set when claimed
    expires_at: float = math.inf  # the last confirmed expiry of our lease
    scope: trio.CancelScope | None = None  # cancelled when the lease is lost
    slotted: bool = False  # its governor slot was taken for its owner (see Executor.admit)


@attrs.define(eq=False)
class _Cohort:
    """Calls claimed together: their leases are renewed together until all settle.

    The last delivery empties ``calls``: the heartbeat keeps a cohort queued
    until its renewal falls due (``lease_ttl / 2``), and must not keep its
    settled calls alive that long.
    """

    calls: list[_Call]
    remaining: int  # calls not yet delivered


# -- the turn -----------------------------------------------------------------
@trio.lowlevel.enable_ki_protection
async def park(call: _Call) -> None:
    """Park the owner until its call is delivered or is its to run (see :func:`wake`).

    A coroutine, not a plain function returning Trio's awaitable: the
    protection covers only this function's own frame, and Trio's awaitable
    runs in its awaiter's, where (in the caller's unprotected frame) Ctrl-C
    could land after the owner is named and before it parks.
    """
    if call.woken:
        await trio.lowlevel.checkpoint()
        return

    def abort(_: object) -> trio.lowlevel.Abort:
        call.owner = None
        return trio.lowlevel.Abort.SUCCEEDED

    call.owner = trio.lowlevel.current_task()
    await trio.lowlevel.wait_task_rescheduled(abort)


@trio.lowlevel.enable_ki_protection
def wake(call: _Call) -> None:
    """Let the owner of ``call`` go on, now or as soon as it parks."""
    call.woken = True
    owner, call.owner = call.owner, None
    if owner is not None:
        trio.lowlevel.reschedule(owner)


# -- in flight ----------------------------------------------------------------
class InFlight:
    """The calls in flight in one run, by receipt key.

    An identical call made while one is in flight follows it: it gets the
    owner's result and makes no claim of its own. A call stays in flight
    until it is delivered, which for an executed call is once its settlement
    is written, so a follower never finds its receipt still leased.
    """

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: dict[str, _Call] = {}

    @trio.lowlevel.enable_ki_protection
    def deliver(self, call: _Call, value: Any = None, error: BaseException | None = None) -> None:
        """Hand ``call``'s result (or error) to its owner, its followers and its cohort."""
        call.value = value
        call.error = error
        calls = self.calls  # forget and wake, inline: two frames less per call
        if calls.get(call.key) is call:
            del calls[call.key]
        call.state = DELIVERED
        if call.followers is not None:
            call.followers.set()
        call.woken = True
        owner, call.owner = call.owner, None
        if owner is not None:
            trio.lowlevel.reschedule(owner)
        cohort = call.cohort
        if cohort is not None:
            call.cohort = None
            cohort.remaining -= 1
            if not cohort.remaining:
                cohort.calls = []

    def forget(self, call: _Call) -> None:
        """The key is no longer in flight: an identical call from now on claims again."""
        if self.calls.get(call.key) is call:
            del self.calls[call.key]

    @staticmethod
    async def follow(call: _Call) -> Any:
        """The result of ``call``, once delivered (raises its error)."""
        if call.state is not DELIVERED:
            if call.followers is None:
                call.followers = trio.Event()
            await call.followers.wait()
        return outcome(call)


def outcome(call: _Call) -> Any:
    """The delivered result of ``call``; raises its error instead if it has one."""
    if call.error is not None:
        raise call.error
    return call.value


def provider_of(call: _Call) -> str | None:
    """The provider ``call`` counts against: its tool's, ``fetch``, or none (a step)."""
    if call.gate is not None:
        return call.gate.name
    return "fetch" if call.kind == "fetch" else None


def owner_gone(call: _Call) -> BaseException:
    """The error a call's followers get when its owner is cancelled before delivery."""
    return ToolExecutionError(
        f"the {call.operation} {call.name!r} this call followed was cancelled", tool_id=call.name
    )
