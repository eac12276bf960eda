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
   call (a call of a provider without limits of its own gets its slot as
   it is claimed, see ``_admit``); it runs under its timeout with the
   provider idempotency key (retried within the claim if the tool allows
   ``retries``). The result goes to the caller at once; its settlement
   (complete, fail or release) goes to the settler, which coalesces the
   writes of many calls into one store call. The governor slot, and the
   call's place in flight, are held until that write is done.

If recording a completion fails after the provider succeeded, the
persistence latch trips: no further provider call starts in this run and
the run fails with :class:`PersistenceLatchTripped`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import logging
import math
from collections.abc import Awaitable, Callable
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
from ._phase import calling
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
    from ._phase import RowPhase
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
        "delivered",
        "error",
        "execute",
        "expires_at",
        "followers",
        "force",
        "gate",
        "input",
        "key",
        "kind",
        "lease_id",
        "lost",
        "name",
        "operation",
        "owner",
        "receipt_wait",
        "record_failures",
        "retries",
        "row",
        "scope",
        "settling",
        "size",
        "slotted",
        "stale_after",
        "timeout",
        "value",
        "woken",
    )

    def __init__(
        self,
        *,
        operation: str,
        name: str,
        key: str,
        execute: Callable[..., Awaitable[Any]],  # a tool's fn(input, call), else fn(call)
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
        row: RowPhase | None = None,
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
        self.row = row  # the map row whose task makes the call (stall phases)
        self.delivered = False  # the result (or error) is in value (or error)
        self.followers: trio.Event | None = None  # set on delivery, for identical calls
        # Its owner waits (parked) until the call is delivered or is its to run.
        self.owner: trio.lowlevel.Task | None = None
        self.woken = False
        self.claim: Claimed | None = None
        self.cohort: _Cohort | None = None
        self.value: Any = None
        self.error: BaseException | None = None
        self.settling = False  # its completion write is in flight (heartbeats skip it)
        self.lease_id = ""  # set when claimed
        self.expires_at = math.inf  # the last confirmed expiry of our lease
        self.lost = False  # a heartbeat found the lease gone
        self.scope: trio.CancelScope | None = None  # cancelled when the lease is lost
        self.slotted = False  # its governor slot was taken for its owner (see _admit)


class _Cohort:
    """Calls claimed together: one heartbeat keeps their leases until all settle."""

    __slots__ = ("remaining", "settled")

    def __init__(self, size: int) -> None:
        self.remaining = size
        self.settled = trio.Event()


class _Settler:
    """Writes the settlements (complete, fail, release) of many calls in few store calls.

    A call's owner hands its settlement over and goes on: its result is
    delivered at once, while the governor slot and the call's in-flight entry
    stay taken until the write is done (``on_settled``, then the slot's
    release). So the concurrency limit still bounds results waiting for
    their write, and the owner's task costs no second scheduler round trip.
    """

    def __init__(
        self,
        store: Store,
        now: Callable[[], float],
        cleanup_timeout: float,
        on_settled: Callable[[_Call, Completion | Failure | Lease, bool | BaseException], None],
        release_slot: Callable[[_Slot], None],
    ) -> None:
        self._store = store
        self._now = now
        self._cleanup_timeout = cleanup_timeout
        self._on_settled = on_settled
        self._release_slot = release_slot
        self._pending: list[_Entry] = []
        self._writing: list[_Entry] = []
        self._wakeup = trio.Event()
        # Entries ever handed over, and how many of the first ones are written:
        # batches are written in order, so "written >= n" covers the first n.
        self._submitted = 0
        self._written = 0
        self._progress = trio.Event()  # set (and replaced) each time a batch is written

    def submit(
        self, entries: list[tuple[Completion | Failure | Lease, _Call]], slot: _Slot | None
    ) -> None:
        """Queue ``entries`` for the next write; ``slot`` is released once all are written."""
        group = _Group(len(entries), slot)
        self._pending.extend((item, call, group) for item, call in entries)
        self._submitted += len(entries)
        self._wakeup.set()

    async def written_up_to_now(self) -> None:
        """Wait until every settlement handed over before this call is written (or failed)."""
        mark = self._submitted
        while self._written < mark:
            await self._progress.wait()

    async def drain(self) -> None:
        """Wait until no settlement is left, including any handed over meanwhile."""
        while self._written < self._submitted:
            await self._progress.wait()

    def _advance(self, count: int) -> None:
        self._written += count
        self._progress.set()
        self._progress = trio.Event()

    async def run(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                self._writing, self._pending = self._pending, []
                count = len(self._writing)
                await self._write(self._writing)
                self._advance(count)
        except trio.Cancelled:
            # Settlements of paid calls are worth one bounded, shielded try;
            # a write cut short by the cancellation is tried again (a
            # settlement is fenced by its lease, so writing it twice is harmless).
            batch = self._writing + self._pending
            self._writing, self._pending = [], []
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + self._cleanup_timeout
                await self._write(batch)
            # Written or not, nothing more will be: release whoever waits on them.
            self._advance(self._submitted - self._written)
            raise

    async def _write(self, batch: list[_Entry]) -> None:
        """Write ``batch``; entries leave it as they settle (a cancelled write leaves the rest)."""
        kinds: dict[type, list[_Entry]] = {Completion: [], Failure: [], Lease: []}
        for entry in batch:
            kinds[type(entry[0])].append(entry)
        store = self._store
        writes: tuple[Callable[..., Awaitable[list[bool]]], ...] = (
            store.complete_many,
            store.fail_many,
            store.release_many,
        )
        for write, entries in zip(writes, kinds.values(), strict=True):
            if not entries:
                continue
            outcomes: list[bool | BaseException]
            try:
                outcomes = list(await write([entry[0] for entry in entries], now=self._now()))
            except Exception as exc:
                outcomes = [exc] * len(entries)
            written = {id(entry) for entry in entries}
            batch[:] = [entry for entry in batch if id(entry) not in written]
            for (item, call, group), outcome in zip(entries, outcomes, strict=True):
                self._on_settled(call, item, outcome)
                group.remaining -= 1
                if group.remaining == 0 and group.slot is not None:
                    self._release_slot(group.slot)


_Slot = tuple["ProviderGate | None", object]  # a governor slot: the gate and its borrower


class _Group:
    """The settlements of one execution, which share one governor slot."""

    __slots__ = ("remaining", "slot")

    def __init__(self, remaining: int, slot: _Slot | None) -> None:
        self.remaining = remaining
        self.slot = slot


_Entry = tuple[Completion | Failure | Lease, _Call, _Group]


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
        self._settler = _Settler(
            store, wall_clock, limits.cleanup_timeout, self._on_settled, self._release_slot
        )
        self._latch: BaseException | None = None
        self.stats = DispatchStats()
        nursery.start_soon(self._settler.run)

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._nursery.start_soon(fn, *args)

    @property
    def latch(self) -> BaseException | None:
        """The error that tripped the persistence latch, if it tripped."""
        return self._latch

    async def drain(self) -> None:
        """Wait until every result delivered so far is durably settled (or failed to be)."""
        await self._settler.drain()

    async def settled_up_to_now(self) -> None:
        """Wait until the receipts of every result delivered before now are written.

        The terminal-row writer waits for this before each batch, so a row
        never commits before the receipts of the calls it used.
        """
        await self._settler.written_up_to_now()

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
            execute=spec.fn,
            gate=gate,
            kind="provider",
            input=input,
            size=len(text),
            force=force,
            stale_after=stale_after,
            timeout=timeout if timeout is not None else spec.timeout,
            receipt_wait=receipt_wait,
            retries=spec.retries,
            row=calling(tool_id, spec.provider),
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
            row=calling("fetch", "fetch") if kind == "fetch" else None,
        )
        self._inflight[key] = call
        try:
            await self.process([call], inline=True)
        except BaseException:
            if not call.delivered:
                self._deliver(call, error=_owner_gone(call))
            raise
        return await self._run_owned(call)

    async def _run_owned(self, call: _Call) -> Any:
        """Wait for the claim of our own call; if it is ours to run, run it here.

        Running the provider call in the caller's task costs no task of its
        own, and cancelling the caller cancels exactly its call.
        """
        try:
            await _wait_for_turn(call)
            if not call.delivered:
                claim = call.claim
                assert claim is not None
                await self._execute([(call, claim)], None)
        finally:
            lease: Lease | None = None
            if not call.delivered:
                if call.claim is not None and not call.settling:
                    lease = Lease(call.key, call.claim.lease_id)
                # Delivered first: from now on the governor grants it no slot.
                self._deliver(call, error=_owner_gone(call))
            if call.slotted:  # admitted, but never executed
                call.slotted = False
                self._release_slot((call.gate, call))
            if call.row is not None:
                call.row.called()
            if lease is not None:
                await self._release_shielded([lease])
        return self._outcome(call)

    async def _result_of(self, call: _Call) -> Any:
        if not call.delivered:
            if call.followers is None:
                call.followers = trio.Event()
            await call.followers.wait()
        return self._outcome(call)

    @staticmethod
    def _outcome(call: _Call) -> Any:
        if call.error is not None:
            raise call.error
        return call.value

    def _deliver(self, call: _Call, value: Any = None, error: BaseException | None = None) -> None:
        call.value = value
        call.error = error
        if not call.settling:
            self._forget(call)
        call.delivered = True
        if call.followers is not None:
            call.followers.set()
        _wake(call)
        cohort = call.cohort
        if cohort is not None:
            cohort.remaining -= 1
            if cohort.remaining == 0:
                cohort.settled.set()

    def _forget(self, call: _Call) -> None:
        """The key is no longer in flight: an identical call from now on claims again."""
        if self._inflight.get(call.key) is call:
            del self._inflight[call.key]

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
        # A caller cancelled while its claim was in flight is gone: nobody
        # runs its call, so its lease goes back (and it takes no slot).
        gone = [Lease(call.key, claim.lease_id) for call, claim in owned if call.delivered]
        if gone:
            owned = [(call, claim) for call, claim in owned if not call.delivered]
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
                    self._admit(call)  # its owner runs it (see _run_owned)
        if settled:
            await self._hydrate(settled)
        if gone:
            await self._release_shielded(gone)

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
            live = [c for c in calls if not (c.settling or c.lost or c.delivered)]
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
                elif not (call.settling or call.delivered):
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
        gated = first.kind != "local"
        tries_left = first.retries if batch is None else 0
        retry = 0
        while True:
            if first.slotted:
                first.slotted = False  # taken for us by _admit; ours to release now
            elif gated:
                try:
                    await self._governor.acquire(
                        first.gate, first, first.row if batch is None else None
                    )
                except trio.Cancelled:
                    await self._release_shielded(_leases(owned))
                    raise
            handed_over = False
            try:
                delay = await self._execute_admitted(owned, batch, retry, retry < tries_left)
                handed_over = delay is None  # the settler releases the slot
            except trio.Cancelled:
                await self._release_shielded(_leases(owned))
                raise
            finally:
                if gated and not handed_over:
                    self._release_slot((first.gate, first))
            if delay is None:
                return
            retry += 1
            try:
                await trio.sleep(delay)
            except trio.Cancelled:
                await self._release_shielded(_leases(owned))
                raise

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
        if self._latch is not None and first.kind != "local":
            latch = PersistenceLatchTripped(
                f"no new provider call: an earlier completion could not be recorded ({self._latch})"
            )
            self._settle(owned, [latch] * len(owned))
            return None
        now = self._now()
        if any(call.lost or call.expires_at <= now for call, _ in owned):
            # Cheap ownership check from the last confirmed expiry: never call a
            # provider for a receipt that may have a new owner by now.
            self._settle(owned, [LeaseLost(call.key) for call, _ in owned])
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
                if batch is None and first.operation == "tool":
                    results = [await first.execute(first.input, tool_calls[0])]
                elif batch is None:
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

    def _settle(self, owned: list[tuple[_Call, Claimed]], results: list[Any]) -> None:
        """Deliver each result and hand its settlement (complete, fail or release) to the settler.

        The caller gets a completed result as it will replay (parsed back from
        its JSON). Until the write is done the call stays in flight, so an
        identical call follows it instead of finding its receipt still leased.
        """
        entries: list[tuple[Completion | Failure | Lease, _Call]] = []
        for (call, claim), result in zip(owned, results, strict=True):
            call.settling = True
            if not isinstance(result, BaseException):
                try:
                    text = dumps(result)
                except (TypeError, ValueError) as exc:
                    result = ToolExecutionError(
                        f"{call.operation} {call.name!r} returned a value that is not JSON: {exc}",
                        tool_id=call.name,
                    )
                else:
                    entries.append((Completion(call.key, claim.lease_id, text), call))
                    self._deliver(call, loads(text))
                    continue
            error, record = self._classify(call, result)
            if record:
                self.stats.failed_calls += 1
                entries.append(
                    (Failure(call.key, claim.lease_id, dumps(error_to_record(error))), call)
                )
            else:
                # An unreleased lease only delays a rerun until it expires.
                entries.append((Lease(call.key, claim.lease_id), call))
            self._deliver(call, error=error)
        first = owned[0][0]
        self._settler.submit(entries, (first.gate, first) if first.kind != "local" else None)

    def _on_settled(
        self, call: _Call, item: Completion | Failure | Lease, outcome: bool | BaseException
    ) -> None:
        """A settlement was written (``True``), fenced off (``False``) or failed (an error)."""
        self._forget(call)
        if isinstance(item, Completion):
            if isinstance(outcome, BaseException):
                if self._latch is None:
                    self._latch = outcome
                log.error(
                    "%s %r succeeded but its receipt could not be recorded (%s); "
                    "no further provider call will start in this run",
                    call.operation,
                    call.name,
                    outcome,
                )
            elif not outcome:
                log.warning(
                    "%s %r: its lease was taken over before its result was recorded; "
                    "the receipt keeps the new owner's result",
                    call.operation,
                    call.name,
                )
        elif isinstance(item, Failure) and isinstance(outcome, BaseException):
            log.warning(
                "%s %r: recording its failure also failed: %s", call.operation, call.name, outcome
            )

    def _admit(self, call: _Call) -> None:
        """Let the owner of a claimed call run it, its governor slot taken here when possible.

        Taking the slot for the owner (now, or as soon as a release frees one)
        wakes the owner once, for its claim and its slot together. Calls to a
        provider with a rate or concurrency limit of its own, and steps, wait
        for their gates in their owner's task instead.
        """
        gate = call.gate
        unlimited = gate is None or (gate.limiter is None and gate.bucket is None)
        if call.kind != "local" and unlimited:
            if not self._governor.acquire_or_queue(call, self._granted, gate, call.row):
                return
            call.slotted = True
        _wake(call)

    @staticmethod
    def _granted(call: _Call, slot: bool = True) -> bool:
        if call.delivered:
            return False  # its owner is gone: the governor takes the slot back
        call.slotted = slot  # without a slot (paused provider): it waits in _execute
        _wake(call)
        return True

    def _release_slot(self, slot: _Slot) -> None:
        gate, borrower = slot
        self._governor.release(gate, borrower)

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


async def _wait_for_turn(call: _Call) -> None:
    """Park the owner until its call is delivered or is its to run (see :func:`_wake`).

    One parked task and one reschedule: cheaper than an Event per call.
    """
    if call.woken:
        await trio.lowlevel.checkpoint()
        return

    def abort(_: object) -> trio.lowlevel.Abort:
        call.owner = None
        return trio.lowlevel.Abort.SUCCEEDED

    call.owner = trio.lowlevel.current_task()
    await trio.lowlevel.wait_task_rescheduled(abort)


def _wake(call: _Call) -> None:
    """Let the owner of ``call`` go on, now or as soon as it waits."""
    call.woken = True
    owner, call.owner = call.owner, None
    if owner is not None:
        trio.lowlevel.reschedule(owner)


def _leases(owned: list[tuple[_Call, Claimed]]) -> list[Lease]:
    """The leases of calls not yet handed to the settler."""
    return [Lease(call.key, claim.lease_id) for call, claim in owned if not call.settling]


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
    return _key_hasher(tool_id, scope)(canonical_input)


@functools.lru_cache(maxsize=1024)
def _key_hasher(tool_id: str, scope: str) -> Callable[[str], str]:
    """The key function of one tool in one scope, its head hashed once."""
    head = hashlib.sha256(canonical_json(["tool", tool_id, scope]).encode())

    def key(canonical_input: str) -> str:
        digest = head.copy()
        digest.update(canonical_input.encode())
        return digest.hexdigest()

    return key


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
