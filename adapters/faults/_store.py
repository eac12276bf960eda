"""Store wrappers that inject faults into any :class:`trioplay.Store`.

Each wrapper forwards every method of the store it wraps and changes only
what its fault is about, so it composes with any store and with the other
wrappers (``StoreOutage(SlowStore(MemoryStore()), ...)``). Times are
seconds of Trio time counted from the moment the runtime opens the store
(:meth:`open`), so a scenario under ``MockClock`` gets the same fault at
the same virtual moment on every run.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

import trio

from trioplay import Claimed, ClaimRequest, StoreError

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from trioplay import (
        ClaimOutcome,
        EventRecord,
        PageClaim,
        Receipt,
        RunLeases,
        RunRecord,
        SendResult,
        SheetEntry,
        SheetRow,
        SheetWrite,
        Store,
        WaitRecord,
    )

    from ..simulated import Latency

RECEIPT_WRITES = frozenset({"complete_many", "fail_many", "release_many", "heartbeat_many"})
SHEET_WRITES = frozenset({"write_terminal_rows"})


class StoreWrapper:
    """Forwards every :class:`trioplay.Store` method to ``inner``.

    Subclasses override :meth:`before` (runs before each call: sleep, hang
    or raise) or a method of their own fault.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self._opened_at: float | None = None

    @property
    def url(self) -> str:
        return self.inner.url

    def elapsed(self) -> float:
        """Seconds of Trio time since :meth:`open` (0 before it)."""
        if self._opened_at is None:
            return 0.0
        return trio.current_time() - self._opened_at

    async def before(self, operation: str) -> None:
        """Called before every store call but ``open`` and ``aclose``; no fault here."""

    async def _call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        await self.before(operation)
        return await getattr(self.inner, operation)(*args, **kwargs)

    async def open(self) -> None:
        self._opened_at = trio.current_time()
        await self.inner.open()

    async def aclose(self) -> None:
        await self.inner.aclose()

    # -- RunStore ---------------------------------------------------------------
    async def begin_attempt(self, *args: Any, **kwargs: Any) -> RunRecord:
        return await self._call("begin_attempt", *args, **kwargs)  # type: ignore[no-any-return]

    async def finish_attempt(self, *args: Any, **kwargs: Any) -> bool:
        return await self._call("finish_attempt", *args, **kwargs)  # type: ignore[no-any-return]

    async def get_run(self, *args: Any, **kwargs: Any) -> RunRecord | None:
        return await self._call("get_run", *args, **kwargs)  # type: ignore[no-any-return]

    async def list_runs(self, *args: Any, **kwargs: Any) -> list[RunRecord]:
        return await self._call("list_runs", *args, **kwargs)  # type: ignore[no-any-return]

    async def count_receipts(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        return await self._call("count_receipts", *args, **kwargs)  # type: ignore[no-any-return]

    async def list_failed_receipts(self, *args: Any, **kwargs: Any) -> list[Receipt]:
        return await self._call("list_failed_receipts", *args, **kwargs)  # type: ignore[no-any-return]

    async def forget_failed_receipts(self, *args: Any, **kwargs: Any) -> list[str]:
        return await self._call("forget_failed_receipts", *args, **kwargs)  # type: ignore[no-any-return]

    async def count_rows(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        return await self._call("count_rows", *args, **kwargs)  # type: ignore[no-any-return]

    async def list_datasets(self, *args: Any, **kwargs: Any) -> list[str]:
        return await self._call("list_datasets", *args, **kwargs)  # type: ignore[no-any-return]

    async def run_leases(self, *args: Any, **kwargs: Any) -> dict[str, RunLeases]:
        return await self._call("run_leases", *args, **kwargs)  # type: ignore[no-any-return]

    # -- ReceiptStore -----------------------------------------------------------
    async def claim_many(self, *args: Any, **kwargs: Any) -> list[ClaimOutcome]:
        return await self._call("claim_many", *args, **kwargs)  # type: ignore[no-any-return]

    async def heartbeat_many(self, *args: Any, **kwargs: Any) -> list[float | None]:
        return await self._call("heartbeat_many", *args, **kwargs)  # type: ignore[no-any-return]

    async def complete_many(self, *args: Any, **kwargs: Any) -> list[bool]:
        return await self._call("complete_many", *args, **kwargs)  # type: ignore[no-any-return]

    async def fail_many(self, *args: Any, **kwargs: Any) -> list[bool]:
        return await self._call("fail_many", *args, **kwargs)  # type: ignore[no-any-return]

    async def release_many(self, *args: Any, **kwargs: Any) -> list[bool]:
        return await self._call("release_many", *args, **kwargs)  # type: ignore[no-any-return]

    async def get_many(self, *args: Any, **kwargs: Any) -> list[Receipt | None]:
        return await self._call("get_many", *args, **kwargs)  # type: ignore[no-any-return]

    # -- SheetStore -------------------------------------------------------------
    async def write_terminal_rows(self, *args: Any, **kwargs: Any) -> list[SheetWrite]:
        return await self._call("write_terminal_rows", *args, **kwargs)  # type: ignore[no-any-return]

    async def sheet_status(self, *args: Any, **kwargs: Any) -> dict[str, SheetEntry]:
        return await self._call("sheet_status", *args, **kwargs)  # type: ignore[no-any-return]

    async def read_rows(self, *args: Any, **kwargs: Any) -> list[SheetRow]:
        return await self._call("read_rows", *args, **kwargs)  # type: ignore[no-any-return]

    # -- PageStore --------------------------------------------------------------
    async def claim_page(self, *args: Any, **kwargs: Any) -> PageClaim:
        return await self._call("claim_page", *args, **kwargs)  # type: ignore[no-any-return]

    async def heartbeat_pages(self, *args: Any, **kwargs: Any) -> list[float | None]:
        return await self._call("heartbeat_pages", *args, **kwargs)  # type: ignore[no-any-return]

    async def finish_page(self, *args: Any, **kwargs: Any) -> bool:
        return await self._call("finish_page", *args, **kwargs)  # type: ignore[no-any-return]

    async def release_page(self, *args: Any, **kwargs: Any) -> bool:
        return await self._call("release_page", *args, **kwargs)  # type: ignore[no-any-return]

    # -- WaitStore --------------------------------------------------------------
    async def register_waits(self, *args: Any, **kwargs: Any) -> list[WaitRecord]:
        return await self._call("register_waits", *args, **kwargs)  # type: ignore[no-any-return]

    async def poll_waits(self, *args: Any, **kwargs: Any) -> list[WaitRecord | None]:
        return await self._call("poll_waits", *args, **kwargs)  # type: ignore[no-any-return]

    async def send_event(self, *args: Any, **kwargs: Any) -> SendResult:
        return await self._call("send_event", *args, **kwargs)  # type: ignore[no-any-return]

    async def cancel_run(self, *args: Any, **kwargs: Any) -> int:
        return await self._call("cancel_run", *args, **kwargs)  # type: ignore[no-any-return]

    async def list_waits(self, *args: Any, **kwargs: Any) -> list[WaitRecord]:
        return await self._call("list_waits", *args, **kwargs)  # type: ignore[no-any-return]

    async def list_events(self, *args: Any, **kwargs: Any) -> list[EventRecord]:
        return await self._call("list_events", *args, **kwargs)  # type: ignore[no-any-return]


class SlowStore(StoreWrapper):
    """Every call to ``operations`` (default: all) first sleeps a seeded ``latency``."""

    def __init__(
        self,
        inner: Store,
        latency: Latency,
        *,
        seed: int = 0,
        operations: Collection[str] | None = None,
    ) -> None:
        super().__init__(inner)
        self.latency = latency
        self.operations = None if operations is None else frozenset(operations)
        self._rng = random.Random(seed)

    async def before(self, operation: str) -> None:
        if self.operations is None or operation in self.operations:
            await trio.sleep(self.latency.sample(self._rng))


class StoreOutage(StoreWrapper):
    """From ``start`` for ``duration`` seconds, calls to ``operations`` hang or fail.

    ``hang=True`` (the default): a call made during the outage waits,
    unanswered, until the outage ends (a silent database; ``math.inf`` as
    ``duration`` never ends it). ``hang=False``: it raises
    :class:`trioplay.StoreError` at once (a refused connection), marked
    ``retryable`` when ``retryable=True`` (a store that knows the call did
    nothing, as the PostgreSQL store does of a refused connection: the
    runtime tries again within ``Limits.store_retry``).
    ``operations`` defaults to every call; ``RECEIPT_WRITES`` and
    ``SHEET_WRITES`` name common subsets.
    """

    def __init__(
        self,
        inner: Store,
        *,
        start: float,
        duration: float = math.inf,
        hang: bool = True,
        operations: Collection[str] | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(inner)
        self.start = start
        self.end = start + duration
        self.hang = hang
        self.retryable = retryable
        self.operations = None if operations is None else frozenset(operations)
        self.refused = 0
        """How many calls the outage held or refused."""

    async def before(self, operation: str) -> None:
        if self.operations is not None and operation not in self.operations:
            return
        elapsed = self.elapsed()
        if not self.start <= elapsed < self.end:
            return
        self.refused += 1
        if not self.hang:
            raise StoreError(
                f"simulated store outage: {operation} refused", retryable=self.retryable
            )
        await trio.sleep(self.end - elapsed)  # math.inf: never answers


class LeaseRejection(StoreWrapper):
    """From ``start`` on, every receipt heartbeat finds its lease gone.

    What a run sees when another process took its receipts over (or the
    database lost them): the calls in flight raise ``LeaseLost``.
    """

    def __init__(self, inner: Store, *, start: float) -> None:
        super().__init__(inner)
        self.start = start
        self.rejected = 0

    async def heartbeat_many(self, *args: Any, **kwargs: Any) -> list[float | None]:
        expiries: list[float | None] = await self._call("heartbeat_many", *args, **kwargs)
        if self.elapsed() < self.start:
            return expiries
        self.rejected += len(expiries)
        return [None] * len(expiries)


class DispatcherCrash(StoreWrapper):
    """The ``after``-th claim batch and every later one raise ``error`` (not a ``StoreError``).

    A claim that fails with an unexpected error crashes the run's
    dispatcher task that made it: the engine must hand that error to every
    caller waiting on the dispatcher rather than leave them waiting.
    """

    def __init__(self, inner: Store, *, after: int, error: str = "dispatcher crashed") -> None:
        super().__init__(inner)
        self.after = after
        self.error = error
        self.claims = 0

    async def claim_many(self, *args: Any, **kwargs: Any) -> list[ClaimOutcome]:
        self.claims += 1
        if self.claims > self.after:
            raise RuntimeError(self.error)
        return await self._call("claim_many", *args, **kwargs)  # type: ignore[no-any-return]


class HeldElsewhere(StoreWrapper):
    """Another process claimed every receipt first, and then stopped renewing it.

    The first time a key is claimed through this wrapper, the wrapper
    claims it for ``owner`` (a process on another host, so it cannot be
    proved dead) with a lease of ``lease_ttl`` seconds, then lets the run's
    claim through: the run finds the receipt held and waits for it, and once
    the foreign lease expires (it is never renewed) the run claims it and
    does the work. The receipts are real: the store holds them as the other
    owner's until then.
    """

    def __init__(
        self, inner: Store, *, owner: str = "peer.invalid/4242/1", lease_ttl: float = 90.0
    ) -> None:
        super().__init__(inner)
        self.owner = owner
        self.lease_ttl = lease_ttl
        self._seen: set[str] = set()
        self.held: list[str] = []

    async def claim_many(
        self, requests: Sequence[ClaimRequest], **kwargs: Any
    ) -> list[ClaimOutcome]:
        new = [r for r in requests if r.key not in self._seen and r.operation == "tool"]
        if new:
            self._seen.update(r.key for r in new)
            foreign = [ClaimRequest(r.key, r.operation, r.name, "peer-run") for r in new]
            outcomes = await self.inner.claim_many(
                foreign, owner=self.owner, lease_ttl=self.lease_ttl, now=kwargs["now"]
            )
            self.held += [
                r.key for r, o in zip(new, outcomes, strict=True) if isinstance(o, Claimed)
            ]
        return await self._call("claim_many", requests, **kwargs)  # type: ignore[no-any-return]
