"""The lease rules every store applies, as pure functions.

:func:`decide_claims` (receipts), :func:`decide_page` (dataset pages) and
:func:`decide_sheet_writes` (fenced sheet rows) decide without writing;
each store reads the current records, asks these functions, and writes
their answer in its own transaction, so the stores cannot drift apart (the
contract suite and a state machine check that they agree).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

import attrs

from trioplay import (
    Claimed,
    ClaimOutcome,
    ClaimRequest,
    Held,
    PageClaim,
    Receipt,
    RunLeases,
    Settled,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from trioplay import PageLease, SheetRow, SheetWrite


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


def fenced_pages(leases: Sequence[PageLease | None]) -> list[int]:
    """The offsets of the pages whose current lease a fenced sheet write must read."""
    return sorted({lease.offset for lease in leases if lease is not None})


def failed_keys(rows: Sequence[SheetRow]) -> list[str]:
    """The keys whose stored status a sheet write must read: those of its failed rows."""
    return list(dict.fromkeys(row.key for row in rows if row.status == "failed"))


def decide_sheet_writes(
    rows: Sequence[SheetRow],
    leases: Sequence[PageLease | None],
    page_leases: Mapping[int, str | None],
    completed: Collection[str],
) -> list[SheetWrite]:
    """Answer ``write_terminal_rows`` row by row, without writing.

    ``page_leases`` holds the current lease id of each page of
    :func:`fenced_pages` (``None`` or absent: none); ``completed``, which
    keys of :func:`failed_keys` the sheet holds completed. A row whose page
    lease (``leases[i]``, when given) is not the page's current one is
    ``fenced``; a failed row over a completed one (stored, or written earlier
    in this batch) is ``kept``; any other row is ``written``, in order.
    """
    answers: list[SheetWrite] = []
    done = set(completed)
    for index, row in enumerate(rows):
        lease = leases[index] if leases else None
        if lease is not None and page_leases.get(lease.offset) != lease.lease_id:
            answers.append("fenced")
        elif row.status == "failed" and row.key in done:
            answers.append("kept")
        else:
            answers.append("written")
            if row.status == "completed":
                done.add(row.key)
    return answers


def renewed(expires: float, updated: Sequence[bool]) -> list[float | None]:
    """A heartbeat's answer: the new expiry where the lease was still ours, else ``None``."""
    return [expires if ok else None for ok in updated]


def page_key(lease: PageLease) -> tuple[str, str, int, str]:
    """A page lease as its fence's columns: ``run_id, dataset, page_offset, lease_id``."""
    return (lease.run_id, lease.dataset, lease.offset, lease.lease_id)


def run_leases_of(leases: Sequence[tuple[float | None, float | None]]) -> RunLeases:
    """A run's :class:`RunLeases` from its running leases' ``(expires_at, updated_at)``."""
    expiries = [expires for expires, _ in leases if expires is not None]
    renewals = [renewed for _, renewed in leases if renewed is not None]
    return RunLeases(max(expiries, default=None), max(renewals, default=None))
