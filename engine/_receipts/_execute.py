"""Execution of claimed calls: the governor, the deadline, retries, and the hand-off to the settler.

The caller's own task runs its claimed call (a native batch request runs in
a task of its own). The governor admits the call (a call of a provider
without limits of its own gets its slot as it is claimed, see
:meth:`Executor.admit`); it runs under its timeout with the provider
idempotency key, retried within the claim if the tool allows ``retries``.
Its settlement (complete, fail or release) goes to the settler, which
coalesces the writes of many calls and delivers each outcome once its write
is done; the owner parks until then. The governor slot, and the call's place
in flight, are held until that write is done.
"""

from __future__ import annotations

import copy
import inspect
from typing import TYPE_CHECKING, Any

import trio

from .._aborts import aborted
from .._errors import (
    LeaseLost,
    PersistenceLatchTripped,
    PlayAborted,
    ProviderTransientError,
    ToolExecutionError,
    ToolTimeout,
    TrioplayError,
    error_to_record,
)
from .._json import dumps, loads
from .._keys import idempotency_key
from .._records import Completion, Failure, Lease
from .._tools import ToolCall
from .._trace._records import CallFinished, CallSettled, CallStarted
from ._call import DELIVERED, LOST, SETTLING, owner_gone, park, provider_of, wake
from ._leases import take_unsettled

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._records import Claimed
    from .._tools import BatchFunction
    from ._call import DispatchStats, Execute, _Call
    from ._settler import Settlement, _Settler
    from ._setup import DispatchSetup


