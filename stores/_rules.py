"""The rules every store applies, as pure functions.

:func:`decide_claims` (receipts), :func:`decide_page` (dataset pages),
:func:`decide_sheet_writes` (fenced sheet rows) and the wait rules
(:func:`decide_register`, :func:`decide_send`, :func:`decide_timeouts`,
:func:`decide_cancel`, with :func:`address`)
decide without writing; each store reads the current records, asks these
functions, and writes their answer in its own transaction, so the stores
cannot drift apart (the contract suite and a state machine check that they
agree).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal, NamedTuple

import attrs

from trioplay import (
    Claimed,
    ClaimOutcome,
    ClaimRequest,
    EventConflict,
    EventRecord,
    EventRefused,
    Held,
    InvalidWait,
    PageClaim,
    Receipt,
    RunLeases,
    RunRecord,
    SendRequest,
    SendResult,
    Settled,
    UnknownRun,
    WaitRecord,
    WaitRequest,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from trioplay import PageLease, RunStatus, SheetRow, SheetWrite


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


class Begin(NamedTuple):
    """``begin_attempt``'s arguments, its defaults filled in."""

    run_id: str
    play: str
    input_json: str
    now: float
    play_ref: str | None
    parent_run_id: str | None


def decide_attempt(
    stored: RunRecord | None, parent: RunRecord | None, begin: Begin
) -> tuple[RunRecord, bool]:
    """Answer ``begin_attempt``: the record, and whether to write it.

    A run of another play or input, or a cancelled run, is returned as
    stored (not written). ``parent`` is the stored parent run, if any.
    """
    run_id, play, input_json, now, play_ref, parent_run_id = begin
    if stored is not None:
        if (stored.play, stored.input_json) != (play, input_json) or stored.status == "cancelled":
            return stored, False
        record = attrs.evolve(
            stored,
            status="running",
            attempt=stored.attempt + 1,
            updated_at=now,
            output_json=None,
            error=None,
            stats_json=None,
            play_ref=play_ref if play_ref is not None else stored.play_ref,
        )
        return record, True
    if parent_run_id is None:
        root, depth = run_id, 0
    elif parent is None:
        root, depth = parent_run_id, 1
    else:
        root, depth = parent.root_run_id or parent.run_id, parent.depth + 1
    record = RunRecord(
        run_id,
        play,
        input_json,
        "running",
        1,
        now,
        now,
        None,
        None,
        None,
        parent_run_id,
        root,
        depth,
        play_ref,
    )
    return record, True


# -- waits and events (issue 22) ----------------------------------------------

Slot = tuple[str, str, str]
"""Where a sender and its waiters meet: ``(run_id, name, key_json)``."""

# A run in one of these takes no more events.
CLOSED_RUNS = frozenset({"completed", "cancelled"})


def slot_of(item: WaitRequest | WaitRecord | SendRequest | EventRecord) -> Slot:
    return (item.run_id, item.name, item.key_json)


def wait_order(wait: WaitRecord) -> tuple[float, str]:
    """Oldest first: by ``created_at``, then ``wait_key``. Events go to waits in this order."""
    return (wait.created_at, wait.wait_key)


def timed_out(wait: WaitRecord, now: float) -> WaitRecord | None:
    """The wait timed out (to write), or ``None`` if it is settled or its deadline has not passed.

    A wait times out when ``now > deadline``: at the deadline itself it is still open.
    """
    if wait.status != "waiting" or not now > wait.deadline:
        return None
    return attrs.evolve(wait, status="timed_out", settled_at=now)


def decide_timeouts(waits: Iterable[WaitRecord], now: float) -> list[WaitRecord]:
    """The waits among ``waits`` that time out at ``now``, as they are to be written."""
    return [changed for wait in waits if (changed := timed_out(wait, now)) is not None]


def settle(wait: WaitRecord, event: EventRecord, now: float) -> tuple[WaitRecord, EventRecord]:
    """``event`` settles ``wait``: its payload (or reject reason) copied into the wait."""
    settled = attrs.evolve(
        wait,
        status="rejected" if event.reject is not None else "delivered",
        settled_at=now,
        payload_json=event.payload_json,
        reason=event.reject,
        event_id=event.event_id,
    )
    return settled, attrs.evolve(event, consumed_by=wait.wait_key)


@attrs.frozen
class Registration:
    """What :func:`decide_register` decided.

    ``records``: the answer, one per request in order. ``inserts``: the new
    waits to write (already settled when an event was buffered for them, or
    timed out). ``updates``: stored waits that timed out. ``consumed``: the
    buffered events taken, with ``consumed_by`` set.
    """

    records: list[WaitRecord]
    inserts: list[WaitRecord]
    updates: list[WaitRecord]
    consumed: list[EventRecord]


