"""Pages of a map and their leases.

A map runs its rows in pages of ``page_size``. Each page is leased in the
store so that several processes can share a map (docs/scale-out.md): a page
is claimed before its rows start, renewed every ``lease_ttl / 2`` while they
run, finished (with its failed-row count) when they are all committed, and
released if the page ends any other way. A running :class:`Page` says where
it is in that life by its :class:`PageState`.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Literal

import attrs
import trio

from .._owner import owner_is_dead
from .._records import PageLease

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._cleanup import CleanupBudget
    from .._limits import Limits
    from .._run import RunServices
    from .._store import PageStore
    from ._plan import Plan
    from ._stall import MapStallObserver

log = logging.getLogger("trioplay")


class PageState(enum.Enum):
    """Where a running page is in its life.

    ==============  ======================================================
    from            to, and who moves it
    ==============  ======================================================
    ``STARTING``    ``RUNNING`` (every row started: the runner),
                    ``LOST``, ``RELEASED``
    ``RUNNING``     ``DRAINED`` (its last row settled), ``LOST``,
                    ``RELEASED``
    ``DRAINED``     ``LOST`` (the lease was found gone before the page was
                    finished in the store; its rows are committed anyway)
    ``LOST``        nothing: the lease passed to another process (found
                    by :meth:`PageLeases.keep`, or by a sheet write the
                    store fenced off); the page's unfinished rows are
                    cancelled and left to it (:meth:`Page.lose`)
    ``RELEASED``    nothing: the page was cancelled with rows unfinished
                    and its lease given back (:meth:`PageLeases.keep`)
    ==============  ======================================================

    A page is finished in the store only from ``DRAINED``. A page that
    ends ``LOST`` still tells the page loop it has started (the loop never
    waits for it), gives back what its rows held, and is revisited at the
    end of the map like a page a live peer holds.
    """

    STARTING = "starting"  # its rows are being admitted and started
    RUNNING = "running"  # every row started, some not yet settled
    DRAINED = "drained"  # every row settled: the page can be finished
    LOST = "lost"  # its lease passed to another process
    RELEASED = "released"  # cancelled with rows unfinished, its lease given back


STARTING = PageState.STARTING
RUNNING = PageState.RUNNING
DRAINED = PageState.DRAINED
LOST = PageState.LOST
RELEASED = PageState.RELEASED

_MOVES: dict[PageState, frozenset[PageState]] = {
    STARTING: frozenset({RUNNING, LOST, RELEASED}),
    RUNNING: frozenset({DRAINED, LOST, RELEASED}),
    DRAINED: frozenset({LOST}),
    LOST: frozenset(),
    RELEASED: frozenset(),
}


@attrs.define(eq=False)
class Page:
    """One running page: its plan, its state, its rows in flight and their failures."""

    offset: int
    plan: Plan
    observer: MapStallObserver
    lease: PageLease | None = None  # what its sheet rows are written under
    state: PageState = STARTING
    outstanding: int = 0  # rows started and not yet settled
    failed: int = 0  # rows committed as failed
    settled: trio.Event = attrs.field(factory=trio.Event)  # set on DRAINED
    scope: trio.CancelScope | None = None  # the page's work, cancelled when it is lost
    checking: trio.Event | None = None  # a check of its lease in flight (PageLeases.check)

    def move(self, to: PageState) -> None:
        """Move the page to ``to``; a move the table of :class:`PageState` lacks is a bug."""
        if to not in _MOVES[self.state]:
            raise RuntimeError(f"page at row {self.offset}: no move from {self.state} to {to}")
        self.state = to
        if to is DRAINED:
            self.settled.set()

    def lose(self) -> bool:
        """The page's lease passed to another process: stop its work.

        Moves the page to ``LOST`` and cancels its rows; ``False`` if it had
        already ended so (lost, or released), when there is nothing to do.
        """
        if self.state is LOST or self.state is RELEASED:
            return False
        self.move(LOST)
        if self.scope is not None:
            self.scope.cancel()
        return True

    def all_started(self) -> None:
        """Every row of the page has started (a page lost or released meanwhile stays so)."""
        if self.state is not STARTING:
            return
        self.move(RUNNING)
        if self.outstanding == 0:
            self.move(DRAINED)

    def row_settled(self) -> None:
        """A row ended: committed, or failed before it reached the writer."""
        self.outstanding -= 1
        if self.outstanding == 0 and self.state is RUNNING:
            self.move(DRAINED)

    def row_committed(self, token: int, completed: bool) -> None:
        """A row of the page committed (``token`` is its stall observer's)."""
        if not completed:
            self.failed += 1
        self.observer.terminal_committed(token)
        # row_settled(), inline: this runs once per row.
        self.outstanding -= 1
        if self.outstanding == 0 and self.state is RUNNING:
            self.move(DRAINED)


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
    cleanup: CleanupBudget
    waiting_since: float | None = attrs.field(default=None, init=False)
    """When the map last ran out of pages of its own (:meth:`idle`), on Trio's clock."""
    _nudge: trio.Event = attrs.field(factory=trio.Event, init=False)

    @classmethod
    def of_map(cls, services: RunServices, dataset: str) -> PageLeases:
        """The page leases of the map of ``dataset`` in the run of ``services``."""
        return cls(
            services.run.store,
            services.run.run_id,
            dataset,
            services.run.owner,
            services.run.attempt,
            services.run.limits,
            services.run.wall_clock,
            services.run.cleanup,
        )

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

        The map returns only once the page is done, so the time between the
        page being done and this process seeing it is added to the end of
        every shared run. While pages of its own run, the map cannot return
        anyway: the page is polled every ``page_wait_delay``. Once it has
        none (:meth:`idle`), at once, then at a tenth of how long it has
        been idle, at most twenty times as often as ``page_wait_delay``:
        peers sharing a run mostly end within a moment of one another, and
        are then seen within milliseconds, while a long wait costs about one
        claim every ``page_wait_delay``, as a fixed poll would (some 40
        claims in its first second, not 10).
        """
        longest = self.limits.page_wait_delay
        while True:
            claim = await self.claim(offset)
            if claim != "held":
                return claim
            delay = longest
            if self.waiting_since is not None:
                waited = trio.current_time() - self.waiting_since
                delay = min(longest, max(longest / 20, waited / 10))
            with trio.move_on_after(delay):
                await self._nudge.wait()

    def idle(self) -> None:
        """The map has no page of its own running: a peer's page is all it may wait for."""
        self.waiting_since = trio.current_time()
        self._nudge.set()
        self._nudge = trio.Event()

    async def keep(self, lease: PageLease, page: Page) -> None:
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
                if page.state is STARTING or page.state is RUNNING:
                    # Cancelled with rows unfinished: give the page up now,
                    # while the rows clean up, not after them (the two share
                    # one cleanup budget).
                    page.move(RELEASED)
                    await self.release(lease)
                raise
            except Exception as exc:
                log.warning("page lease heartbeat failed: %s", exc)
                continue
            if expiry is None:
                self.lost(page)
                return

    async def check(self, page: Page) -> None:
        """Check the page's lease now: a row of it found a receipt lease gone.

        A receipt lease lost under a running row most often means this
        process was paused past its leases and a peer took the page over;
        then the page is lost (its rows, this one included, are cancelled)
        rather than its rows failing one by one. Rows that ask together share
        one check. If the lease is still ours, or the store does not answer,
        this returns and the row fails as it would have.
        """
        if page.checking is not None:
            await page.checking.wait()
            return
        if page.lease is None:
            return
        page.checking = checking = trio.Event()
        try:
            (expiry,) = await self.store.heartbeat_pages(
                [page.lease], lease_ttl=self.limits.lease_ttl, now=self.wall_clock()
            )
            if expiry is None:
                self.lost(page)  # before the others wake: they are cancelled with it
        except Exception as exc:
            log.warning("page lease check failed: %s", exc)
        finally:
            page.checking = None
            checking.set()
        await trio.lowlevel.checkpoint()  # a row of a lost page is cancelled here

    def lost(self, page: Page) -> None:
        """The page was found taken over: stop it (its runner says so once it has ended)."""
        page.lose()

    async def finish(self, lease: PageLease, page: Page) -> bool:
        """Mark the page done (fenced); ``False`` if its lease had passed to another process."""
        return await self.store.finish_page(
            lease, attempt=self.attempt, failed=page.failed, now=self.wall_clock()
        )

    async def release(self, lease: PageLease) -> None:
        """Give a page up, shielded, within the run's cleanup budget; never raises."""
        with self.cleanup.shielded():
            try:
                await self.store.release_page(lease, now=self.wall_clock())
            except Exception:
                pass  # the lease expires on its own
