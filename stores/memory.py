"""``memory://``: a store that lives in process memory, for tests and scenarios.

The lease rules themselves live in :mod:`trioplay.stores._rules`, shared
with the SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import trio

from trioplay import (
    EventRecord,
    Receipt,
    RunRecord,
    SendRequest,
    SendResult,
    SheetEntry,
    SheetRow,
    UnknownRun,
    WaitRecord,
    WaitRequest,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import trioplay as tp
    from trioplay import RunStatus

    from ._rules import Begin
    from ._terms import End, Page, PageTerms, Query

from ._rules import (
    PageRecord,
    Slot,
    address,
    decide_attempt,
    decide_cancel,
    decide_claims,
    decide_page,
    decide_register,
    decide_send,
    decide_sheet_writes,
    decide_timeouts,
    failed_keys,
    fenced_pages,
    run_leases_of,
    slot_of,
    wait_order,
)
from ._terms import StoreTerms

URL = "memory://"

_L = TypeVar("_L", "tp.Lease", "tp.Completion", "tp.Failure")


def _settled(
    receipt: Receipt,
    status: Literal["completed", "failed"],
    result_json: str | None,
    error_json: str | None,
    now: float,
) -> Receipt:
    # attrs.evolve costs as much as the rest of a completion, on the hot path.
    return Receipt(
        receipt.key,
        receipt.operation,
        receipt.name,
        status,
        receipt.run_id,
        receipt.lease_id,
        None,
        receipt.owner,
        receipt.attempts,
        result_json,
        error_json,
        receipt.created_at,
        now,
        now,
    )


# What a release changes, in a receipt or a page: back to pending, with no lease.
_RELEASED: dict[str, Any] = {
    "status": "pending",
    "lease_id": None,
    "lease_expires_at": None,
    "owner": None,
}


def _leased(
    receipts: dict[str, Receipt], lease: tp.Lease | tp.Completion | tp.Failure
) -> Receipt | None:
    """The receipt under ``lease``, if that lease is still its own."""
    receipt = receipts.get(lease.key)
    if receipt is None or receipt.status != "running" or receipt.lease_id != lease.lease_id:
        return None
    return receipt


def _leased_page(
    pages: dict[tuple[str, str, int], PageRecord], lease: tp.PageLease
) -> PageRecord | None:
    """The page under ``lease``, if that lease is still its own."""
    page = pages.get((lease.run_id, lease.dataset, lease.offset))
    if page is None or page.status != "running" or page.lease_id != lease.lease_id:
        return None
    return page


def _decide_writes(
    pages: dict[tuple[str, str, int], PageRecord],
    sheet: _Sheet,
    run_id: str,
    dataset: str,
    rows: Sequence[SheetRow],
    leases: Sequence[tp.PageLease | None],
) -> list[tp.SheetWrite]:
    """What ``write_terminal_rows`` does with each row (see :func:`decide_sheet_writes`)."""
    current = {
        offset: page.lease_id
        for offset in fenced_pages(leases)
        if (page := pages.get((run_id, dataset, offset))) is not None
    }
    stored = sheet.rows
    completed = [
        key
        for key in failed_keys(rows)
        if (row := stored.get(key)) is not None and row.status == "completed"
    ]
    return decide_sheet_writes(rows, leases, current, completed)


def _run_leases(
    receipts: dict[str, Receipt],
    pages: dict[tuple[str, str, int], PageRecord],
    run_ids: Sequence[str],
) -> dict[str, tp.RunLeases]:
    """``run_leases``: the latest expiry and renewal of each run's running receipts and pages."""
    wanted = set(run_ids)
    held: dict[str, list[tuple[float | None, float]]] = {}
    for receipt in receipts.values():
        if receipt.status == "running" and receipt.run_id in wanted:
            held.setdefault(receipt.run_id, []).append(
                (receipt.lease_expires_at, receipt.updated_at)
            )
    for (run_id, _, _), page in pages.items():
        if page.status == "running" and run_id in wanted:
            held.setdefault(run_id, []).append((page.lease_expires_at, page.updated_at))
    return {run_id: run_leases_of(leases) for run_id, leases in held.items()}


