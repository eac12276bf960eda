"""Pages of a map and their leases.

A map runs its rows in pages of ``page_size``. Each page is leased in the
store so that several processes can share a map (docs/scale-out.md): a page
is claimed before its rows start, renewed every ``lease_ttl / 2`` while they
run, finished (with its failed-row count) when they are all committed, and
released if the page ends any other way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._owner import owner_is_dead
from .._records import PageLease

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._cleanup import CleanupBudget
    from .._limits import Limits
    from .._store import PageStore
    from ._stall import MapStallObserver
    from ._writer import TerminalRowSender

log = logging.getLogger("trioplay")


@attrs.define(eq=False)
class Page:
    """One running page: its rows in flight, their failures, and how it ends."""

    offset: int
    observer: MapStallObserver
    sender: TerminalRowSender
    outstanding: int = 0
    failed: int = 0
    spawning_done: bool = False
    lost: bool = False
    released: bool = False  # its lease was given back while its rows were cancelled
    settled: trio.Event = attrs.field(factory=trio.Event)

    def row_settled(self) -> None:
        self.outstanding -= 1
        if self.spawning_done and self.outstanding == 0:
            self.settled.set()


@attrs.define(eq=False)
class PageLeases:
    """Claim, take over, await, renew, finish and release the page leases of one map."""

    store: PageStore
    run_id: str
    dataset: str
    owner: str
    attempt: int
    limits: Limits
    wall_clock: Callable[[], float]
    emit: Callable[[str, dict[str, Any]], None]
    cleanup: CleanupBudget

    async def claim(
        self, offset: int, *, reopen: bool = False
    ) -> PageLease | Literal["held", "done"]:
        """Claim a page: its lease, ``"held"`` by a live peer, or ``"done"``."""
        takeover: str | None = None
        while True:
            claim = await self.store.claim_page(
                self.run_id,
                self.dataset,
                offset,
                owner=self.owner,
                lease_ttl=self.limits.lease_ttl,
                now=self.wall_clock(),
                takeover_lease=takeover,
                reopen=reopen,
            )
            if claim.status == "claimed":
                assert claim.lease_id is not None
                return PageLease(self.run_id, self.dataset, offset, claim.lease_id)
            if claim.status == "held" and takeover is None and owner_is_dead(claim.owner):
                takeover = claim.lease_id  # a crashed local process: take over now
                continue
            return claim.status

    async def wait_for(self, offset: int) -> PageLease | Literal["done"]:
        """Wait while a live peer holds a page: until it is done or its lease runs out.

        Polled every ``page_wait_delay``: the map returns only once the page
        is done, so a slow poll is time added to the end of every shared run.
        """
        while True:
            claim = await self.claim(offset)
            if claim != "held":
                return claim
            await trio.sleep(self.limits.page_wait_delay)

    async def keep(self, lease: PageLease, page: Page, scope: trio.CancelScope) -> None:
        """Renew a page lease every ``lease_ttl / 2``; give the page up if it is gone.

        A lost page lease means another process took the page over (ours
        looked dead to it): our unfinished rows of that page are cancelled
        and left to the new owner, whose receipts replay what we already paid.
        """
        ttl = self.limits.lease_ttl
        while True:
            try:
                await trio.sleep(ttl / 2)
                (expiry,) = await self.store.heartbeat_pages(
                    [lease], lease_ttl=ttl, now=self.wall_clock()
                )
            except trio.Cancelled:
                if not page.settled.is_set():
                    # Cancelled with rows unfinished: give the page up now,
                    # while the rows clean up, not after them (the two share
                    # one cleanup budget).
                    page.released = True
                    await self.release(lease)
                raise
            except Exception as exc:
                log.warning("page lease heartbeat failed: %s", exc)
                continue
            if expiry is None:
                page.lost = True
                log.warning(
                    "dataset %r: the page at row %d passed to another process; "
                    "its unfinished rows are left to it",
                    self.dataset,
                    lease.offset,
                )
                self.emit("map.page_lost", {"map": self.dataset, "page_offset": lease.offset})
                scope.cancel()
                return

    async def finish(self, lease: PageLease, page: Page) -> None:
        await self.store.finish_page(
            lease, attempt=self.attempt, failed=page.failed, now=self.wall_clock()
        )

    async def release(self, lease: PageLease) -> None:
        """Give a page up, shielded, within the run's cleanup budget; never raises."""
        with self.cleanup.shielded():
            try:
                await self.store.release_page(lease, now=self.wall_clock())
            except Exception:
                pass  # the lease expires on its own
