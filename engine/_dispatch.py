"""The dispatcher: every external effect of a run goes through a receipt here.

One dispatcher per run, its tasks in the run's nursery, so cancelling a run
stops every lane, provider call and wait it started.

The path of a tool call:

1. **Key.** ``sha256`` over the canonical JSON of (operation, tool id, play
   scope) and of the input, unless the caller gave ``key``.
2. **Followers.** An identical call already in flight in this run is
   followed: the follower gets the owner's result, no second claim.
3. **Lane.** Calls to one tool coalesce for ``tool_batch_window`` from the
   first call (the window never resets) or until ``tool_batch_max`` calls /
   ``tool_batch_max_bytes`` arrive; the batch is claimed in one store call.
4. **Outcomes.** Completed receipts are replayed (one hydration turn at a
   time); recorded failures raise again; receipts held by another live owner
   are waited on outside the turn; claimed ones execute.
5. **Execution.** The caller's own task runs its claimed call (a native
   batch request runs in a task of its own); one heartbeat task per cohort
   of calls claimed together keeps their leases. The governor admits the
   call; it runs under its timeout with the provider idempotency key
   (retried within the claim if the tool allows ``retries``); the result is
   settled (completed, failed or released) through the settler, which
   coalesces the writes of many calls into one store call; the governor
   slot is held until then.

If recording a completion fails after the provider succeeded, the
persistence latch trips: no further provider call starts in this run and
the run fails with :class:`PersistenceLatchTripped`.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._errors import (
    LeaseLost,
    PersistenceLatchTripped,
    PlayDefinitionError,
    ProviderTransientError,
    ReceiptWaitTimeout,
    ToolExecutionError,
    ToolTimeout,
    TrioplayError,
    error_from_record,
    error_to_record,
)
from ._json import canonical_json, dumps, loads
from ._owner import owner_is_dead
from ._records import (
    Claimed,
    ClaimOutcome,
    ClaimRequest,
    Completion,
    Failure,
    Held,
    Lease,
    Receipt,
    Settled,
)
from ._tools import BatchFunction, FetchFunction, ToolCall, ToolRegistry, ToolSpec

if TYPE_CHECKING:
    from ._governor import Governor, ProviderGate
    from ._limits import Limits
    from ._store import Store

Execute = Callable[[ToolCall], Awaitable[Any]]

log = logging.getLogger("trioplay")


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


class _Call:
    """One logical effect and the callers waiting for it."""

    __slots__ = (
        "claim",
        "cohort",
        "done",
        "error",
        "execute",
        "expires_at",
        "force",
        "gate",
        "input",
        "key",
        "kind",
        "lease_id",
        "lost",
        "name",
        "operation",
        "ready",
        "receipt_wait",
        "record_failures",
        "retries",
        "scope",
        "settling",
        "size",
        "stale_after",
        "timeout",
        "value",
    )

    def __init__(
        self,
        *,
        operation: str,
        name: str,
        key: str,
        execute: Execute,
        gate: ProviderGate | None,
        kind: str,
        input: Any = None,
        size: int = 0,
        force: bool = False,
        stale_after: float | None = None,
        timeout: float | None = None,
        receipt_wait: float | None = None,
        record_failures: bool = True,
        retries: int = 0,
    ) -> None:
        self.operation = operation
        self.name = name
        self.key = key
        self.execute = execute
        self.gate = gate
        self.kind = kind
        self.input = input  # "provider", "fetch" or "local": which gates apply
        self.size = size
        self.force = force
        self.stale_after = stale_after
        self.timeout = timeout
        self.receipt_wait = receipt_wait
        self.record_failures = record_failures
        self.retries = retries
        self.done = trio.Event()  # the result (or error) is delivered
        self.ready = trio.Event()  # delivered, or claimed for its owner to run
        self.claim: Claimed | None = None
        self.cohort: _Cohort | None = None
        self.value: Any = None
        self.error: BaseException | None = None
        self.settling = False  # its completion write is in flight (heartbeats skip it)
        self.lease_id = ""  # set when claimed
        self.expires_at = math.inf  # the last confirmed expiry of our lease
        self.lost = False  # a heartbeat found the lease gone
        self.scope: trio.CancelScope | None = None  # cancelled when the lease is lost


class _Cohort:
    """Calls claimed together: one heartbeat keeps their leases until all settle."""

    __slots__ = ("remaining", "settled")

    def __init__(self, size: int) -> None:
        self.remaining = size
        self.settled = trio.Event()


class _Settler:
    """Coalesces receipt writes (complete, fail, release) of many calls."""

    def __init__(self, store: Store, now: Callable[[], float], cleanup_timeout: float) -> None:
        self._store = store
        self._now = now
        self._cleanup_timeout = cleanup_timeout
        self._pending: list[tuple[Completion | Failure | Lease, _Waiter]] = []
        self._wakeup = trio.Event()

    async def settle_many(
        self, items: Sequence[Completion | Failure | Lease]
    ) -> list[bool | BaseException]:
        """Write ``items`` with the next batch.

        Per item: ``True`` if written, ``False`` if its lease was not ours, or
        the store's error.
        """
        waiters = [_Waiter() for _ in items]
        self._pending.extend(zip(items, waiters, strict=True))
        self._wakeup.set()
        for waiter in waiters:
            await waiter.event.wait()
        return [waiter.error if waiter.error is not None else waiter.ok for waiter in waiters]

    async def run(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                batch, self._pending = self._pending, []
                await self._write(batch)
        except trio.Cancelled:
            # Completions of paid calls are worth one bounded, shielded try.
            batch, self._pending = self._pending, []
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + self._cleanup_timeout
                await self._write(batch)
            raise

    async def _write(self, batch: list[tuple[Completion | Failure | Lease, _Waiter]]) -> None:
        if not batch:
            return
        completions: list[Completion] = []
        failures: list[Failure] = []
        releases: list[Lease] = []
        waiters: tuple[list[_Waiter], list[_Waiter], list[_Waiter]] = ([], [], [])
        for item, waiter in batch:
            if isinstance(item, Completion):
                completions.append(item)
                waiters[0].append(waiter)
            elif isinstance(item, Failure):
                failures.append(item)
                waiters[1].append(waiter)
            else:
                releases.append(item)
                waiters[2].append(waiter)
        now = self._now()
        store = self._store
        if completions:
            await _settle_group(waiters[0], store.complete_many(completions, now=now))
        if failures:
            await _settle_group(waiters[1], store.fail_many(failures, now=now))
        if releases:
            await _settle_group(waiters[2], store.release_many(releases, now=now))


async def _settle_group(waiters: list[_Waiter], write: Awaitable[list[bool]]) -> None:
    """Await one store write and wake its waiters with their results (or its error)."""
    try:
        results = await write
    except Exception as exc:
        for waiter in waiters:
            waiter.fail(exc)
        return
    for waiter, ok in zip(waiters, results, strict=True):
        waiter.succeed(ok)


class _Waiter:
    __slots__ = ("error", "event", "ok")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.ok = False
        self.error: BaseException | None = None

    def succeed(self, ok: bool) -> None:
        self.ok = ok
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


class _Lane:
    """Coalesces calls to one tool into batches (see the module docstring)."""

    def __init__(self, dispatcher: Dispatcher, spec: ToolSpec, limits: Limits) -> None:
        self._dispatcher = dispatcher
        self._spec = spec
        self._window = limits.tool_batch_window
        self._max = limits.tool_batch_max
        self._max_bytes = limits.tool_batch_max_bytes
        self._queue: list[_Call] = []
        self._bytes = 0
        self._first_at = 0.0
        self._wakeup = trio.Event()

    def submit(self, call: _Call) -> None:
        if not self._queue:
            self._first_at = trio.current_time()
            self._wakeup.set()
        self._queue.append(call)
        self._bytes += call.size
        if self._full():
            self._wakeup.set()

    def _full(self) -> bool:
        return len(self._queue) >= self._max or self._bytes >= self._max_bytes

    def _take(self) -> list[_Call]:
        """The next batch: at most ``tool_batch_max`` calls and (but for one) the byte cap."""
        taken = 0
        size = 0
        for call in self._queue:
            if taken >= self._max or (taken and size + call.size > self._max_bytes):
                break
            taken += 1
            size += call.size
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        self._bytes -= size
        if self._queue:
            # The rest waits a window of its own, starting now.
            self._first_at = trio.current_time()
        return batch

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            if not self._queue:
                continue
            if not self._full():
                with trio.move_on_at(self._first_at + self._window):
                    while not self._full():
                        await self._wakeup.wait()
                        self._wakeup = trio.Event()
            self._dispatcher.spawn(self._dispatcher.process, self._take(), self._spec)
            if self._queue:
                self._wakeup.set()


class Dispatcher:
    """Runs the receipts protocol for one run (see the module docstring)."""

    def __init__(
        self,
        *,
        store: Store,
        governor: Governor,
        tools: ToolRegistry,
        limits: Limits,
        run_id: str,
        owner: str,
        nursery: trio.Nursery,
        wall_clock: Callable[[], float],
        fetch: FetchFunction | None,
    ) -> None:
        self._store = store
        self._governor = governor
        self._tools = tools
        self._limits = limits
        self._run_id = run_id
        self._owner = owner
        self._nursery = nursery
        self._now = wall_clock
        self._fetch = fetch
        self._inflight: dict[str, _Call] = {}
        self._lanes: dict[str, _Lane] = {}
        self._gates: dict[str, ProviderGate] = {}
        self._hydration = trio.Lock()
        self._settler = _Settler(store, wall_clock, limits.cleanup_timeout)
        self._latch: BaseException | None = None
        self.stats = DispatchStats()
        nursery.start_soon(self._settler.run)

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._nursery.start_soon(fn, *args)

    @property
    def latch(self) -> BaseException | None:
        """The error that tripped the persistence latch, if it tripped."""
        return self._latch

    # -- entry points -------------------------------------------------------
    async def call_tool(
        self,
        tool_id: str,
        input: Any,
        *,
        scope: str,
        force: bool = False,
        stale_after: float | None = None,
        timeout: float | None = None,
        receipt_wait: float | None = None,
        key: str | None = None,
    ) -> Any:
        spec = self._tools.get(tool_id)
        try:
            text = canonical_json(input)
        except (TypeError, ValueError) as exc:
            raise PlayDefinitionError(
                f"tool {tool_id!r}: its input must be JSON-serialisable ({exc})"
            ) from None
        if key is None:
            key = tool_receipt_key(tool_id, text, scope)
        existing = self._inflight.get(key)
        if existing is not None:
            self.stats.followed += 1
            return await self._result_of(existing)
        gate = self._gates.get(spec.provider)
        if gate is None:
            gate = self._gates[spec.provider] = self._governor.gate(
                spec.provider, spec.rate, spec.concurrency
            )
        call = _Call(
            operation="tool",
            name=tool_id,
            key=key,
            execute=_tool_executor(spec, input),
            gate=gate,
            kind="provider",
            input=input,
            size=len(text),
            force=force,
            stale_after=stale_after,
            timeout=timeout if timeout is not None else spec.timeout,
            receipt_wait=receipt_wait,
            retries=spec.retries,
        )
        self._inflight[key] = call
        lane = self._lanes.get(tool_id)
        if lane is None:
            lane = self._lanes[tool_id] = _Lane(self, spec, self._limits)
            self.spawn(lane.run)
        lane.submit(call)
        return await self._run_owned(call)

    async def run_effect(
        self,
        *,
        operation: str,
        name: str,
        key: str,
        execute: Execute,
        kind: str,
        force: bool = False,
        stale_after: float | None = None,
        timeout: float | None = None,
        receipt_wait: float | None = None,
        record_failures: bool = False,
    ) -> Any:
        """Run one effect (a step or a fetch) through its receipt, in the caller's task."""
        existing = self._inflight.get(key)
        if existing is not None:
            self.stats.followed += 1
            return await self._result_of(existing)
        call = _Call(
            operation=operation,
            name=name,
            key=key,
            execute=execute,
            gate=None,
            kind=kind,
            force=force,
            stale_after=stale_after,
            timeout=timeout,
            receipt_wait=receipt_wait,
            record_failures=record_failures,
        )
        self._inflight[key] = call
        try:
            await self.process([call], inline=True)
        except BaseException:
            if not call.done.is_set():
                self._deliver(call, error=_owner_gone(call))
            raise
        return await self._run_owned(call)

    async def _run_owned(self, call: _Call) -> Any:
        """Wait for the claim of our own call; if it is ours to run, run it here.

        Running the provider call in the caller's task costs no task of its
        own, and cancelling the caller cancels exactly its call.
        """
        try:
            await call.ready.wait()
            if not call.done.is_set():
                claim = call.claim
                assert claim is not None
                await self._execute([(call, claim)], None)
        finally:
            if not call.done.is_set():
                if call.claim is not None and not call.settling:
                    await self._release_shielded([Lease(call.key, call.claim.lease_id)])
                self._deliver(call, error=_owner_gone(call))
        return self._outcome(call)

    async def _result_of(self, call: _Call) -> Any:
        await call.done.wait()
        return self._outcome(call)

    @staticmethod
    def _outcome(call: _Call) -> Any:
        if call.error is not None:
            raise call.error
        return call.value

    def _deliver(self, call: _Call, value: Any = None, error: BaseException | None = None) -> None:
        call.value = value
        call.error = error
        if self._inflight.get(call.key) is call:
            del self._inflight[call.key]
        call.done.set()
        call.ready.set()
        cohort = call.cohort
        if cohort is not None:
            cohort.remaining -= 1
            if cohort.remaining == 0:
                cohort.settled.set()

    # -- a batch ------------------------------------------------------------
    async def process(
        self, calls: list[_Call], spec: ToolSpec | None = None, *, inline: bool = False
    ) -> None:
        """Claim ``calls`` in one store call and act on each outcome."""
        requests = [
            ClaimRequest(
                key=call.key,
                operation=call.operation,
                name=call.name,
                run_id=self._run_id,
                force=call.force,
                stale_after=call.stale_after,
            )
            for call in calls
        ]
        try:
            outcomes = await self._claim(requests)
        except Exception as exc:
            for call in calls:
                self._deliver(call, error=exc)
            return
        await self._act(calls, outcomes, inline=inline, spec=spec)

    async def _claim(self, requests: list[ClaimRequest]) -> list[ClaimOutcome]:
        return await self._store.claim_many(
            requests, owner=self._owner, lease_ttl=self._limits.lease_ttl, now=self._now()
        )

    async def _act(
        self,
        calls: list[_Call],
        outcomes: list[ClaimOutcome],
        *,
        inline: bool,
        spec: ToolSpec | None = None,
    ) -> None:
        settled: list[tuple[_Call, Receipt]] = []
        owned: list[tuple[_Call, Claimed]] = []
        for call, outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, Claimed):
                owned.append((call, outcome))
            elif isinstance(outcome, Settled):
                settled.append((call, outcome.receipt))
            elif inline:
                await self._wait_held(call, outcome.receipt)
            else:
                self.spawn(self._wait_held, call, outcome.receipt)
        if owned:
            cohort = _Cohort(len(owned))
            for call, claim in owned:
                call.lease_id = claim.lease_id
                call.expires_at = claim.lease_expires_at
                call.cohort = cohort
            self.spawn(self._heartbeat, [call for call, _ in owned], cohort)
            if spec is not None and spec.batch is not None:
                size = spec.batch_max or self._limits.tool_batch_max
                for start in range(0, len(owned), size):
                    self.spawn(self._execute, owned[start : start + size], spec.batch)
            else:
                for call, claim in owned:
                    call.claim = claim
                    call.ready.set()  # its owner runs it (see _run_owned)
        if settled:
            await self._hydrate(settled)

    async def _hydrate(self, settled: list[tuple[_Call, Receipt]]) -> None:
        # Stored payloads can parse into many times their size: one group at a time.
        async with self._hydration:
            for call, receipt in settled:
                self.stats.replayed += 1
                if receipt.status == "failed":
                    self._deliver(call, error=error_from_record(loads(receipt.error_json or "{}")))
                elif receipt.result_json is None:
                    self._deliver(call, None)
                else:
                    self._deliver(call, loads(receipt.result_json))

    async def _wait_held(self, call: _Call, receipt: Receipt) -> None:
        """Wait for another owner's receipt; reclaim it once its lease is gone."""
        delay = self._limits.receipt_wait_delay
        attempts = self._limits.receipt_wait_attempts
        if call.receipt_wait is not None:
            attempts = max(0, math.ceil(call.receipt_wait / delay))
        self.stats.waited += 1
        waited = 0.0
        attempt = 0
        try:
            while True:
                takeover = receipt.lease_id if owner_is_dead(receipt.owner) else None
                if takeover is None:
                    if attempt >= attempts:
                        break
                    attempt += 1
                    await trio.sleep(delay)
                    waited += delay
                request = ClaimRequest(
                    key=call.key,
                    operation=call.operation,
                    name=call.name,
                    run_id=self._run_id,
                    force=call.force,
                    stale_after=call.stale_after,
                    takeover_lease=takeover,
                )
                (outcome,) = await self._claim([request])
                if isinstance(outcome, Held):
                    receipt = outcome.receipt
                    continue
                await self._act([call], [outcome], inline=True)
                return
        except Exception as exc:
            self._deliver(call, error=exc)
            return
        self._deliver(call, error=ReceiptWaitTimeout(call.key, waited))

    # -- execution ----------------------------------------------------------
    async def _heartbeat(self, calls: list[_Call], cohort: _Cohort) -> None:
        """Renew the cohort's leases every ``lease_ttl / 2``.

        Calls whose completion is being written are skipped, and a lease that
        vanished because its own completion landed is no loss. A renewal that
        shows a lease gone cancels that call's scope: it ends with ``LeaseLost``.
        """
        interval = self._limits.lease_ttl / 2
        while True:
            with trio.move_on_after(interval):
                await cohort.settled.wait()
                return
            live = [c for c in calls if not (c.settling or c.lost or c.done.is_set())]
            if not live:
                return
            try:
                expiries = await self._store.heartbeat_many(
                    [Lease(c.key, c.lease_id) for c in live],
                    lease_ttl=self._limits.lease_ttl,
                    now=self._now(),
                )
            except Exception as exc:
                # The next renewal may succeed; the pre-call check and the
                # fenced completion stay safe meanwhile.
                log.warning("lease heartbeat failed: %s", exc)
                continue
            for call, expiry in zip(live, expiries, strict=True):
                if expiry is not None:
                    call.expires_at = expiry
                elif not (call.settling or call.done.is_set()):
                    call.lost = True
                    if call.scope is not None:
                        call.scope.cancel()

    async def _execute(
        self, owned: list[tuple[_Call, Claimed]], batch: BatchFunction | None
    ) -> None:
        """Run claimed calls (one call, or one native batch request) under the governor.

        A single call whose tool allows ``retries`` is tried again after a
        transient failure, within the same claim (same idempotency key): after
        ``retry_after`` for a rate limit (the provider's bucket pauses too),
        else after 0.1 s × the try. The governor slot is given back while it waits.
        """
        first = owned[0][0]
        leases = [Lease(call.key, claim.lease_id) for call, claim in owned]
        tries_left = first.retries if batch is None else 0
        retry = 0
        while True:
            try:
                if first.kind != "local":
                    await self._governor.acquire(first.gate)
            except trio.Cancelled:
                await self._release_shielded(leases)
                raise
            try:
                delay = await self._execute_admitted(owned, batch, retry, retry < tries_left)
            except trio.Cancelled:
                unsettled = [
                    lease
                    for (call, _), lease in zip(owned, leases, strict=True)
                    if not call.settling
                ]
                await self._release_shielded(unsettled)
                raise
            finally:
                if first.kind != "local":
                    self._governor.release(first.gate)
            if delay is None:
                return
            retry += 1
            try:
                await trio.sleep(delay)
            except trio.Cancelled:
                await self._release_shielded(leases)
                raise

    async def _execute_admitted(
        self,
        owned: list[tuple[_Call, Claimed]],
        batch: BatchFunction | None,
        retry: int,
        may_retry: bool,
    ) -> float | None:
        """Call the provider and settle, or return the delay before a retry."""
        first = owned[0][0]
        if self._latch is not None and first.kind != "local":
            latch = PersistenceLatchTripped(
                "no new provider call: an earlier completion could not be recorded"
            )
            await self._settle(owned, [latch] * len(owned))
            return None
        now = self._now()
        if any(call.lost or call.expires_at <= now for call, _ in owned):
            # Cheap ownership check from the last confirmed expiry: never call a
            # provider for a receipt that may have a new owner by now.
            await self._settle(owned, [LeaseLost(call.key) for call, _ in owned])
            return None
        timeout = first.timeout if first.timeout is not None else self._limits.tool_timeout
        deadline = trio.current_time() + timeout
        tool_calls = [
            ToolCall(
                tool_id=call.name,
                idempotency_key=_idempotency_key(call.key, claim.lease_id if call.force else None),
                attempt=claim.attempt + retry,
                deadline=deadline,
                fetch=self._fetch,
            )
            for call, claim in owned
        ]
        self._count_start(first, len(owned))
        results: list[Any]
        scope = trio.CancelScope(deadline=deadline)
        for call, _ in owned:
            call.scope = scope
        try:
            with scope:
                if batch is None:
                    results = [await first.execute(tool_calls[0])]
                else:
                    results = list(await batch([call.input for call, _ in owned], tool_calls))
            if any(call.lost for call, _ in owned):
                results = [LeaseLost(call.key) for call, _ in owned]
            elif scope.cancelled_caught:
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
        error = results[0]
        if may_retry and isinstance(error, ProviderTransientError):
            self._slow_down(first, error)
            if error.category == "rate_limit" and error.retry_after:
                return error.retry_after
            return 0.1 * (retry + 1)
        await self._settle(owned, results)
        return None

    @staticmethod
    def _slow_down(call: _Call, error: ProviderTransientError) -> None:
        """A rate-limit answer with ``retry_after`` pauses the provider's rate bucket."""
        gate = call.gate
        if error.category == "rate_limit" and error.retry_after and gate is not None:
            if gate.bucket is not None:
                gate.bucket.pause(error.retry_after)

    def _classify(self, call: _Call, error: BaseException) -> tuple[BaseException, bool]:
        """The error a caller sees, and whether its receipt records it as failed."""
        if isinstance(error, ProviderTransientError):
            if error.tool_id is None:
                error.tool_id = call.name
            self._slow_down(call, error)
            return error, False
        if isinstance(error, LeaseLost | PersistenceLatchTripped):
            return error, False
        if not call.record_failures:
            return error, False  # steps and fetches: the caller's own error, not recorded
        if not isinstance(error, TrioplayError):
            wrapped = ToolExecutionError(
                f"{call.operation} {call.name!r} raised {type(error).__name__}: {error}",
                tool_id=call.name,
            )
            wrapped.__cause__ = error
            error = wrapped
        return error, True

    async def _settle(self, owned: list[tuple[_Call, Claimed]], results: list[Any]) -> None:
        """Record each result durably (complete, fail or release), then deliver it."""
        items: list[Completion | Failure | Lease] = []
        delivered: list[tuple[Any, BaseException | None]] = []
        for (call, claim), result in zip(owned, results, strict=True):
            error: BaseException | None = None
            if not isinstance(result, BaseException):
                try:
                    text = dumps(result)
                except (TypeError, ValueError) as exc:
                    error = ToolExecutionError(
                        f"{call.operation} {call.name!r} returned a value that is not JSON: {exc}",
                        tool_id=call.name,
                    )
                    result = error
                else:
                    call.settling = True
                    items.append(Completion(call.key, claim.lease_id, text))
                    delivered.append((text, None))
                    continue
            error, record = self._classify(call, result)
            if record:
                self.stats.failed_calls += 1
                items.append(Failure(call.key, claim.lease_id, dumps(error_to_record(error))))
            else:
                items.append(Lease(call.key, claim.lease_id))
            delivered.append((None, error))
        outcomes = await self._settler.settle_many(items)
        for (call, _), item, (text, error), outcome in zip(
            owned, items, delivered, outcomes, strict=True
        ):
            if isinstance(item, Completion):
                if isinstance(outcome, BaseException):
                    self._deliver(call, error=self._latch_error(call, outcome))
                elif not outcome:
                    self._deliver(call, error=LeaseLost(call.key))
                else:
                    self._deliver(call, loads(text))
                continue
            assert error is not None
            if isinstance(outcome, BaseException) and isinstance(item, Failure):
                error.add_note(f"trioplay: recording this failure also failed: {outcome}")
            # An unreleased lease only delays a rerun until it expires.
            self._deliver(call, error=error)

    def _latch_error(self, call: _Call, cause: BaseException) -> BaseException:
        if self._latch is None:
            self._latch = cause
        error = PersistenceLatchTripped(
            f"{call.operation} {call.name!r} succeeded but its receipt could not be "
            f"recorded ({cause}); no further provider call will start in this run"
        )
        error.__cause__ = cause
        return error

    def _count_start(self, call: _Call, n: int) -> None:
        if call.kind == "provider":
            self.stats.provider_calls += n
        elif call.kind == "fetch":
            self.stats.fetches += n
        else:
            self.stats.steps_run += n

    async def _release_shielded(self, leases: list[Lease]) -> None:
        if not leases:
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._limits.cleanup_timeout
            try:
                await self._store.release_many(leases, now=self._now())
            except Exception:
                pass  # left to expire