def _move_page(
    pages: dict[tuple[str, str, int], PageRecord], lease: tp.PageLease, changes: dict[str, Any]
) -> bool:
    """Change the leased page as ``changes`` say; ``False`` if the lease is no longer its own."""
    page = _leased_page(pages, lease)
    if page is None:
        return False
    pages[lease.run_id, lease.dataset, lease.offset] = attrs.evolve(page, **changes)
    return True


@attrs.define
class _Sheet:
    rows: dict[str, SheetRow] = attrs.Factory(dict)
    # Rows by position, rebuilt lazily after a write: sheets are written
    # during a map and read after it, so one sort serves every page read.
    ordered: list[SheetRow] | None = None
    positions: list[int] = attrs.Factory(list)

    def by_position(self) -> tuple[list[SheetRow], list[int]]:
        if self.ordered is None:
            self.ordered = sorted(self.rows.values(), key=lambda row: row.position)
            self.positions = [row.position for row in self.ordered]
        return self.ordered, self.positions


class MemoryWaits:
    """Waits and events (``trioplay.WaitStore``) in dicts: the wait half of :class:`MemoryStore`.

    Each method is one synchronous step after a checkpoint, as in the store.
    """

    _runs: dict[str, RunRecord]

    def __init__(self) -> None:
        self._waits: dict[str, WaitRecord] = {}
        self._tokens: dict[str, str] = {}  # token -> wait key
        self._slot_waits: dict[Slot, list[str]] = {}
        # Events by (run, event id), in send order (dicts keep insertion order).
        self._events: dict[tuple[str, str], EventRecord] = {}
        self._slot_events: dict[Slot, list[tuple[str, str]]] = {}

    def _write_waits(self, waits: Sequence[WaitRecord]) -> None:
        for wait in waits:
            if wait.wait_key not in self._waits:
                self._tokens[wait.token] = wait.wait_key
                self._slot_waits.setdefault(slot_of(wait), []).append(wait.wait_key)
            self._waits[wait.wait_key] = wait

    def _write_events(self, events: Sequence[EventRecord]) -> None:
        for event in events:
            where = (event.run_id, event.event_id)
            if where not in self._events:
                self._slot_events.setdefault(slot_of(event), []).append(where)
            self._events[where] = event

    def _buffered(self, slots: set[Slot]) -> list[EventRecord]:
        found = [self._events[where] for slot in slots for where in self._slot_events.get(slot, ())]
        return [event for event in found if event.consumed_by is None]

    async def register_waits(
        self, requests: Sequence[WaitRequest], *, now: float
    ) -> list[WaitRecord]:
        await trio.lowlevel.checkpoint()
        stored = {r.wait_key: w for r in requests if (w := self._waits.get(r.wait_key))}
        slots = {slot_of(r) for r in requests if r.wait_key not in stored}
        decision = decide_register(requests, stored, self._buffered(slots), now)
        self._write_waits(decision.inserts)
        self._write_waits(decision.updates)
        self._write_events(decision.consumed)
        return decision.records

    async def poll_waits(self, wait_keys: Sequence[str], *, now: float) -> list[WaitRecord | None]:
        await trio.lowlevel.checkpoint()
        found = [self._waits.get(key) for key in wait_keys]
        self._write_waits(decide_timeouts((w for w in found if w is not None), now))
        return [self._waits[w.wait_key] if w is not None else None for w in found]

    async def send_event(self, request: SendRequest, *, now: float) -> SendResult:
        await trio.lowlevel.checkpoint()
        run = self._runs.get(request.run_id)
        status = run.status if run is not None else None
        token_wait = None
        if request.token is not None and (key := self._tokens.get(request.token)) is not None:
            token_wait = self._waits[key]
        request = address(request, status, token_wait, store=URL)
        open_waits = [
            wait
            for key in self._slot_waits.get(slot_of(request), ())
            if (wait := self._waits[key]).status == "waiting"
        ]
        delivery = decide_send(
            request,
            self._events.get((request.run_id, request.event_id)),
            open_waits,
            status,
            now,
            store=URL,
        )
        if delivery.event is not None:
            self._write_events([delivery.event])
        if delivery.wait is not None:
            self._write_waits([delivery.wait])
        return delivery.result

    async def cancel_run(self, run_id: str, *, now: float) -> int:
        await trio.lowlevel.checkpoint()
        run = self._runs.get(run_id)
        if run is None:
            raise UnknownRun(run_id, URL)
        cancelled = decide_cancel((w for w in self._waits.values() if w.run_id == run_id), now)
        self._write_waits(cancelled)
        self._runs[run_id] = attrs.evolve(run, status="cancelled", updated_at=now)
        return len(cancelled)

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        await trio.lowlevel.checkpoint()
        return sorted((w for w in self._waits.values() if w.run_id == run_id), key=wait_order)

    async def list_events(self, run_id: str, *, unclaimed_only: bool = False) -> list[EventRecord]:
        await trio.lowlevel.checkpoint()
        return [
            event
            for event in self._events.values()
            if event.run_id == run_id and not (unclaimed_only and event.consumed_by is not None)
        ]


