"""Writes whose ``COMMIT`` went unconfirmed, confirmed by reading back.

A connection lost after a write sent its ``COMMIT`` leaves its outcome
unknown (the PostgreSQL store's; any store whose settlement is one
statement and whose claim is one transaction can use these). For the two
writes a run makes most, the receipts tell, and the error of such a write
carries the call that finds out
(``StoreError.retry_with``; the runtime makes it within
``Limits.store_retry``):

- a settlement (``complete_many``, ``fail_many``) is one ``UPDATE``: it
  took effect whole or not at all. A receipt it settled has the settled
  status under the same lease (only this write could have done that); one
  it did not is still ``running`` under it. So: read the receipts, answer
  from them if it took effect, write again if not (:func:`settle`);
- a claim (``claim_many``) is one transaction: if it committed, every key
  it took holds a lease of this owner stamped with the claim's ``now``, whose
  lease id (made in the lost job) is unknown here. The claim made again
  takes those over (``ClaimRequest.takeover_lease``, a takeover of one's own
  lease) and claims the rest as if for the first time (:func:`reclaim`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from trioplay import StoreError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    import trioplay as tp
    from trioplay import Store


async def settle(
    write: Callable[[], Awaitable[list[bool]]],
    read: Callable[[list[str]], Awaitable[list[tp.Receipt | None]]],
    items: Sequence[tp.Completion | tp.Failure],
    status: str,
) -> list[bool]:
    """``write()``, a fenced settlement to ``status``; an unknown outcome carries its check."""
    try:
        return await write()
    except StoreError as exc:
        if not exc.outcome_unknown:
            raise
        unknown = exc

    async def confirm() -> list[bool]:
        found = await read([item.key for item in items])
        settled = [
            receipt is not None and receipt.lease_id == item.lease_id and receipt.status == status
            for item, receipt in zip(items, found, strict=True)
        ]
        if not any(settled):
            return await settle(write, read, items, status)  # it did not: again
        seen: set[tuple[str, str]] = set()  # a repeated lease: False, as the write answers
        answers = []
        for item, ok in zip(items, settled, strict=True):
            lease = (item.key, item.lease_id)
            answers.append(ok and lease not in seen)
            seen.add(lease)
        return answers

    unknown.retryable = True
    unknown.retry_with = confirm
    raise unknown


async def reclaim(
    store: Store,
    requests: Sequence[tp.ClaimRequest],
    owner: str,
    lease_ttl: float,
    now: float,
) -> list[tp.ClaimOutcome]:
    """The claim of ``requests`` at ``now`` made again, taking over what it took."""
    found = await store.get_many([request.key for request in requests])
    again = [
        attrs.evolve(request, takeover_lease=receipt.lease_id)
        if receipt is not None
        and receipt.status == "running"
        and receipt.owner == owner
        and receipt.updated_at == now
        else request
        for request, receipt in zip(requests, found, strict=True)
    ]
    return await store.claim_many(again, owner=owner, lease_ttl=lease_ttl, now=now)