def _tool_executor(spec: ToolSpec, input: Any) -> Execute:
    fn = spec.fn

    async def execute(call: ToolCall) -> Any:
        return await fn(input, call)

    return execute


def local_executor(fn: Callable[[], Any]) -> Execute:
    """Wrap a step function (sync, async, or returning an awaitable)."""

    async def execute(_call: ToolCall) -> Any:
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        return value

    return execute


def tool_receipt_key(tool_id: str, canonical_input: str, scope: str) -> str:
    """The content-addressed receipt key of a tool call.

    SHA-256 over the canonical JSON of ``["tool", tool_id, scope]`` followed by
    the canonical JSON of the input: independent of dict key order, of the
    process and of the Python version.
    """
    head = canonical_json(["tool", tool_id, scope]).encode()
    return hashlib.sha256(head + canonical_input.encode()).hexdigest()


def _copy_error(error: Exception) -> Exception:
    duplicate = copy.copy(error)
    duplicate.__cause__ = error.__cause__
    return duplicate.with_traceback(None)


def _owner_gone(call: _Call) -> BaseException:
    return ToolExecutionError(
        f"the {call.operation} {call.name!r} this call followed was cancelled", tool_id=call.name
    )


def _idempotency_key(key: str, lease_id: str | None) -> str:
    material = key if lease_id is None else f"{key}:{lease_id}"
    return hashlib.sha256(material.encode()).hexdigest()[:32]
