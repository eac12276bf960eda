"""The governor: who may call a provider now.

Every provider call passes three gates, in this order, and holds them until
its receipt is durably settled (so the concurrency bounds also bound decoded
results waiting for their write):

1. the provider's own concurrency (``ToolRegistry.tool(concurrency=...)``);
2. the provider's rate (``Rate(n, per)``, see :class:`RatePacer`), which a
   rate-limit answer (``retry_after``) pauses: a call waits for its turn
   before it asks for a global slot, and takes the turn when the slot is
   granted, so the rate holds for the moments calls start;
3. the global ``max_concurrent_external_calls``, shared by tools and fetches
   (every fetch counts as the one provider ``"fetch"``).

Provider gates come first so a slow provider queues on its own gate instead
of occupying global slots other providers could use.

**Fairness of the global slots.** Each provider waits in a queue of its own
(first come, first served); when a slot is released it goes to the next
provider in turn (round robin over the providers that wait). Once more than
one provider has been called in the runtime, no provider holds more than
``Limits.max_provider_share`` of the slots: a provider that hangs keeps at
most its share, and the others go on with the rest. A provider alone may use
every slot. Slots are never taken back from a running call; the share is
what keeps a stuck provider from taking them all in the first place.

**Ctrl-C.** Like Trio's own synchronisation primitives, the governor's
methods are protected from ``KeyboardInterrupt``
(``trio.lowlevel.enable_ki_protection``): landing halfway through its
accounting, Ctrl-C would leave a slot counted for a call that holds none,
or a parked task that will never be woken. It arrives at a checkpoint.
"""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Any, Protocol

import trio

if TYPE_CHECKING:
    from ._phase import RowPhase
    from ._tools import Rate


class Granted(Protocol):
    """``granted(borrower)``: the borrower has its slot now; ``granted(borrower, False)``:
    no slot, wait for it in a task of your own (:meth:`Governor.acquire`). Returns
    ``False`` when the borrower no longer wants it."""

    def __call__(self, borrower: Any, slot: bool = ..., /) -> bool: ...


# A turn a rounding error away has come: the clock may land a hair short of
# the deadline it jumped to, and waiting again for that hair would spin.
_EPSILON = 1e-10


class RatePacer:
    """``Rate(n, per)`` as a generic cell rate algorithm, in Trio time.

    The next call may start at the *theoretical arrival time* ``tat`` (less
    ``burst - 1`` intervals of tolerance); each call moves ``tat`` on by one
    interval, ``per / n``, from its own start. Without a burst no two calls
    start closer than an interval, so no window of ``per`` seconds holds more
    than ``n``. ``lock`` queues the calls that must wait, in arrival order.
    """

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self._interval = rate.interval
        self._tolerance = ((rate.burst or 1) - 1) * self._interval
        self._tat = -math.inf
        self.lock = trio.Lock()

    def _ready(self, now: float) -> bool:
        return now >= self._tat - self._tolerance - _EPSILON

    def take_now(self) -> bool:
        """Take this instant's turn if it has come (the caller holds ``lock``)."""
        now = trio.current_time()
        if not self._ready(now):
            return False
        self._tat = max(self._tat, now) + self._interval
        return True

    def take_nowait(self) -> bool:
        """Take a turn now if one has come and no call is queued for one."""
        return not self.lock.locked() and self.take_now()

    async def wait_ready(self) -> None:
        """Wait until a turn has come, without taking it (the caller holds ``lock``)."""
        while True:
            if self._ready(trio.current_time()):
                return
            # The tat moves only later (a pause), so this sleep is no poll.
            await trio.sleep_until(self._tat - self._tolerance)

    def pause(self, seconds: float) -> None:
        """No call for ``seconds`` (a provider said ``retry_after``), then start without burst."""
        until = trio.current_time() + seconds
        self._tat = max(self._tat, until + self._interval + self._tolerance)


