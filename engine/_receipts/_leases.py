"""The leases of claimed calls: one heartbeat task per run, and release under a shield."""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

import trio

from .._records import Lease
from .._trace._records import LeaseLost, LeaseRenewed
from ._call import CLAIMED, LOST, SETTLING

if TYPE_CHECKING:
    from .._records import Claimed
    from ._call import _Call, _Cohort
    from ._setup import DispatchSetup

log = logging.getLogger("trioplay")


class Leases:
    """Renews and gives back the receipt leases of one run's claimed calls."""

    def __init__(self, setup: DispatchSetup) -> None:
        self._trace = setup.trace
        self._store = setup.store
        self._now = setup.wall_clock
        self._lease_ttl = setup.limits.lease_ttl
        self._interval = setup.limits.lease_ttl / 2
        self._cleanup = setup.cleanup
        # Watched cohorts, oldest first: (when their renewal is due, cohort).
        self._watched: collections.deque[tuple[float, _Cohort]] = collections.deque()
        self._wakeup = trio.Event()  # a cohort was watched while none was

    def watch(self, cohort: _Cohort) -> None:
        """Keep the leases of ``cohort``'s calls (claimed together) until they all settle."""
        watched = self._watched
        if not watched:
            self._wakeup.set()
        watched.append((trio.current_time() + self._interval, cohort))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The run's heartbeat: renew each watched cohort's leases every ``lease_ttl / 2``.

        One task for the run, not one per cohort: cohorts are watched in the
        order they were claimed, which is the order their renewals fall due,
        so the task sleeps until the oldest is due and renews every cohort due
        by then in one store call. A cohort that settled meanwhile is dropped.
        """
        task_status.started()
        watched = self._watched
        while True:
            if not watched:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            due, cohort = watched[0]
            if not cohort.remaining:
                watched.popleft()
                continue
            await trio.sleep_until(due)
            now = trio.current_time()
            renewing: list[_Cohort] = []
            while watched and watched[0][0] <= now:
                _, cohort = watched.popleft()
                if cohort.remaining:
                    renewing.append(cohort)
            await self._renew([call for cohort in renewing for call in cohort.calls])
            due = trio.current_time() + self._interval
            for cohort in renewing:
                if cohort.remaining and any(call.state is CLAIMED for call in cohort.calls):
                    watched.append((due, cohort))

    async def _renew(self, calls: list[_Call]) -> None:
        """Renew the leases of ``calls`` in one store call.

        Calls whose completion is being written are skipped, and a lease that
        vanished because its own completion landed is no loss. A renewal that
        shows a lease gone cancels that call's scope: it ends with ``LeaseLost``.
        """
        live = [c for c in calls if c.state is CLAIMED]
        if not live:
            return
        try:
            expiries = await self._store.heartbeat_many(
                [Lease(c.key, c.lease_id) for c in live],
                lease_ttl=self._lease_ttl,
                now=self._now(),
            )
        except Exception as exc:
            # The next renewal may succeed; the pre-call check and the
            # fenced completion stay safe meanwhile.
            log.warning("lease heartbeat failed: %s", exc)
            return
        lost = 0
        for call, expiry in zip(live, expiries, strict=True):
            if expiry is not None:
                call.expires_at = expiry
            elif call.state is CLAIMED:
                call.state = LOST
                lost += 1
                if self._trace is not None:
                    self._trace.add(LeaseLost, call.key)
                if call.scope is not None:
                    call.scope.cancel()
        if self._trace is not None:
            self._trace.add(LeaseRenewed, len(live) - lost, lost)

    async def release_shielded(self, leases: list[Lease]) -> None:
        """Give ``leases`` back, even while cancelled (within the run's cleanup budget)."""
        if not leases:
            return
        with self._cleanup.shielded():
            try:
                await self._store.release_many(leases, now=self._now())
            except Exception:
                pass  # left to expire


def take_unsettled(owned: list[tuple[_Call, Claimed]]) -> list[Lease]:
    """The leases of calls not yet handed to the settler, taken from the calls.

    Whoever takes them gives them back; a call's owner, leaving with no
    claim on its call, then releases nothing more (``Executor.run_owned``).
    """
    leases = []
    for call, claim in owned:
        if call.state is not SETTLING:
            call.claim = None
            leases.append(Lease(call.key, claim.lease_id))
    return leases
