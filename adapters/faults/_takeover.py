"""A peer takes over a page whose lease ran out: the run's page is lost to another owner."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

from trioplay import PageLease, SheetRow

from ._store import StoreWrapper

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from trioplay import PageClaim, RunRecord, Store


class PeerTakeover(StoreWrapper):
    """From ``at`` on, page ``page``'s heartbeats stall; a peer takes the expired lease over.

    What a process sees after a pause past its page lease (a GC pause, a
    stopped VM, a starved heartbeat): from ``at`` (seconds since the store
    opened) each heartbeat of the page's lease waits, unanswered, until the
    lease has run out in the store. Then the peer ``owner`` claims the page,
    a plain claim of an expired lease, and only then does the heartbeat
    reach the store, which answers that the lease is gone: the run loses
    the page (``page.lost``).

    The peer then runs the page: ``work`` seconds after it took the page
    over, it writes each of ``rows`` (the page's input rows, in order: row
    ``i`` is at position ``page + i``, keyed by its field ``key``) that the
    sheet does not hold completed, as completed with ``columns`` added,
    under its own lease, and finishes the page. It does so at the first
    store call made after then (the run polls the page it lost, so that
    call comes). ``finish=False``: the peer dies in turn; it never writes
    nor renews, and the page is free again once the peer's ``lease_ttl``
    (default: the run's) runs out, when the run takes it back.

    Only the first dataset to claim page ``page`` (or ``dataset``) is taken
    over, once. ``taken_at`` is the virtual time of the takeover (``None``
    before); ``wrote`` the keys the peer wrote.
    """

    def __init__(
        self,
        inner: Store,
        *,
        page: int,
        rows: Sequence[Mapping[str, Any]],
        key: str,
        at: float,
        work: float = 30.0,
        columns: Mapping[str, Any] | None = None,
        owner: str = "peer.invalid/4343/1",
        lease_ttl: float | None = None,
        finish: bool = True,
        dataset: str | None = None,
    ) -> None:
        super().__init__(inner)
        self.page = page
        self.rows = list(rows)
        self.key = key
        self.at = at
        self.work = work
        self.columns = dict(columns or {})
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.finish = finish
        self.dataset = dataset
        self.taken_at: float | None = None
        self.wrote: list[str] = []
        self._attempt = 0  # the run's attempt: the peer joins it
        self._ours: PageLease | None = None  # the run's lease of the page
        self._expires = 0.0  # when the run's lease runs out in the store (its clock)
        self._peer: PageLease | None = None
        self._due: float | None = None  # when the peer has run the page (virtual time)
        self._wall: tuple[float, float] = (0.0, 0.0)  # (virtual, wall) at the takeover

    async def begin_attempt(self, *args: Any, **kwargs: Any) -> RunRecord:
        record: RunRecord = await self._call("begin_attempt", *args, **kwargs)
        self._attempt = record.attempt
        return record

    async def before(self, operation: str) -> None:
        if self._due is not None and trio.current_time() >= self._due:
            self._due = None
            await self._run_page()

    async def claim_page(self, run_id: str, dataset: str, offset: int, **kwargs: Any) -> PageClaim:
        claim: PageClaim = await self._call("claim_page", run_id, dataset, offset, **kwargs)
        mine = self.dataset is None or self.dataset == dataset
        if offset == self.page and mine and claim.status == "claimed" and self.taken_at is None:
            assert claim.lease_id is not None
            assert claim.lease_expires_at is not None
            self.dataset = dataset
            self._ours = PageLease(run_id, dataset, offset, claim.lease_id)
            self._expires = claim.lease_expires_at
        return claim

    async def heartbeat_pages(
        self, leases: Sequence[PageLease], **kwargs: Any
    ) -> list[float | None]:
        ours = self._ours
        if ours is not None and ours in leases and self.elapsed() >= self.at:
            if self.taken_at is None:
                # The heartbeat stalls until the lease has run out in the store.
                began = trio.current_time()
                await trio.sleep(max(0.0, self._expires - kwargs["now"]))
                kwargs["now"] += trio.current_time() - began
                await self._take_over(ours, kwargs["now"], kwargs["lease_ttl"])
        expiries: list[float | None] = await self._call("heartbeat_pages", leases, **kwargs)
        if ours is not None and ours in leases and self.taken_at is None:
            renewed = expiries[list(leases).index(ours)]
            if renewed is not None:
                self._expires = renewed
        return expiries

    async def _take_over(self, ours: PageLease, now: float, ttl: float) -> None:
        if self.taken_at is not None:  # another heartbeat, stalled with this one, did it
            return
        claim = await self.inner.claim_page(
            ours.run_id,
            ours.dataset,
            ours.offset,
            owner=self.owner,
            lease_ttl=self.lease_ttl or ttl,
            now=now,
        )
        if claim.status != "claimed":
            return
        assert claim.lease_id is not None
        self.taken_at = trio.current_time()
        self._peer = PageLease(ours.run_id, ours.dataset, ours.offset, claim.lease_id)
        self._wall = (self.taken_at, now)
        if self.finish:
            self._due = self.taken_at + self.work

    async def _run_page(self) -> None:
        """The peer's work on the page: its unfinished rows written completed, the page done."""
        lease = self._peer
        assert lease is not None
        virtual, wall = self._wall
        now = wall + trio.current_time() - virtual
        keys = [str(row[self.key]) for row in self.rows]
        held = await self.inner.sheet_status(lease.run_id, lease.dataset, keys)
        rows = [
            SheetRow(
                key,
                self.page + index,
                "completed",
                json.dumps({**row, **self.columns}, separators=(",", ":")),
                None,
                self._attempt,
            )
            for index, (key, row) in enumerate(zip(keys, self.rows, strict=True))
            if (entry := held.get(key)) is None or entry.status != "completed"
        ]
        await self.inner.write_terminal_rows(
            lease.run_id, lease.dataset, rows, leases=[lease] * len(rows)
        )
        self.wrote = [row.key for row in rows]
        await self.inner.finish_page(lease, attempt=self._attempt, failed=0, now=now)