class ProviderGate:
    """One provider: its own limits, the global slots it holds and its queue for more."""

    __slots__ = (
        "bucket",
        "held",
        "known",
        "limiter",
        "name",
        "paused",
        "resume_at",
        "ringed",
        "waiters",
    )

    def __init__(self, name: str, rate: Rate | None, concurrency: int | None) -> None:
        self.name = name
        self.limiter = trio.CapacityLimiter(concurrency) if concurrency else None
        self.bucket = RatePacer(rate) if rate else None
        self.held = 0  # global slots held by its calls
        self.known = False  # counted among the providers called in this runtime
        # Its calls waiting for a global slot, first come first served, and
        # whether it has its place in the governor's round robin.
        self.waiters: collections.deque[_Waiter] = collections.deque()
        self.ringed = False
        # A rate-limit answer pauses it until resume_at (paused: maybe still).
        self.paused = False
        self.resume_at = -math.inf

    def is_paused(self) -> bool:
        """Paused now? (Reads the clock only for a provider that was paused.)"""
        if not self.paused:
            return False
        if trio.current_time() < self.resume_at - _EPSILON:
            return True
        self.paused = False
        return False

    async def wait_unpaused(self) -> None:
        while True:
            if not self.is_paused():
                return
            # resume_at only moves later (another pause), so this is no poll.
            await trio.sleep_until(self.resume_at)


class GlobalSlots:
    """The ``max_concurrent_external_calls`` slots and who holds them."""

    __slots__ = ("_borrowers", "borrowed_tokens", "total_tokens")

    def __init__(self, total: int) -> None:
        self.total_tokens = total
        self.borrowed_tokens = 0
        self._borrowers: set[object] = set()

    @property
    def available_tokens(self) -> int:
        return self.total_tokens - self.borrowed_tokens

    def take(self, gate: ProviderGate, borrower: object) -> None:
        """A slot for ``borrower``, a call of ``gate``'s provider."""
        if borrower in self._borrowers:
            raise RuntimeError(f"{borrower!r} already holds a global slot")
        self._borrowers.add(borrower)
        self.borrowed_tokens += 1
        gate.held += 1

    def give_back(self, gate: ProviderGate, borrower: object) -> None:
        try:
            self._borrowers.remove(borrower)
        except KeyError:
            raise RuntimeError(f"{borrower!r} holds no global slot") from None
        self.borrowed_tokens -= 1
        gate.held -= 1


class _Waiter:
    """A call waiting for a global slot.

    ``grant()`` gives it the slot; ``grant(slot=False)`` sends it away
    without one, to wait in a task of its own (its provider was paused).
    Either returns ``False`` when the call is no longer there.
    """

    __slots__ = ("borrower",)

    def __init__(self, borrower: object) -> None:
        self.borrower = borrower

    def grant(self, slot: bool = True) -> bool:
        raise NotImplementedError


class _Queued(_Waiter):
    """A borrower without a task waiting for it (see :meth:`Governor.acquire_or_queue`)."""

    __slots__ = ("granted", "row")

    def __init__(self, borrower: Any, granted: Granted, row: RowPhase | None) -> None:
        self.borrower = borrower
        self.granted = granted
        self.row = row

    def grant(self, slot: bool = True) -> bool:
        if self.row is not None:
            self.row.enter("resolver")
        if slot:
            return self.granted(self.borrower)
        return self.granted(self.borrower, False)


class _Parked(_Waiter):
    """A task parked in :meth:`Governor.acquire` until it is granted a slot (or sent away)."""

    __slots__ = ("gone", "granted", "task", "woken")

    def __init__(self, borrower: object) -> None:
        super().__init__(borrower)
        self.task: trio.lowlevel.Task | None = None
        self.woken = False
        self.granted = False
        self.gone = False  # cancelled while it waited: its place is skipped

    def grant(self, slot: bool = True) -> bool:
        if self.gone:
            return False
        self.woken = True
        self.granted = slot
        task, self.task = self.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)
        return True

    async def wait(self) -> None:
        if self.woken:
            return

        def abort(_: object) -> trio.lowlevel.Abort:
            self.gone = True
            self.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        self.task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(abort)


