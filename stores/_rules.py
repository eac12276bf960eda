"""The lease rules every store applies, as pure functions.

:func:`decide_claims` (receipts) and :func:`decide_page` (dataset pages)
decide without writing; each store reads the current records, asks these
functions, and writes their answer in its own transaction, so the stores
cannot drift apart (the contract suite and a state machine check that they
agree).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

import attrs

from trioplay import Claimed, ClaimOutcome, ClaimRequest, Held, PageClaim, Receipt, Settled

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from trioplay import PageLease


def decide_claims(
    requests: Sequence[ClaimRequest],
    stored: Mapping[str, Receipt],
    *,
    owner: str,
    lease_ttl: float,
    now: float,
) -> tuple[list[ClaimOutcome], list[Receipt]]:
    """Answer a batch of claims against the ``stored`` receipts, without writing.

    Returns the outcome per request and the receipts to store for the claimed
    keys. ``stored`` needs only the requested keys; it is not modified.
    """
    outcomes: list[ClaimOutcome] = []
    claimed: dict[str, Receipt] = {}
    lease_expires_at = now + lease_ttl
    fresh_ids = lease_ids(len(requests))
    for index, request in enumerate(requests):
        key = request.key
        mine = claimed.get(key)
        if mine is not None:
            # A repeated key is claimed once; the repeat sees our own lease.
            outcomes.append(Held(mine))
            continue
        receipt = stored.get(key)
        if _claim_allowed(request, receipt, now):
            lease_id = fresh_ids[index]
            mine = _claimed_receipt(request, receipt, lease_id, owner, lease_expires_at, now)
            claimed[key] = mine
            outcomes.append(Claimed(key, lease_id, lease_expires_at, mine.attempts))
        elif receipt is not None and receipt.status == "running":
            outcomes.append(Held(receipt))
        else:
            assert receipt is not None
            outcomes.append(Settled(receipt))
    return outcomes, list(claimed.values())


def lease_ids(count: int) -> list[str]:
    """Fresh lease ids for a batch of ``count`` claims, the ``i``-th for request ``i``.

    One random prefix per batch, then a counter: one syscall, and ids unique
    across batches and stores.
    """
    prefix = os.urandom(12).hex()
    return [f"{prefix}{index:08x}" for index in range(count)]


def _claim_allowed(request: ClaimRequest, receipt: Receipt | None, now: float) -> bool:
    # The decision table of ClaimRequest's docstring, in the same order.
    if receipt is None or receipt.status == "pending":
        return True
    if receipt.status == "running":
        expires = receipt.lease_expires_at
        if expires is None or expires <= now:
            return True
        return request.takeover_lease is not None and request.takeover_lease == receipt.lease_id
    if receipt.status == "failed":
        return request.force or request.refresh_failed
    if request.force:
        return True
    stale_after, completed_at = request.stale_after, receipt.completed_at
    return (
        stale_after is not None and completed_at is not None and completed_at <= now - stale_after
    )


def _claimed_receipt(
    request: ClaimRequest,
    receipt: Receipt | None,
    lease_id: str,
    owner: str,
    lease_expires_at: float,
    now: float,
) -> Receipt:
    # A running receipt carries no payload: a refresh drops the old result or
    # error. created_at survives from the first claim.
    return Receipt(
        key=request.key,
        operation=request.operation,
        name=request.name,
        status="running",
        run_id=request.run_id,
        lease_id=lease_id,
        lease_expires_at=lease_expires_at,
        owner=owner,
        attempts=(receipt.attempts if receipt is not None else 0) + 1,
        created_at=receipt.created_at if receipt is not None else now,
        updated_at=now,
    )


@attrs.frozen
class PageRecord:
    """A dataset page's lease as a store keeps it.

    ``status`` is ``running`` (leased), ``done`` (finished by ``attempt`` with
    ``failed`` failed rows) or ``pending`` (released, or never finished).
    """

    status: Literal["pending", "running", "done"]
    lease_id: str | None = None
    lease_expires_at: float | None = None
    owner: str | None = None
    attempt: int = 0
    failed: int = 0
    updated_at: float = 0.0


def decide_page(
    page: PageRecord | None,
    *,
    owner: str,
    lease_ttl: float,
    now: float,
    takeover_lease: str | None = None,
    reopen: bool = False,
) -> tuple[PageClaim, PageRecord | None]:
    """Answer ``claim_page`` for the stored ``page``, without writing.

    Returns the answer and, when the page is claimed, the record to store.
    """
    if page is not None:
        expires = page.lease_expires_at
        live = page.status == "running" and expires is not None and expires > now
        if live and (takeover_lease is None or takeover_lease != page.lease_id):
            return PageClaim("held", page.lease_id, expires, page.owner), None
        if page.status == "done" and not reopen:
            return PageClaim("done", attempt=page.attempt, failed=page.failed), None
    lease_id = os.urandom(16).hex()
    lease_expires_at = now + lease_ttl
    claimed = PageRecord(
        "running",
        lease_id,
        lease_expires_at,
        owner,
        page.attempt if page is not None else 0,
        page.failed if page is not None else 0,
        now,
    )
    return PageClaim("claimed", lease_id, lease_expires_at, owner), claimed


def renewed(expires: float, updated: Sequence[bool]) -> list[float | None]:
    """A heartbeat's answer: the new expiry where the lease was still ours, else ``None``."""
    return [expires if ok else None for ok in updated]


def page_key(lease: PageLease) -> tuple[str, str, int, str]:
    """A page lease as its fence's columns: ``run_id, dataset, page_offset, lease_id``."""
    return (lease.run_id, lease.dataset, lease.offset, lease.lease_id)
