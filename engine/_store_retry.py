"""Riding out a store that went away for a moment: retries within ``Limits.store_retry``.

A PostgreSQL server that restarts, a backend terminated by an operator, a
proxy that drops its connections: each fails the calls made meanwhile,
although the database is back seconds later. A store marks the failures it
knows did nothing (:attr:`trioplay.StoreError.retryable`: the connection was
refused, or lost before the call committed anything), so the call can be
made again exactly as it was: the run's store is wrapped here to do so,
with backoff (0.1 s, doubling, at most 2 s between tries), for as long as
``store_retry`` seconds from the first failure. Past that budget the call
fails with the last error, saying how long it tried. A failure that is not
marked (a commit whose outcome is unknown and cannot be confirmed, a call
that got no answer in time, a constraint, a full disk) fails at once, as
before. A write whose outcome is unknown but can be confirmed by reading
back comes with the call to make instead (``StoreError.retry_with``): it
reads what took effect and writes again only if nothing did.

The policy lives here, once, for every store; each store only says which of
its failures are safe to repeat. Every method of the run's store that is a
coroutine function goes through it: the dispatcher's receipt calls, the
writer's sheet writes, page leases, and the run's beginning and end.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

import trio

from ._errors import StoreError
from ._store import StoreWrapping

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._store import Store

log = logging.getLogger("trioplay")

FIRST_DELAY = 0.1
MAX_DELAY = 2.0


def retrying(store: Store, budget: float) -> Store:
    """``store``, its calls retried within ``budget`` seconds (``0``: ``store`` itself)."""
    if budget <= 0:
        return store

    def wrap(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def retried(*args: Any, **kwargs: Any) -> Any:
            return await _call(method, args, kwargs, budget)

        return retried

    return cast("Store", StoreWrapping(store, wrap))


async def _call(
    method: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    budget: float,
) -> Any:
    """``method(*args, **kwargs)``, made again after retryable failures within ``budget``."""
    started: float | None = None  # the first failure
    delay = FIRST_DELAY
    tries = 0
    while True:
        tries += 1
        try:
            return await method(*args, **kwargs)
        except StoreError as exc:
            if not exc.retryable:
                raise
            if exc.retry_with is not None:  # to be confirmed by reading back first
                method, args, kwargs = exc.retry_with, (), {}
            now = trio.current_time()
            if started is None:
                started = now
                log.warning(
                    "%s; trying again for up to %gs (store_retry)",
                    _without_elapsed(str(exc)),
                    budget,
                )
            spent = now - started
            if spent >= budget:
                raise _gave_up(exc, tries, spent, budget) from exc
            pause = min(delay, budget - spent)  # the last try comes as the budget ends
        await trio.sleep(pause)
        delay = min(delay * 2, MAX_DELAY)


def _gave_up(last: StoreError, tries: int, spent: float, budget: float) -> StoreError:
    return StoreError(
        f"{last}; tried {tries} times for {spent:.1f}s (store_retry={budget:g}s) and the"
        " store did not come back",
        store=last.store,
        operation=last.operation,
        elapsed=last.elapsed,
        outcome_unknown=last.outcome_unknown,
    )


def _without_elapsed(message: str) -> str:
    """The message without its trailing ``(after N.NNs)``: the same failure logs one line."""
    head, found, tail = message.rpartition(" (after ")
    return head if found and tail.endswith("s)") else message