class Governor:
    """Admits provider calls and fetches; one per runtime, shared by its runs."""

    def __init__(self, max_concurrent_external_calls: int, max_provider_share: float = 0.5) -> None:
        self.external = GlobalSlots(max_concurrent_external_calls)
        self._cap = max_concurrent_external_calls
        # The most slots one provider may hold once a second one is known.
        self._share = max(1, math.ceil(max_provider_share * max_concurrent_external_calls))
        self._limit = self._cap  # the most slots one provider may hold now
        self._known = 0
        self._providers: dict[str, ProviderGate] = {}
        self._fetch = ProviderGate("fetch", None, None)
        # Providers with calls waiting for a slot, in turn.
        self._ring: collections.deque[ProviderGate] = collections.deque()

    @trio.lowlevel.enable_ki_protection
    def gate(self, provider: str, rate: Rate | None, concurrency: int | None) -> ProviderGate:
        """The gate of ``provider``; the first tool to name a provider sets its limits.

        Asking for a gate counts the provider as called (the dispatcher asks
        when the first call to it is made), so the share applies from the
        moment a second provider is called, before either holds a slot.
        """
        gate = self._providers.get(provider)
        if gate is None:
            gate = self._providers[provider] = ProviderGate(provider, rate, concurrency)
            self._know(gate)
        return gate

    @staticmethod
    def is_unlimited(gate: ProviderGate | None) -> bool:
        """True when ``gate``'s provider has no concurrency or rate of its own.

        Fetches (``gate=None``) have none. A call of such a provider waits
        only for a global slot, so it may take one through
        :meth:`acquire_or_queue`, without a task waiting for it; a call of a
        provider with limits of its own waits for them in :meth:`acquire`.
        """
        return gate is None or (gate.limiter is None and gate.bucket is None)

    def _know(self, gate: ProviderGate) -> None:
        gate.known = True
        self._known += 1
        if self._known > 1:
            self._limit = self._share

    def _resolve(self, gate: ProviderGate | None) -> ProviderGate:
        if gate is not None:
            return gate
        fetch = self._fetch
        if not fetch.known:
            self._know(fetch)
        return fetch

    def _free_for(self, gate: ProviderGate) -> bool:
        """A slot is free for ``gate`` now, and no call of its own waits for one."""
        return (
            self.external.borrowed_tokens < self._cap
            and gate.held < self._limit
            and not gate.waiters
            and not (gate.paused and gate.is_paused())
        )

    @trio.lowlevel.enable_ki_protection
    def try_acquire(self, gate: ProviderGate | None, borrower: object) -> bool:
        """Pass every gate now if none would make us wait (no checkpoint)."""
        provider = gate if gate is not None else self._resolve(gate)
        if not self._free_for(provider):
            return False
        limiter = provider.limiter
        if limiter is not None:
            try:
                limiter.acquire_on_behalf_of_nowait(borrower)
            except trio.WouldBlock:
                return False
        bucket = provider.bucket
        if bucket is not None and not bucket.take_nowait():
            if limiter is not None:
                limiter.release_on_behalf_of(borrower)
            return False
        self.external.take(provider, borrower)
        return True

    @trio.lowlevel.enable_ki_protection
    async def acquire(
        self, gate: ProviderGate | None, borrower: object, row: RowPhase | None = None
    ) -> None:
        """Pass every gate on behalf of ``borrower``; on cancellation nothing stays held.

        The slot belongs to ``borrower``, not to the calling task, so another
        task (the settler, once the receipt is written) may release it. The
        uncontended case returns without a scheduler round trip: on the hot
        path of a map every avoided checkpoint is throughput. While it
        waits, ``row`` (the map row the call is for, if any) is in phase
        ``governor``.
        """
        if self.try_acquire(gate, borrower):
            return
        if row is not None:
            row.enter("governor")
        try:
            await self._acquire_waiting(self._resolve(gate), borrower)
        finally:
            if row is not None:
                row.enter("resolver")

    async def _acquire_waiting(self, provider: ProviderGate, borrower: object) -> None:
        limiter = provider.limiter
        if limiter is not None:
            await limiter.acquire_on_behalf_of(borrower)
        try:
            pacer = provider.bucket
            if pacer is None:
                while True:
                    await provider.wait_unpaused()
                    if await self._slot(provider, borrower):
                        return
            # Wait for the turn without a global slot, then for the slot; the
            # turn is taken when the slot is granted, so the rate counts call
            # starts. Holding the lock, no other call of ours takes the turn
            # meanwhile; only a pause can (then we give the slot back).
            async with pacer.lock:
                while True:
                    await provider.wait_unpaused()
                    await pacer.wait_ready()
                    if not await self._slot(provider, borrower):
                        continue
                    if pacer.take_now():
                        return
                    self._give_back(provider, borrower)
        except BaseException:
            if limiter is not None:
                limiter.release_on_behalf_of(borrower)
            raise

    async def _slot(self, gate: ProviderGate, borrower: object) -> bool:
        """Wait in ``gate``'s queue for a global slot; ``False``: sent away by a pause."""
        if self._free_for(gate):
            self.external.take(gate, borrower)
            return True
        waiter = _Parked(borrower)
        self._enqueue(gate, waiter)
        await waiter.wait()
        return waiter.granted

    @trio.lowlevel.enable_ki_protection
    def acquire_or_queue(
        self,
        borrower: Any,
        granted: Granted,
        gate: ProviderGate | None = None,
        row: RowPhase | None = None,
    ) -> bool:
        """Take a global slot for ``borrower`` now (``True``), or queue for one.

        For calls whose provider (``gate``; ``None`` for fetches) has no
        limits of its own (:meth:`is_unlimited`). A queued borrower gets the
        slot when one is free for it: ``granted(borrower)`` runs then, and
        returns ``False`` if the slot is no longer wanted (it goes to the next
        waiter at once). Nothing waits in a task, so the owner wakes once. While the provider is
        paused (:meth:`slow_down`) the borrower is sent away instead, now or
        when the pause begins: ``granted(borrower, False)``, and its owner
        waits in :meth:`acquire`. While it is queued, ``row`` (the map row
        the call is for, if any) is in phase ``governor``.
        """
        provider = gate if gate is not None else self._resolve(gate)
        if self._free_for(provider):
            self.external.take(provider, borrower)
            return True
        if provider.is_paused():
            granted(borrower, False)
            return False
        if row is not None:
            row.enter("governor")
        self._enqueue(provider, _Queued(borrower, granted, row))
        return False

    def _enqueue(self, gate: ProviderGate, waiter: _Waiter) -> None:
        gate.waiters.append(waiter)
        if gate.held < self._limit:
            if not gate.ringed:
                gate.ringed = True
                self._ring.append(gate)
            if self.external.borrowed_tokens < self._cap:
                # Only a place left by a cancelled waiter kept it from the
                # slot; serve the queue now rather than at the next release.
                self._dispatch()

    @trio.lowlevel.enable_ki_protection
    def slow_down(self, gate: ProviderGate | None, retry_after: float) -> None:
        """A rate-limit answer: start no call of ``gate``'s provider for ``retry_after`` seconds.

        Every provider pauses, whether or not it declared a rate; its rate's
        pace starts again one interval after the pause, without burst. Calls
        already queued for a slot are sent away to wait out the pause in
        their own tasks (a pause needs a clock, and only a task has one).
        Fetches (``gate=None``) are not paused: their answers are returned
        to the play as they are.
        """
        if gate is None or not 0 < retry_after < math.inf:
            return
        resume_at = trio.current_time() + retry_after
        if resume_at > gate.resume_at:
            gate.resume_at = resume_at
        gate.paused = True
        if gate.bucket is not None:
            gate.bucket.pause(retry_after)
        waiters, gate.waiters = gate.waiters, collections.deque()
        for waiter in waiters:
            waiter.grant(slot=False)

    @trio.lowlevel.enable_ki_protection
    def release(self, gate: ProviderGate | None, borrower: object) -> None:
        provider = gate if gate is not None else self._fetch
        self._give_back(provider, borrower)
        if provider.limiter is not None:
            provider.limiter.release_on_behalf_of(borrower)

    def _give_back(self, gate: ProviderGate, borrower: object) -> None:
        """Return ``borrower``'s global slot and hand free slots on."""
        self.external.give_back(gate, borrower)
        if gate.waiters and not gate.ringed:
            # Below its share again: back in turn.
            gate.ringed = True
            self._ring.append(gate)
        if self._ring:
            self._dispatch()

    def _dispatch(self) -> None:
        """Give free slots to waiting providers in turn, each its first waiter."""
        ring = self._ring
        slots = self.external
        while ring and slots.borrowed_tokens < self._cap:
            gate = ring.popleft()
            if not gate.waiters or gate.held >= self._limit:
                # Nothing to give, or at its share: it is back in turn when
                # one of its own slots is released.
                gate.ringed = False
                continue
            waiter = gate.waiters.popleft()
            self.external.take(gate, waiter.borrower)
            if not waiter.grant():
                self.external.give_back(gate, waiter.borrower)
                if gate.waiters:
                    ring.appendleft(gate)  # its turn is not used up
                else:
                    gate.ringed = False
                continue
            if gate.waiters:
                ring.append(gate)
            else:
                gate.ringed = False