def decide_register(
    requests: Sequence[WaitRequest],
    stored: Mapping[str, WaitRecord],
    buffered: Sequence[EventRecord],
    now: float,
) -> Registration:
    """Answer ``register_waits`` without writing.

    ``stored`` needs the requested wait keys that exist; ``buffered`` the
    unconsumed events of the requests' slots, in send order. A stored wait is
    returned as stored (timed out if its deadline passed). New waits are
    matched in wait order (``created_at``, then ``wait_key``: in one batch,
    by key) against the oldest buffered event of their slot with ``sent_at
    <= deadline``; a new wait matched by none times out if ``now > deadline``.
    A wait key repeated in one batch is registered once.
    """
    answer: dict[str, WaitRecord] = {}
    updates: list[WaitRecord] = []
    fresh: dict[str, WaitRecord] = {}
    for request in requests:
        key = request.wait_key
        if key in answer or key in fresh:
            continue
        known = stored.get(key)
        if known is not None:
            expired = timed_out(known, now)
            if expired is not None:
                updates.append(expired)
            answer[key] = expired or known
        else:
            fresh[key] = _new_wait(request, now)
    queues: dict[Slot, list[EventRecord]] = {}
    for event in buffered:
        if event.consumed_by is None:
            queues.setdefault(slot_of(event), []).append(event)
    inserts: list[WaitRecord] = []
    consumed: list[EventRecord] = []
    for wait in sorted(fresh.values(), key=wait_order):
        queue = queues.get(slot_of(wait), [])
        match = next((e for e in queue if e.sent_at <= wait.deadline), None)
        if match is not None:
            queue.remove(match)
            wait, taken = settle(wait, match, now)
            consumed.append(taken)
        else:
            wait = timed_out(wait, now) or wait
        answer[wait.wait_key] = wait
        inserts.append(wait)
    return Registration([answer[r.wait_key] for r in requests], inserts, updates, consumed)


def _new_wait(request: WaitRequest, now: float) -> WaitRecord:
    return WaitRecord(
        wait_key=request.wait_key,
        run_id=request.run_id,
        dataset=request.dataset,
        row_key=request.row_key,
        name=request.name,
        key_json=request.key_json,
        token=request.token,
        deadline=request.deadline,
        status="waiting",
        created_at=now,
    )


def address(
    request: SendRequest,
    run_status: RunStatus | None,
    token_wait: WaitRecord | None,
    *,
    store: str,
) -> SendRequest:
    """The request with its slot filled in, before its lock is taken.

    An unknown run raises ``UnknownRun`` (naming the run and ``store``). A
    request addressed by token takes ``name`` and ``key_json`` from the wait
    of that token (``token_wait``, looked up by the store); a token that
    names no wait of this run (forged, or another run's) raises
    ``InvalidWait`` for ``token``.
    """
    if run_status is None:
        raise UnknownRun(request.run_id, store)
    if request.token is None:
        return request
    if token_wait is None or token_wait.run_id != request.run_id:
        raise InvalidWait("token", f"names no wait of run {request.run_id!r}")
    return attrs.evolve(request, name=token_wait.name, key_json=token_wait.key_json)


@attrs.frozen
class Delivery:
    """What :func:`decide_send` decided: the answer, the event to insert (``None``
    for a duplicate) and the wait it settles (``None`` when buffered)."""

    result: SendResult
    event: EventRecord | None = None
    wait: WaitRecord | None = None


def decide_send(
    request: SendRequest,
    stored_event: EventRecord | None,
    open_waits: Iterable[WaitRecord],
    run_status: RunStatus | None,
    now: float,
    *,
    store: str,
) -> Delivery:
    """Answer ``send_event`` for an addressed request (see :func:`address`), without writing.

    ``stored_event`` is the event stored under ``(run, event_id)``, if any;
    ``open_waits`` the waiting waits of the request's slot (any order).
    Raises ``UnknownRun``, ``EventConflict`` or ``EventRefused``; nothing is
    to be written then.
    """
    if run_status is None:
        raise UnknownRun(request.run_id, store)
    if stored_event is not None:
        same = (
            stored_event.name,
            stored_event.key_json,
            stored_event.payload_json,
            stored_event.reject,
        ) == (request.name, request.key_json, request.payload_json, request.reject)
        if not same:
            raise EventConflict(request.run_id, request.event_id)
        return Delivery(SendResult("duplicate", request.event_id, stored_event.consumed_by))
    if run_status in CLOSED_RUNS:
        raise EventRefused(request.run_id, run_status)
    event = EventRecord(
        event_id=request.event_id,
        run_id=request.run_id,
        name=request.name,
        key_json=request.key_json,
        payload_json=request.payload_json,
        reject=request.reject,
        sent_at=now,
    )
    takers = [w for w in open_waits if w.status == "waiting" and w.deadline >= now]
    if not takers:
        return Delivery(SendResult("buffered", request.event_id), event)
    wait, event = settle(min(takers, key=wait_order), event, now)
    result = SendResult("delivered", request.event_id, wait.wait_key, wait.dataset, wait.row_key)
    return Delivery(result, event, wait)


def decide_cancel(waits: Iterable[WaitRecord], now: float) -> list[WaitRecord]:
    """The run's open waits, cancelled (to write)."""
    return [
        attrs.evolve(wait, status="cancelled", settled_at=now)
        for wait in waits
        if wait.status == "waiting"
    ]
