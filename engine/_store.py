"""The ``Store`` protocol: everything the engine asks of durable storage.

``Store`` is four protocols, one per room of the engine that uses it:
:class:`ReceiptStore` (the receipts dispatcher), :class:`SheetStore` (the
terminal-row writer and the sheet's readers), :class:`PageStore` (the map's
page leases) and :class:`RunStore` (the runtime and the command line), plus
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
- time is the caller's ``now`` (wall-clock seconds), never the store's own
  clock, so tests can control lease expiry;
- failures raise :class:`trioplay.StoreError` (or a subclass) with a message
  that names the store and the operation;
- every call returns or fails in bounded time, even when the database stops
  answering (the SQL stores' ``call_timeout`` and ``lock_timeout``); a write
  that may or may not have committed says so (``StoreError.outcome_unknown``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ._records import (
    ClaimOutcome,
    ClaimRequest,
    Completion,
    Failure,
    Lease,
    PageClaim,
    PageLease,
    Receipt,
    RowStatus,
    RunRecord,
    RunStatus,
    SheetEntry,
    SheetRow,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


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
        self, run_id: str, dataset: str, rows: Sequence[SheetRow]
    ) -> None:
        """Upsert rows by ``(run_id, dataset, key)`` in one transaction."""
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
        parent_run_id: str | None = None,
        root_run_id: str | None = None,
        depth: int = 0,
    ) -> RunRecord:
        """Create the run (attempt 1) or start its next attempt (attempt + 1).

        Sets ``status="running"`` and returns the record as stored. A run
        stored with another ``play`` or another ``input_json`` is left as it
        is, in the same transaction, and returned as stored: the caller sees
        the difference (the runtime refuses the run id, ``RunIdConflict``).
        ``parent_run_id``, ``root_run_id`` and ``depth`` place a child play's
        run in its tree (written on its first attempt).
        """
        ...

    async def finish_attempt(
        self,
        run_id: str,
        status: RunStatus,
        *,
        now: float,
        output_json: str | None = None,
        error: str | None = None,
        stats_json: str | None = None,
    ) -> None: ...

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


@runtime_checkable
class Store(RunStore, ReceiptStore, SheetStore, PageStore, Protocol):
    """Durable storage for runs, receipts, dataset sheets and page leases.

    The four room protocols together, and the store's life: whoever opens
    the store (the runtime, the command line) holds a ``Store``; each room
    of the engine needs only its own protocol. ``isinstance(x, Store)``
    checks every method of the four.
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


__all__ = ["PageStore", "ReceiptStore", "RowStatus", "RunStatus", "RunStore", "SheetStore", "Store"]