class MemoryStore(MemoryWaits, StoreTerms):
    """A :class:`trioplay.Store` in plain dicts, lost when the process exits.

    Every method is one synchronous step after a checkpoint, so it is
    atomic, cancellable before it acts, and never waits in real time: it is
    the store to use under ``trio.testing.MockClock(autojump_threshold=0)``.

    Two fault-injection hooks serve writer and stall tests:

    - ``write_delay`` (seconds, virtual-time friendly) makes
      ``write_terminal_rows`` sleep before it commits; cancelling it during
      the sleep writes nothing;
    - :meth:`fail_writes` makes ``write_terminal_rows`` raise the given error,
      without writing, until it is called again with ``None``.
    """

    def __init__(self, *, write_delay: float = 0.0) -> None:
        self._write_delay = write_delay
        self._write_error: BaseException | None = None
        self._runs: dict[str, RunRecord] = {}
        self._receipts: dict[str, Receipt] = {}
        self._sheets: dict[tuple[str, str], _Sheet] = {}
        self._pages: dict[tuple[str, str, int], PageRecord] = {}
        super().__init__()

    @property
    def url(self) -> str:
        return URL

    def fail_writes(self, error: BaseException | None) -> None:
        """Make ``write_terminal_rows`` raise ``error`` from now on (``None`` heals it)."""
        self._write_error = error

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    # -- runs ---------------------------------------------------------------
    async def _begin_attempt(self, begin: Begin) -> tp.RunRecord:
        await trio.lowlevel.checkpoint()
        run_id = begin.run_id
        parent = self._runs.get(begin.parent_run_id or "")
        record, write = decide_attempt(self._runs.get(run_id), parent, begin)
        if write:
            self._runs[run_id] = record
        return record

    async def _finish_attempt(
        self, run_id: str, status: RunStatus, attempt: int, end: End
    ) -> bool | None:
        now, output_json, error, stats_json = end
        await trio.lowlevel.checkpoint()
        record = self._runs.get(run_id)
        if record is None:
            return None
        if record.attempt != attempt:
            return False  # a later attempt holds the run
        self._runs[run_id] = attrs.evolve(
            record,
            status=status,
            updated_at=now,
            output_json=output_json,
            error=error,
            stats_json=stats_json,
        )
        return True

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._runs.get(run_id)

    async def list_runs(self, *, limit: int = 50) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        # Ties on updated_at go to the run created last, as in SQL by rowid.
        newest = sorted(
            enumerate(self._runs.values()),
            key=lambda item: (item[1].updated_at, item[0]),
            reverse=True,
        )
        return [record for _, record in newest[:limit]]

    # -- receipts -----------------------------------------------------------
    async def claim_many(
        self, requests: Sequence[tp.ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[tp.ClaimOutcome]:
        await trio.lowlevel.checkpoint()
        outcomes, claimed = decide_claims(
            requests, self._receipts, owner=owner, lease_ttl=lease_ttl, now=now
        )
        self._receipts.update((receipt.key, receipt) for receipt in claimed)
        return outcomes

    async def heartbeat_many(
        self, leases: Sequence[tp.Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        await trio.lowlevel.checkpoint()
        expiries: list[float | None] = []
        for lease in leases:
            receipt = _leased(self._receipts, lease)
            if receipt is None:
                expiries.append(None)
                continue
            expires = now + lease_ttl
            self._receipts[lease.key] = attrs.evolve(
                receipt, lease_expires_at=expires, updated_at=now
            )
            expiries.append(expires)
        return expiries

    async def complete_many(self, items: Sequence[tp.Completion], *, now: float) -> list[bool]:
        await trio.lowlevel.checkpoint()
        return self._settle_leased(
            items, lambda receipt, item: _settled(receipt, "completed", item.result_json, None, now)
        )

    async def fail_many(self, items: Sequence[tp.Failure], *, now: float) -> list[bool]:
        await trio.lowlevel.checkpoint()
        return self._settle_leased(
            items, lambda receipt, item: _settled(receipt, "failed", None, item.error_json, now)
        )

    async def release_many(self, leases: Sequence[tp.Lease], *, now: float) -> list[bool]:
        await trio.lowlevel.checkpoint()
        return self._settle_leased(
            leases, lambda receipt, _: attrs.evolve(receipt, **_RELEASED, updated_at=now)
        )

    def _settle_leased(
        self, leases: Sequence[_L], settle: Callable[[Receipt, _L], Receipt]
    ) -> list[bool]:
        """Replace each receipt still held under its lease by ``settle(receipt, lease)``;
        for each lease, whether it was."""
        done: list[bool] = []
        for lease in leases:
            receipt = _leased(self._receipts, lease)
            if receipt is not None:
                self._receipts[lease.key] = settle(receipt, lease)
            done.append(receipt is not None)
        return done

    async def get_many(self, keys: Sequence[str]) -> list[Receipt | None]:
        await trio.lowlevel.checkpoint()
        return [self._receipts.get(key) for key in keys]

    async def count_receipts(self, run_id: str) -> dict[str, int]:
        await trio.lowlevel.checkpoint()
        return dict(Counter(r.status for r in self._receipts.values() if r.run_id == run_id))

    # -- recorded failures (FailureStore) ------------------------------------
    async def list_failed_receipts(
        self, run_id: str, *, after_key: str = "", limit: int = 1000
    ) -> list[Receipt]:
        await trio.lowlevel.checkpoint()
        failed = sorted(
            (r for r in self._receipts.values() if r.run_id == run_id and r.status == "failed"),
            key=lambda receipt: receipt.key,
        )
        return [receipt for receipt in failed if receipt.key > after_key][:limit]

    async def forget_failed_receipts(
        self, run_id: str, keys: Sequence[str], *, now: float
    ) -> list[str]:
        await trio.lowlevel.checkpoint()
        forgotten: list[str] = []
        for key in dict.fromkeys(keys):
            receipt = self._receipts.get(key)
            if receipt is None or receipt.status != "failed" or receipt.run_id != run_id:
                continue
            self._receipts[key] = attrs.evolve(
                receipt,
                status="pending",
                lease_id=None,
                lease_expires_at=None,
                owner=None,
                error_json=None,
                updated_at=now,
            )
            forgotten.append(key)
        return forgotten

    # -- dataset sheets -----------------------------------------------------
    async def write_terminal_rows(
        self,
        run_id: str,
        dataset: str,
        rows: Sequence[SheetRow],
        *,
        leases: Sequence[tp.PageLease | None] = (),
    ) -> list[tp.SheetWrite]:
        if self._write_delay > 0:
            await trio.sleep(self._write_delay)
        else:
            await trio.lowlevel.checkpoint()
        if self._write_error is not None:
            raise self._write_error
        if not rows:
            return []
        sheet = self._sheets.setdefault((run_id, dataset), _Sheet())
        answers = _decide_writes(self._pages, sheet, run_id, dataset, rows, leases)
        for row, answer in zip(rows, answers, strict=True):
            if answer == "written":
                sheet.rows[row.key] = row
        sheet.ordered = None
        return answers

    async def sheet_status(
        self, run_id: str, dataset: str, keys: Sequence[str]
    ) -> dict[str, SheetEntry]:
        await trio.lowlevel.checkpoint()
        sheet = self._sheets.get((run_id, dataset))
        if sheet is None:
            return {}
        entries: dict[str, SheetEntry] = {}
        for key in keys:
            row = sheet.rows.get(key)
            if row is not None:
                entries[key] = SheetEntry(row.status, row.attempt)
        return entries

    async def _read_rows(self, run_id: str, dataset: str, query: Query) -> list[SheetRow]:
        status, after_position, limit = query
        await trio.lowlevel.checkpoint()
        sheet = self._sheets.get((run_id, dataset))
        if sheet is None or limit <= 0:
            return []
        ordered, positions = sheet.by_position()
        page: list[SheetRow] = []
        for index in range(bisect.bisect_right(positions, after_position), len(ordered)):
            row = ordered[index]
            if status is None or row.status == status:
                page.append(row)
                if len(page) == limit:
                    break
        return page

    async def count_rows(self, run_id: str, dataset: str) -> dict[str, int]:
        await trio.lowlevel.checkpoint()
        sheet = self._sheets.get((run_id, dataset))
        if sheet is None:
            return {}
        return dict(Counter(row.status for row in sheet.rows.values()))

    async def list_datasets(self, run_id: str) -> list[str]:
        await trio.lowlevel.checkpoint()
        return sorted(dataset for run, dataset in self._sheets if run == run_id)

    async def run_leases(self, run_ids: Sequence[str]) -> dict[str, tp.RunLeases]:
        await trio.lowlevel.checkpoint()
        return _run_leases(self._receipts, self._pages, run_ids)

    # -- page leases --------------------------------------------------------
    async def _claim_page(self, page: Page, terms: PageTerms) -> tp.PageClaim:
        await trio.lowlevel.checkpoint()
        answer, claimed = decide_page(self._pages.get(page), **terms)
        if claimed is not None:
            self._pages[page] = claimed
        return answer

    async def heartbeat_pages(
        self, leases: Sequence[tp.PageLease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        await trio.lowlevel.checkpoint()
        renew = {"lease_expires_at": now + lease_ttl, "updated_at": now}
        return [
            now + lease_ttl if _move_page(self._pages, lease, renew) else None for lease in leases
        ]

    async def finish_page(
        self, lease: tp.PageLease, *, attempt: int, failed: int, now: float
    ) -> bool:
        await trio.lowlevel.checkpoint()
        done = {"status": "done", "lease_expires_at": None, "attempt": attempt, "failed": failed}
        return _move_page(self._pages, lease, {**done, "updated_at": now})

    async def release_page(self, lease: tp.PageLease, *, now: float) -> bool:
        await trio.lowlevel.checkpoint()
        # The lease id stays until the next claim: rows the releasing process
        # still flushes are its own until another process claims the page.
        released = {**_RELEASED, "lease_id": lease.lease_id, "updated_at": now}
        return _move_page(self._pages, lease, released)


__all__ = ["MemoryStore", "PageRecord", "decide_claims", "decide_page"]
