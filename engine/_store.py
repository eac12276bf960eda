"""The ``Store`` protocol: everything the engine asks of durable storage.

``Store`` is five protocols, one per room of the engine that uses it:
:class:`ReceiptStore` (the receipts dispatcher), :class:`SheetStore` (the
terminal-row writer and the sheet's readers), :class:`PageStore` (the map's
page leases), :class:`RunStore` (the runtime and the command line) and
:class:`WaitStore` (waiting rows and the events they wait for), plus
the store's life (``url``, ``open``, ``aclose``). Every method is in exactly
one; a room typed with its own protocol can call nothing else. There is no
runtime difference: a store implements ``Store`` whole.

Implementations live in ``trioplay.stores`` (memory, sqlite, postgres) and
pass one shared contract suite (``tests/test_store_contract.py``). The engine
never imports them; ``open_runtime(store="sqlite:///...")`` resolves a URL
through ``trioplay.stores.open_store`` lazily.

Rules every implementation follows:

- every method is a Trio-compatible coroutine and is cancellable; a cancelled
  write either happened completely or not at all;
- batch methods take and return sequences in the same order, and each is one
  transaction (``write_terminal_rows`` above all: a batch commits whole);
- writes to receipts are fenced by ``lease_id``: ``complete_many``,
  ``fail_many``, ``heartbeat_many`` and ``release_many`` do nothing for a key
  whose current lease is not the given one, and say so in their result;
- so are the other writes made on behalf of a lease: sheet rows by their
  page's lease (``write_terminal_rows`` with ``leases``), pages by theirs,
  and a run's end by its attempt (``finish_attempt`` writes only while the
  run's current attempt is the given one); and a failed row never replaces
  a completed one;
- time is the caller's ``now`` (wall-clock seconds), never the store's own
  clock, so tests can control lease expiry;
- failures raise :class:`trioplay.StoreError` (or a subclass) with a message
  that names the store and the operation;
- every call returns or fails in bounded time, even when the database stops
  answering (the SQL stores' ``call_timeout`` and ``lock_timeout``); a write
  that may or may not have committed says so (``StoreError.outcome_unknown``).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._records import (
    ClaimOutcome,
    ClaimRequest,
    Completion,
    EventRecord,
    Failure,
    Lease,
    PageClaim,
    PageLease,
    Receipt,
    RowStatus,
    RunLeases,
    RunRecord,
    RunStatus,
    SendRequest,
    SendResult,
    SheetEntry,
    SheetRow,
    SheetWrite,
    WaitRecord,
    WaitRequest,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence


class ReceiptStore(Protocol):
    """Receipts: claims, lease renewals, completions, failures, releases, reads.

    Used by the receipts dispatcher (``Dispatcher``): it claims a batch of
    keys, renews the leases of the calls it runs, settles them and releases
    what it gives up; a key held by another owner is waited for by claiming
    it again. ``get_many`` reads receipts as stored (tests and tools; the
    engine itself does not call it).
    """

    async def claim_many(
        self, requests: Sequence[ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[ClaimOutcome]:
        """Claim each key as :class:`ClaimRequest` describes, in one transaction.

        A key repeated within one call is claimed at most once: later
        duplicates see the first one's lease as :class:`Held`.
        """
        ...

    async def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        """Extend live leases to ``now + lease_ttl``.

        Returns the new expiry per lease, or ``None`` where the lease is gone
        (another owner took the key, it was completed, failed or released).
        """
        ...

    async def complete_many(self, items: Sequence[Completion], *, now: float) -> list[bool]:
        """Mark running receipts completed; ``False`` where the lease did not match."""
        ...

    async def fail_many(self, items: Sequence[Failure], *, now: float) -> list[bool]:
        """Mark running receipts failed; ``False`` where the lease did not match."""
        ...

    async def release_many(self, leases: Sequence[Lease], *, now: float) -> list[bool]:
        """Give up running receipts: back to ``pending`` with no lease."""
        ...

    async def get_many(self, keys: Sequence[str]) -> list[Receipt | None]: ...


class SheetStore(Protocol):
    """Dataset sheets: terminal rows written in batches, read back by key or position.

    Used by the terminal-row writer (``TerminalRowWriter``: the writes), the
    map's row planning (``sheet_status``: which rows are in the sheet
    already), and ``MapResult.rows`` and the command line's ``export``
    (``read_rows``).
    """

    async def write_terminal_rows(
        self,
        run_id: str,
        dataset: str,
        rows: Sequence[SheetRow],
        *,
        leases: Sequence[PageLease | None] = (),
    ) -> list[SheetWrite]:
        """Upsert rows by ``(run_id, dataset, key)`` in one transaction; say what each did.

        Fenced: ``leases[i]`` (when given and not ``None``) is the page lease
        ``rows[i]`` is written under; a row whose page's current lease is
        another one (the page was taken over) is not written (``fenced``).
        A page released by that lease and not claimed since still counts as
        the writer's. A failed row never replaces a completed one (``kept``);
        a completed row replaces anything. Within one batch a repeated key is
        decided row by row, in order.
        """
        ...

    async def sheet_status(
        self, run_id: str, dataset: str, keys: Sequence[str]
    ) -> dict[str, SheetEntry]:
        """The entries among ``keys`` already in the sheet (absent keys are left out)."""
        ...

    async def read_rows(
        self,
        run_id: str,
        dataset: str,
        *,
        status: RowStatus | None = None,
        after_position: int = -1,
        limit: int = 1000,
    ) -> list[SheetRow]:
        """Up to ``limit`` rows with ``position > after_position``, by position."""
        ...


class PageStore(Protocol):
    """Page leases: which process runs which page of a dataset (cooperative execution).

    Used by the map runner: it claims a page before planning its rows,
    renews the lease while the page runs, and finishes or releases it.
    """

    async def claim_page(
        self,
        run_id: str,
        dataset: str,
        offset: int,
        *,
        owner: str,
        lease_ttl: float,
        now: float,
        takeover_lease: str | None = None,
        reopen: bool = False,
    ) -> PageClaim:
        """Lease the page of ``dataset`` starting at input position ``offset``.

        Atomically: a page never seen, released, or whose lease expired
        (``lease_expires_at <= now``) is claimed; a page under another live
        lease is ``held`` unless ``takeover_lease`` names that lease (the
        engine proved its owner dead); a finished page is ``done`` unless
        ``reopen`` (then claimed again). A claim sets a fresh ``lease_id``,
        ``lease_expires_at = now + lease_ttl`` and ``owner``.
        """
        ...

    async def heartbeat_pages(
        self, leases: Sequence[PageLease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        """Extend live page leases; ``None`` where the lease is no longer ours."""
        ...

    async def finish_page(self, lease: PageLease, *, attempt: int, failed: int, now: float) -> bool:
        """Mark a page done (fenced by its lease); ``False`` if the lease was not ours."""
        ...

    async def release_page(self, lease: PageLease, *, now: float) -> bool:
        """Give a page up unfinished (fenced): the next claim takes it at once."""
        ...


class RunStore(Protocol):
    """Runs and what they left: attempts, run records, and counts per run and dataset.

    Used by the runtime (``Runtime.run``: ``begin_attempt``,
    ``finish_attempt``) and the command line (``runs list``, ``runs show``,
    and the summary after ``run``).
    """

    async def begin_attempt(
        self,
        run_id: str,
        play: str,
        input_json: str,
        *,
        now: float,
        play_ref: str | None = None,
        parent_run_id: str | None = None,
    ) -> RunRecord:
        """Create the run (attempt 1) or start its next attempt (attempt + 1).

        Sets ``status="running"`` and returns the record as stored. A run
        stored with another ``play`` or another ``input_json`` is left as it
        is, in the same transaction, and returned as stored: the caller sees
        the difference (the runtime refuses the run id, ``RunIdConflict``).
        So is a ``cancelled`` run: cancelling ends a run for good.

        A new run records ``parent_run_id``, and from the parent (when the
        store has it) ``root_run_id`` (the parent's root; the run itself for
        a root) and ``depth`` (the parent's + 1). ``play_ref`` is recorded
        when given (a later attempt without one keeps the stored one).
        """
        ...

    async def finish_attempt(
        self,
        run_id: str,
        status: RunStatus,
        *,
        attempt: int,
        now: float,
        output_json: str | None = None,
        error: str | None = None,
        stats_json: str | None = None,
    ) -> bool:
        """Record the end of ``attempt`` of the run, fenced by the attempt.

        Written only while ``attempt`` is the run's current attempt (the last
        one begun); returns ``False``, writing nothing, when a later attempt
        has begun since: a late attempt never overwrites a later one's
        status. Raises :class:`StoreError` for an unknown run.
        """
        ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def list_runs(self, *, limit: int = 50) -> list[RunRecord]:
        """Most recently updated first."""
        ...

    async def count_receipts(self, run_id: str) -> dict[str, int]:
        """Receipts last claimed by ``run_id``, counted by status."""
        ...

    async def count_rows(self, run_id: str, dataset: str) -> dict[str, int]:
        """Rows in the sheet counted by status (``completed``, ``failed``)."""
        ...

    async def list_datasets(self, run_id: str) -> list[str]: ...

    async def run_leases(self, run_ids: Sequence[str]) -> dict[str, RunLeases]:
        """The leases of each run among ``run_ids`` that holds any (receipts and pages).

        Counts running receipts last claimed by the run and running pages of
        its datasets; runs holding none are left out. ``runs list`` marks a
        ``running`` run whose leases have all expired as probably dead.
        """
        ...


@runtime_checkable
class FailureStore(Protocol):
    """Recorded failures a user may take back: ``trioplay retry`` and :func:`retry_failures`.

    A failed receipt is replayed on every rerun (its failure was paid for);
    these two let the user list a run's failed receipts and forget some, so
    that the next attempt calls them again. The engine chooses which (by
    dataset, tool and error type, from each receipt's ``error_json``); the
    store reads and resets.
    """

    async def list_failed_receipts(
        self, run_id: str, *, after_key: str = "", limit: int = 1000
    ) -> list[Receipt]:
        """Up to ``limit`` failed receipts last claimed by ``run_id``, keys above ``after_key``,
        by key."""
        ...

    async def forget_failed_receipts(
        self, run_id: str, keys: Sequence[str], *, now: float
    ) -> list[str]:
        """Set each of ``keys`` that is still a failed receipt of ``run_id`` back to
        ``pending`` (no error, no lease), in one transaction; return those keys.

        The next claim of such a key runs its call again (``attempts`` goes on
        counting). A key that is not failed (completed, running, claimed again
        since, unknown) or belongs to another run is left as it is.
        """
        ...


@runtime_checkable
class WaitStore(Protocol):
    """Waits and events (issue 22): rows suspended on outside events, and the events.

    Used by the row and play contexts (``register_waits``, ``poll_waits``),
    the runtime and the command line (``send_event``, ``cancel_run``,
    ``list_waits``, ``list_events``). Every decision is a pure function of
    ``trioplay.stores._rules`` (``decide_register``, ``decide_send``,
    ``decide_timeouts``) applied in one transaction.

    Rules: a sender and a registrar meet under one lock that exists before
    either row does (SQLite's write lock; PostgreSQL's transaction-scoped
    advisory lock on a hash of ``(run, name, key)``), so an event sent just
    before its waiter registers is buffered and taken at registration. Each
    event settles at most one wait, the oldest waiting one first (by
    ``created_at``, then ``wait_key``), events in send order. The deadline
    is written once. An event with ``sent_at <= deadline`` may settle a
    wait; a wait times out when ``now > deadline``; an event stamped after a
    wait's deadline never settles it (it stays buffered, listed as
    unclaimed). Times are the caller's ``now``.
    """

    async def register_waits(
        self, requests: Sequence[WaitRequest], *, now: float
    ) -> list[WaitRecord]:
        """Register waits in one transaction; records in the order of ``requests``.

        A ``wait_key`` already stored is returned as stored (its deadline and
        token unchanged). A new one is inserted and matched against the
        buffered events of its ``(run, name, key)``: the oldest (send order)
        with ``sent_at <= deadline`` is consumed and the wait settles
        (delivered or rejected) in the same transaction. A waiting wait with
        ``deadline < now`` is returned ``timed_out`` (and written so).
        """
        ...

    async def poll_waits(self, wait_keys: Sequence[str], *, now: float) -> list[WaitRecord | None]:
        """Read waits (``None`` for an unknown key), timing out the expired ones (written)."""
        ...

    async def send_event(self, request: SendRequest, *, now: float) -> SendResult:
        """Send one event in one transaction under the ``(run, name, key)`` lock.

        The same ``event_id`` again with the same content is ``duplicate``
        (no write); with another content it raises ``EventConflict``. An
        unknown run raises ``UnknownRun`` (naming the run and the store), a
        completed or cancelled one ``EventRefused``; a token that names no
        wait of the run raises ``InvalidWait``. Otherwise the oldest waiting
        wait with ``deadline >= now`` takes it (its payload or reject reason
        copied in, the event marked consumed by it): ``delivered``; else the
        event is ``buffered``.
        """
        ...

    async def cancel_run(self, run_id: str, *, now: float) -> int:
        """End a run for good: its open waits become ``cancelled``, its status
        ``cancelled``, later events are refused. Returns how many waits it cancelled.
        Raises ``UnknownRun`` for a run the store does not have."""
        ...

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        """Every wait of the run, oldest first (``created_at``, then ``wait_key``)."""
        ...

    async def list_events(self, run_id: str, *, unclaimed_only: bool = False) -> list[EventRecord]:
        """Every event of the run in send order; only the buffered ones with ``unclaimed_only``."""
        ...


@runtime_checkable
class Store(RunStore, ReceiptStore, SheetStore, PageStore, WaitStore, Protocol):
    """Durable storage for runs, receipts, dataset sheets, page leases, waits and events.

    The five room protocols together, and the store's life: whoever opens
    the store (the runtime, the command line) holds a ``Store``; each room
    of the engine needs only its own protocol. ``isinstance(x, Store)``
    checks every method of the five.
    """

    @property
    def url(self) -> str:
        """A printable description (``sqlite:///path``), with no secrets."""
        ...

    async def open(self) -> None:
        """Connect and migrate the schema. Called once before any other method."""
        ...

    async def aclose(self) -> None:
        """Release every connection and thread. Safe to call twice."""
        ...


__all__ = [
    "FailureStore",
    "PageStore",
    "ReceiptStore",
    "RowStatus",
    "RunStatus",
    "RunStore",
    "SheetStore",
    "Store",
    "WaitStore",
]


class StoreWrapping:
    """A store with each coroutine method wrapped once, by ``wrap(name, method)``.

    Every other attribute (``url``, and private names) passes through. The
    wrapped method is made on first use and kept as an attribute.
    """

    def __init__(
        self, store: Store, wrap: Callable[[str, Callable[..., Awaitable[Any]]], Callable[..., Any]]
    ) -> None:
        self._store = store
        self._wrap = wrap

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(found):
            return found
        wrapped = self._wrap(name, found)
        setattr(self, name, wrapped)  # found once per name, then an attribute
        return wrapped
