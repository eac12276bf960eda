"""The leases of claimed calls: one heartbeat per cohort, and release under a shield."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .._records import Lease
from .._trace._records import LeaseLost, LeaseRenewed
from ._call import CLAIMED, LOST, SETTLING

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._limits import Limits
    from .._records import Claimed
    from .._store import ReceiptStore
    from .._trace import Recorder
    from ._call import _Call, _Cohort

log = logging.getLogger("trioplay")


class Leases:
    """Renews and gives back the receipt leases of one run's claimed calls."""

    def __init__(
        self,
        store: ReceiptStore,
        now: Callable[[], float],
        limits: Limits,
        trace: Recorder | None = None,
    ) -> None:
        self._trace = trace
        self._store = store
        self._now = now
        self._lease_ttl = limits.lease_ttl
        self._cleanup_timeout = limits.cleanup_timeout

    async def heartbeat(self, calls: list[_Call], cohort: _Cohort) -> None:
        """Renew the cohort's leases every ``lease_ttl / 2``.

        Calls whose completion is being written are skipped, and a lease that
        vanished because its own completion landed is no loss. A renewal that
        shows a lease gone cancels that call's scope: it ends with ``LeaseLost``.
        """
        interval = self._lease_ttl / 2
        while True:
            with trio.move_on_after(interval):
                await cohort.settled.wait()
                return
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
                continue
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
        """Give ``leases`` back, even while cancelled (bounded by ``cleanup_timeout``)."""
        if not leases:
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._cleanup_timeout
            try:
                await self._store.release_many(leases, now=self._now())
            except Exception:
                pass  # left to expire


def unsettled(owned: list[tuple[_Call, Claimed]]) -> list[Lease]:
    """The leases of calls not yet handed to the settler."""
    return [Lease(call.key, claim.lease_id) for call, claim in owned if call.state is not SETTLING]
