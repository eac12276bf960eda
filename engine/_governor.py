"""The governor: who may call a provider now.

Every provider call passes three gates, in this order, and holds them until
its receipt is durably settled (so the concurrency bounds also bound decoded
results waiting for their write):

1. the provider's own concurrency (``ToolRegistry.tool(concurrency=...)``);
2. the provider's rate (``Rate(n, per)``, a token bucket in Trio time), which
   a rate-limit answer (``retry_after``) pauses;
3. the global ``max_concurrent_external_calls``, shared by tools and fetches.

Provider gates come first so a slow provider queues on its own gate instead
of occupying global slots other providers could use.
"""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._tools import Rate


# A token a rounding error short of whole is whole: otherwise the wait for the
# missing 1e-16 of a token rounds to no time at all and the waiter spins.
_WHOLE = 1 - 1e-9


class TokenBucket:
    """``Rate(n, per)``: ``capacity`` tokens, refilled at ``n / per`` per second.

    Waiters are served in arrival order (a Trio lock is FIFO).
    """

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self._capacity = rate.capacity
        self._interval = rate.per / rate.n
        self._tokens = self._capacity
        self._updated = trio.current_time()
        self._paused_until = -math.inf
        self._lock = trio.Lock()

    def _refill(self, now: float) -> None:
        elapsed = now - self._updated
        if elapsed > 0:
            self._tokens = min(self._capacity, self._tokens + elapsed / self._interval)
            self._updated = now

    async def take(self) -> None:
        async with self._lock:
            while True:
                now = trio.current_time()
                if now < self._paused_until:
                    await trio.sleep_until(self._paused_until)
                    continue
                self._refill(now)
                if self._tokens >= _WHOLE:
                    self._tokens = max(0.0, self._tokens - 1)
                    return
                await trio.sleep_until(now + (1 - self._tokens) * self._interval)

    def take_nowait(self) -> bool:
        """Take a token if one is there and nobody is queued or paused."""
        if self._lock.locked():
            return False
        now = trio.current_time()
        if now < self._paused_until:
            return False
        self._refill(now)
        if self._tokens >= _WHOLE:
            self._tokens = max(0.0, self._tokens - 1)
            return True
        return False

    def pause(self, seconds: float) -> None:
        """Take no call for ``seconds`` (a provider said ``retry_after``); drop saved burst."""
        now = trio.current_time()
        self._paused_until = max(self._paused_until, now + seconds)
        self._tokens = 0
        self._updated = max(self._updated, self._paused_until)


class ProviderGate:
    """The concurrency limit and rate of one provider."""

    def __init__(self, name: str, rate: Rate | None, concurrency: int | None) -> None:
        self.name = name
        self.limiter = trio.CapacityLimiter(concurrency) if concurrency else None
        self.bucket = TokenBucket(rate) if rate else None


class Governor:
    """Admits provider calls and fetches; one per runtime, shared by its runs."""

    def __init__(self, max_concurrent_external_calls: int) -> None:
        self.external = trio.CapacityLimiter(max_concurrent_external_calls)
        self._providers: dict[str, ProviderGate] = {}
        # Borrowers waiting for a global slot without a task of their own
        # waiting (see acquire_or_queue), first come first served.
        self._queued: collections.deque[tuple[Any, Callable[[Any], bool]]] = collections.deque()

    def gate(self, provider: str, rate: Rate | None, concurrency: int | None) -> ProviderGate:
        """The gate of ``provider``; the first tool to name a provider sets its limits."""
        gate = self._providers.get(provider)
        if gate is None:
            gate = self._providers[provider] = ProviderGate(provider, rate, concurrency)
        return gate

    def try_acquire(self, gate: ProviderGate | None, borrower: object) -> bool:
        """Pass every gate now if none would make us wait (no checkpoint)."""
        limiter = gate.limiter if gate is not None else None
        bucket = gate.bucket if gate is not None else None
        if limiter is not None:
            try:
                limiter.acquire_on_behalf_of_nowait(borrower)
            except trio.WouldBlock:
                return False
        if (bucket is None or bucket.take_nowait()) and self._external_nowait(borrower):
            return True
        if limiter is not None:
            limiter.release_on_behalf_of(borrower)
        return False

    def _external_nowait(self, borrower: object) -> bool:
        try:
            self.external.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            return False
        return True

    async def acquire(self, gate: ProviderGate | None, borrower: object) -> None:
        """Pass every gate on behalf of ``borrower``; on cancellation nothing stays held.

        The slot belongs to ``borrower``, not to the calling task, so another
        task (the settler, once the receipt is written) may release it. The
        uncontended case returns without a scheduler round trip: on the hot
        path of a map every avoided checkpoint is throughput.
        """
        if self.try_acquire(gate, borrower):
            return
        if gate is not None and gate.limiter is not None:
            await gate.limiter.acquire_on_behalf_of(borrower)
        try:
            if gate is not None and gate.bucket is not None:
                await gate.bucket.take()
            await self.external.acquire_on_behalf_of(borrower)
        except BaseException:
            if gate is not None and gate.limiter is not None:
                gate.limiter.release_on_behalf_of(borrower)
            raise

    def acquire_or_queue(self, borrower: Any, granted: Callable[[Any], bool]) -> bool:
        """Take a global slot for ``borrower`` now (``True``), or queue for one.

        For calls whose provider has no limits of its own. A queued borrower
        gets the slot when one is released: ``granted(borrower)`` runs then,
        and returns ``False`` if the slot is no longer wanted (it is released
        again at once). Nothing waits in a task, so the owner wakes once.
        """
        if not self._queued and self._external_nowait(borrower):
            return True
        self._queued.append((borrower, granted))
        return False

    def release(self, gate: ProviderGate | None, borrower: object) -> None:
        self.external.release_on_behalf_of(borrower)
        if gate is not None and gate.limiter is not None:
            gate.limiter.release_on_behalf_of(borrower)
        queued = self._queued
        while queued and self._external_nowait(queued[0][0]):
            waiter, granted = queued.popleft()
            if not granted(waiter):
                self.external.release_on_behalf_of(waiter)