class Executor:
    """Runs claimed calls of one run and hands their settlements to the settler."""

    def __init__(
        self,
        setup: DispatchSetup,
        stats: DispatchStats,
        settler: _Settler,
        deliver: Callable[..., None],
        release_shielded: Callable[[list[Lease]], Awaitable[None]],
    ) -> None:
        self._trace = setup.trace
        self._governor = setup.governor
        self._release = setup.governor.release
        self._tool_timeout = setup.limits.tool_timeout
        self._now = setup.wall_clock
        # The run's clock itself: trio.current_time() is three frames per call.
        self._trio_now = trio.lowlevel.current_clock().current_time
        self._fetch = setup.fetch
        self._stats = stats
        self._settler = settler
        self._submit = settler.submit
        self._deliver = deliver
        self._release_shielded = release_shielded

    # -- admission ----------------------------------------------------------
    def admit(self, call: _Call) -> None:
        """Let the owner of a claimed call run it, its governor slot taken here when possible.

        Taking the slot for the owner (now, or as soon as a release frees one)
        wakes the owner once, for its claim and its slot together. Calls to a
        provider with a rate or concurrency limit of its own, and steps, wait
        for their gates in their owner's task instead.
        """
        if call.queues:  # its provider has no limits of its own (Governor.is_unlimited)
            if not self._governor.acquire_or_queue(call, _granted, call.gate, call.row):
                return
            call.slotted = True
        wake(call)

    # -- the owner's task ---------------------------------------------------
    async def run_owned(self, call: _Call) -> Any:
        """Wait for the claim of our own call; if it is ours to run, run it here.

        Running the provider call in the caller's task costs no task of its
        own, and cancelling the caller cancels exactly its call.
        """
        try:
            await park(call)
            if call.state < SETTLING:
                claim = call.claim
                assert claim is not None
                await self.execute([(call, claim)], None)
                if call.state is SETTLING:
                    await park(call)  # until the settler has written it and delivers
        finally:
            lease: Lease | None = None
            if call.state < SETTLING:
                if call.claim is not None:
                    lease = Lease(call.key, call.claim.lease_id)
                # Delivered first: from now on the governor grants it no slot.
                self._deliver(call, error=owner_gone(call))
            if call.slotted:  # admitted, but never executed
                call.slotted = False
                self._release(call.gate, call)
            if call.row is not None:
                call.row.called()
            if lease is not None:
                await self._release_shielded([lease])
        if call.error is not None:  # outcome(call), inline: a frame less per call
            raise call.error
        return call.value

    # -- execution ----------------------------------------------------------
    async def execute(
        self, owned: list[tuple[_Call, Claimed]], batch: BatchFunction | None
    ) -> None:
        """Run claimed calls (one call, or one native batch request) under the governor.

        A single call whose tool allows ``retries`` is tried again after a
        transient failure, within the same claim (same idempotency key): after
        ``retry_after`` for a rate limit (the provider's bucket pauses too),
        else after 0.1 s × the try. The governor slot is given back while it waits.
        """
        first = owned[0][0]
        gated = first.kind != "local"
        tries_left = first.retries if batch is None else 0
        retry = 0
        while True:
            if first.slotted:
                first.slotted = False  # taken for us by admit; ours to release now
            elif gated:
                try:
                    await self._governor.acquire(
                        first.gate, first, first.row if batch is None else None
                    )
                except trio.Cancelled:
                    await self._cancelled(owned, retry > 0)  # a retry's call had started
                    raise
            handed_over = False
            try:
                delay = await self._execute_admitted(owned, batch, retry, retry < tries_left)
                handed_over = delay is None  # the settler releases the slot
            except BaseException:  # cancelled (a group of Cancelled too), or a Ctrl-C
                await self._cancelled(owned, True)
                raise
            finally:
                if gated and not handed_over:
                    self._release(first.gate, first)
            if delay is None:
                return
            retry += 1
            try:
                await trio.sleep(delay)
            except trio.Cancelled:
                await self._cancelled(owned, True)
                raise

    async def _cancelled(self, owned: list[tuple[_Call, Claimed]], started: bool) -> None:
        """Release the leases of cancelled calls; a ``started`` one settles ``cancelled`` here."""
        leases = take_unsettled(owned)
        if started and self._trace is not None:
            for lease in leases:
                self._trace.add(CallSettled, lease.key, "cancelled")
        await self._release_shielded(leases)

    async def _execute_admitted(
        self,
        owned: list[tuple[_Call, Claimed]],
        batch: BatchFunction | None,
        retry: int,
        may_retry: bool,
    ) -> float | None:
        """Call the provider and hand the results to the settler, or return the delay
        before a retry. Once handed over, the governor slot is the settler's to release.
        """
        first = owned[0][0]
        if self._settler.latch is not None and first.kind != "local":
            latched = self._settler.latch_error(f"{first.operation} {first.name!r} not called")
            self._settle(owned, [latched] * len(owned))
            return None
        now = self._now()
        for call, _ in owned:
            if call.state is LOST or call.expires_at <= now:
                # Cheap ownership check from the last confirmed expiry: never call a
                # provider for a receipt that may have a new owner by now.
                self._settle(owned, [LeaseLost(call.key) for call, _ in owned])
                return None
        timeout = first.timeout if first.timeout is not None else self._tool_timeout
        deadline = self._trio_now() + timeout
        tool_calls: list[ToolCall] = []
        for call, claim in owned:  # a loop, not a comprehension: no frame of its own
            tool_calls.append(
                ToolCall(
                    tool_id=call.name,
                    idempotency_key=idempotency_key(
                        call.key, claim.lease_id if call.force else None
                    ),
                    attempt=claim.attempt + retry,
                    deadline=deadline,
                    fetch=self._fetch,
                )
            )
        stats = self._stats
        if first.kind == "provider":
            stats.provider_calls += len(owned)
        elif first.kind == "fetch":
            stats.fetches += len(owned)
        elif first.operation == "play":
            stats.children_run += len(owned)
        else:
            stats.steps_run += len(owned)
        trace = self._trace
        if trace is not None:
            for call, claim in owned:
                trace.add(
                    CallStarted, call.key, call.name, provider_of(call), claim.attempt + retry
                )
        results: list[Any]
        scope = trio.CancelScope(deadline=deadline)
        for call, _ in owned:
            call.scope = scope
        try:
            with scope:
                if batch is None and first.operation == "tool":
                    results = [await first.execute(first.input, tool_calls[0])]
                elif batch is None:
                    results = [await first.execute(tool_calls[0])]
                else:
                    results = list(await batch([call.input for call, _ in owned], tool_calls))
            for call, _ in owned:
                if call.state is LOST:
                    results = [LeaseLost(call.key) for call, _ in owned]
                    break
            else:
                if scope.cancelled_caught:
                    results = [ToolTimeout(first.name, timeout, first.operation) for _ in owned]
                elif len(results) != len(owned):
                    message = (
                        f"batch tool {first.name!r} returned {len(results)} results "
                        f"for {len(owned)} inputs"
                    )
                    results = [ToolExecutionError(message, tool_id=first.name) for _ in owned]
        except Exception as exc:
            # Each member raises its own exception object: one object raised in
            # many tasks would tangle their tracebacks.
            results = [exc, *(_copy_error(exc) for _ in owned[1:])]
        except BaseException as exc:
            failure = aborted(exc, f"{first.operation} {first.name!r}")
            if failure is None:  # a cancellation, or a real Ctrl-C: the call ends here
                if trace is not None:
                    for call, _ in owned:
                        trace.add(CallFinished, call.key, "cancelled", type(exc).__name__)
                raise
            results = [failure, *(_copy_error(failure) for _ in owned[1:])]
        error = results[0]
        if trace is not None:
            retrying = may_retry and isinstance(error, ProviderTransientError)
            for (call, _), result in zip(owned, results, strict=True):
                trace.add(CallFinished, call.key, *_finished(result, retrying))
        if may_retry and isinstance(error, ProviderTransientError):
            self._slow_down(first, error)
            if error.category == "rate_limit" and error.retry_after:
                return error.retry_after
            return 0.1 * (retry + 1)
        self._settle(owned, results)
        return None

    def _slow_down(self, call: _Call, error: ProviderTransientError) -> None:
        """A rate-limit answer with ``retry_after`` pauses the provider, rate or not."""
        if error.category == "rate_limit" and error.retry_after:
            self._governor.slow_down(call.gate, error.retry_after)

    def _classify(self, call: _Call, error: BaseException) -> tuple[BaseException, bool]:
        """The error a caller sees, and whether its receipt records it as failed."""
        if isinstance(error, ProviderTransientError):
            if error.tool_id is None:
                error.tool_id = call.name
            self._slow_down(call, error)
            return error, False
        if isinstance(error, LeaseLost | PersistenceLatchTripped | PlayAborted):
            return error, False  # not the provider's answer: a rerun calls again
        if not call.record_failures:
            return error, False  # steps and fetches: the caller's own error, not recorded
        if not isinstance(error, TrioplayError):
            wrapped = ToolExecutionError(
                f"{call.operation} {call.name!r} raised {type(error).__name__}: {error}",
                tool_id=call.name,
                raised=type(error).__name__,
            )
            wrapped.__cause__ = error
            error = wrapped
        return error, True

    def _settle(self, owned: list[tuple[_Call, Claimed]], results: list[Any]) -> None:
        """Hand each result's settlement (complete, fail or release) to the settler.

        The settler delivers each outcome once its write is done (see
        ``_settler``), so no caller has a value its receipt does not hold.
        A completed result is delivered as it will replay (parsed back from
        its JSON). Until then the call stays in flight, so an identical call
        follows it instead of finding its receipt still leased.
        """
        entries: list[Settlement] = []
        for (call, claim), result in zip(owned, results, strict=True):
            if call.state is not DELIVERED:  # a batch member whose owner left is not woken
                call.state = SETTLING
                call.woken = False  # its owner parks again, until the settler delivers
            if not isinstance(result, BaseException):
                try:
                    text = dumps(result)
                    value = loads(text)
                except Exception as exc:
                    # Any error of the encoder (RecursionError for a result nested
                    # too deep included) fails the call and settles its receipt.
                    result = ToolExecutionError(
                        f"{call.operation} {call.name!r} returned a value that cannot be"
                        f" stored as JSON: {type(exc).__name__}: {exc}",
                        tool_id=call.name,
                        raised=type(exc).__name__,
                    )
                else:
                    entries.append((Completion(call.key, claim.lease_id, text), call, value, None))
                    continue
            error, record = self._classify(call, result)
            if record:
                self._stats.failed_calls += 1
                recorded = error_to_record(error)
                if call.row is not None and call.row.dataset is not None:
                    recorded["dataset"] = call.row.dataset  # for `trioplay retry --dataset`
                item: Failure | Lease = Failure(call.key, claim.lease_id, dumps(recorded))
            else:
                # An unreleased lease only delays a rerun until it expires.
                item = Lease(call.key, claim.lease_id)
            entries.append((item, call, None, error))
        first = owned[0][0]
        self._submit(entries, first if first.kind != "local" else None)


def _granted(call: _Call, slot: bool = True) -> bool:
    """A queued global slot is free (see :meth:`Executor.admit`): take it, unless the owner left.

    ``slot=False``: the provider is paused; the owner wakes without a slot and
    waits for its gates in :meth:`Executor.execute`.
    """
    if call.state >= SETTLING:
        return False  # its owner is gone: the governor takes the slot back
    call.slotted = slot
    wake(call)
    return True


def _finished(result: Any, retrying: bool) -> tuple[str, str | None]:
    """A provider result as ``call.finished`` names it: ``(outcome, error type)``."""
    if not isinstance(result, BaseException):
        return "ok", None
    name = type(result).__name__
    if retrying:
        return "retry", name
    if isinstance(result, ToolTimeout):
        return "timeout", name
    if isinstance(result, LeaseLost):
        return "lease_lost", name
    return "error", name


def _copy_error(error: Exception) -> Exception:
    duplicate = copy.copy(error)
    duplicate.__cause__ = error.__cause__
    return duplicate.with_traceback(None)


def local_executor(fn: Callable[[], Any]) -> Execute:
    """Wrap a step function (sync, async, or returning an awaitable)."""

    async def execute(_call: ToolCall) -> Any:
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        return value

    return execute
