"""Dataset execution: the map.

``ctx.dataset(name, rows).with_column(...).run(...)`` reads source rows
lazily in pages of ``page_size``. Each page runs in its own nursery with its
stall observer; two pages may overlap so one page's last commits do not stall
the next page's rows. Rows are admitted by the runtime's row limiter
(``max_concurrent_rows``, shared by every map of the runtime); a row's slot
is freed when the terminal-row writer admits it. Rows are counted as
completed or failed only when their batch has committed.

A key already completed in the sheet (an earlier attempt) is skipped; a key
seen twice is skipped as a duplicate. Rows that failed in an earlier attempt
run again.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from ._errors import (
    MapMemoryLimitError,
    PersistenceLatchTripped,
    PlayDefinitionError,
    PlayInputError,
    RowOutputNotJsonSerializable,
    StoreError,
    format_error,
)
from ._groups import open_nursery
from ._json import dumps, loads
from ._owner import owner_is_dead
from ._records import PageLease, SheetEntry, SheetRow
from ._stall import MapStallObserver
from ._writer import TerminalRow, TerminalRowWriter

if TYPE_CHECKING:
    from ._context import PlayContext, RowContext

log = logging.getLogger("trioplay")

Row = Mapping[str, Any]
Resolver = Callable[[Row, "RowContext"], Any]
OnRowError = Literal["isolate", "fail"]
Reread = Callable[[int, int], list[Any]]

# Errors that no row can isolate: every other row would hit them too.
_FATAL = (PlayDefinitionError, PersistenceLatchTripped, StoreError, PlayInputError)
_PREVIEW_ROWS = 5
_PAGES_IN_FLIGHT = 2
_DONE = object()  # a page with nothing left to run


class MapResult:
    """What a dataset run produced.

    Counts cover this attempt: ``completed_count`` and ``failed_count`` rows
    committed now, ``skipped_count`` rows not run (their key was completed by
    an earlier attempt, or repeated in the input; ``duplicate_count`` is the
    latter part). ``preview`` holds the first few completed rows. While the
    completed rows fit ``retained_rows_budget_bytes`` they are also kept in
    memory (``retained_rows_complete``); :meth:`rows` streams from the
    durable sheet otherwise, so a large map never needs its result in memory.
    """

    def __init__(self, *, dataset: str, run_id: str, ctx: PlayContext) -> None:
        self.dataset = dataset
        self.run_id = run_id
        self.completed_count = 0
        self.failed_count = 0
        self.skipped_count = 0
        self.duplicate_count = 0
        self.preview: list[dict[str, Any]] = []
        self.retained_rows_complete = True
        # Retained rows are kept as their JSON text: strings cost their size,
        # and the garbage collector never has to walk them.
        self._retained: list[tuple[int, str]] | None = []
        self._ctx = ctx

    def to_dict(self) -> dict[str, Any]:
        """The counts and preview, as JSON (how a play returning this is stored)."""
        return {
            "dataset": self.dataset,
            "completed_count": self.completed_count,
            "failed_count": self.failed_count,
            "skipped_count": self.skipped_count,
            "duplicate_count": self.duplicate_count,
            "preview": self.preview,
        }

    def __repr__(self) -> str:
        return (
            f"MapResult(dataset={self.dataset!r}, completed={self.completed_count}, "
            f"failed={self.failed_count}, skipped={self.skipped_count})"
        )

    async def rows(
        self, *, status: Literal["completed", "failed"] = "completed"
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the sheet's rows in input order (completed ones by default).

        Failed rows carry their error under ``"_error"``.
        """
        if status == "completed" and self.retained_rows_complete and self._retained is not None:
            for _, text in sorted(self._retained, key=lambda item: item[0]):
                yield loads(text)
            return
        after = -1
        store = self._ctx.store
        while True:
            batch = await store.read_rows(
                self.run_id, self.dataset, status=status, after_position=after, limit=1000
            )
            for row in batch:
                data = loads(row.data_json)
                if row.error is not None:
                    data["_error"] = row.error
                yield data
            if len(batch) < 1000:
                return
            after = batch[-1].position


class Dataset:
    """A durable sheet being defined: source rows plus resolver columns.

    Built by ``ctx.dataset(name, rows)``; each :meth:`with_column` returns a
    new ``Dataset`` (the builder is immutable), :meth:`run` executes it.
    """

    def __init__(
        self,
        ctx: PlayContext,
        name: str,
        source: Any,
        columns: tuple[tuple[str, Resolver], ...] = (),
    ) -> None:
        if not isinstance(name, str) or not name:
            raise PlayDefinitionError(f"dataset name must be a non-empty string, got {name!r}")
        self._ctx = ctx
        self.name = name
        self._source = source
        self._columns = columns

    def with_column(self, name: str, resolver: Resolver) -> Dataset:
        """Add a column computed by ``resolver(row, rc)`` (sync or async).

        Resolvers run in the order they were added; each sees the input fields
        and the columns before it.
        """
        if not isinstance(name, str) or not name:
            raise PlayDefinitionError(f"column name must be a non-empty string, got {name!r}")
        if any(existing == name for existing, _ in self._columns):
            raise PlayDefinitionError(f"dataset {self.name!r} already has a column {name!r}")
        if not callable(resolver):
            raise PlayDefinitionError(f"column {name!r}: resolver must be callable")
        return Dataset(self._ctx, self.name, self._source, (*self._columns, (name, resolver)))

    async def run(
        self,
        key: str | None = None,
        on_row_error: OnRowError = "isolate",
        page_size: int | None = None,
    ) -> MapResult:
        """Run every row not yet completed, and return a :class:`MapResult`.

        ``key`` names the field that identifies a row (default: its input
        position). ``on_row_error="isolate"`` records a failing row and goes
        on; ``"fail"`` records it, then raises its error. Errors that would
        fail every row (unknown tool, store failure, persistence latch) are
        raised either way.
        """
        if on_row_error not in ("isolate", "fail"):
            raise PlayDefinitionError(
                f"on_row_error must be 'isolate' or 'fail', got {on_row_error!r}"
            )
        size = page_size if page_size is not None else self._ctx.limits.page_size
        if size < 1:
            raise PlayDefinitionError(f"page_size must be at least 1, got {size}")
        runner = _MapRun(self._ctx, self, key, on_row_error, size)
        return await runner.run()

    @property
    def columns(self) -> tuple[tuple[str, Resolver], ...]:
        return self._columns

    @property
    def source(self) -> Any:
        return self._source


@attrs.define(eq=False)
class _Page:
    offset: int
    observer: MapStallObserver
    outstanding: int = 0
    failed: int = 0
    spawning_done: bool = False
    lost: bool = False
    settled: trio.Event = attrs.field(factory=trio.Event)

    def row_settled(self) -> None:
        self.outstanding -= 1
        if self.spawning_done and self.outstanding == 0:
            self.settled.set()


class _RowSizes:
    """Estimates what a row will cost in memory, from the rows finished so far.

    A row's reservation is ``_OVERHEAD`` times the running mean size of the
    last rows as JSON (the JSON text, the parsed values and the receipt
    payload live at once); before any row finished it is ``_INITIAL``.
    """

    _OVERHEAD = 3
    _WINDOW = 64
    _INITIAL = 64 * 1024

    def __init__(self) -> None:
        self._mean = 0.0
        self._count = 0

    def observe(self, size: int) -> None:
        self._count += 1
        weight = 1 / min(self._count, self._WINDOW)
        self._mean += (size - self._mean) * weight

    def estimate(self) -> int:
        if self._count == 0:
            return self._INITIAL
        return max(1024, int(self._mean * self._OVERHEAD))


class _MapRun:
    def __init__(
        self,
        ctx: PlayContext,
        dataset: Dataset,
        key: str | None,
        on_row_error: OnRowError,
        page_size: int,
    ) -> None:
        self.ctx = ctx
        self.dataset = dataset
        self.name = dataset.name
        self.key_field = key
        self.on_row_error = on_row_error
        self.page_size = page_size
        self.limits = ctx.limits
        self.result = MapResult(dataset=dataset.name, run_id=ctx.run_id, ctx=ctx)
        self.inflight_keys: set[str] = set()
        self.sizes = _RowSizes()
        self.retained_bytes = 0
        self.total: int | None = None
        self.writer = TerminalRowWriter(
            ctx.store,
            ctx.run_id,
            dataset.name,
            buffer_bytes=self.limits.writer_buffer_bytes,
            max_flush=self.limits.writer_max_flush,
            cleanup_timeout=self.limits.cleanup_timeout,
            on_commit=self._on_commit,
            before_write=ctx.receipts_written,
        )
        self.progress_dirty = False

    # -- the whole map ------------------------------------------------------
    async def run(self) -> MapResult:
        source, reread = await self._open_source()
        self.ctx.emit("map.started", {"map": self.name, "total": self.total})
        error: Exception | None = None
        async with open_nursery() as nursery:
            await nursery.start(self.writer.run)
            nursery.start_soon(self._report_progress)
            try:
                await self._run_pages(source, reread)
            except Exception as exc:
                error = exc
            finally:
                self.writer.close_input()
            await self.writer.finished.wait()
            nursery.cancel_scope.cancel()
        if error is not None:
            raise error
        latch = self.ctx.latch
        if latch is not None:
            raise PersistenceLatchTripped(
                f"dataset {self.name!r}: a completion could not be recorded ({latch})"
            ) from latch
        self.ctx.emit("map.progress", self._counts())
        self.ctx.emit("map.finished", self._counts())
        return self.result

    async def _open_source(self) -> tuple[Iterator[Any], Reread | None]:
        """An iterator over the rows, and a way to read a page again if there is one."""
        source = self.dataset.source
        validate = getattr(source, "validate", None)
        if callable(validate):
            # A full structural scan before any tool call: bad lines fail now.
            counted = await trio.to_thread.run_sync(validate, abandon_on_cancel=True)
            if isinstance(counted, int):
                self.total = counted
        elif hasattr(source, "__len__"):
            self.total = len(source)
        if not isinstance(source, Iterable) or isinstance(source, str | bytes | Mapping):
            raise PlayDefinitionError(
                f"dataset {self.name!r}: rows must be an iterable of mappings "
                f"(a list, a generator, ctx.csv(...)), got {type(source).__name__}"
            )
        rows = iter(source)
        if rows is source:
            return rows, None  # a generator: read once

        def reread(offset: int, length: int) -> list[Any]:
            return list(itertools.islice(iter(source), offset, offset + length))

        return rows, reread

    async def _run_pages(self, rows: Iterator[Any], reread: Reread | None) -> None:
        """Lease and run every page; pages held by a live peer are run last, if at all."""
        slots = trio.Semaphore(_PAGES_IN_FLIGHT)
        position = 0
        # A page starts its rows only once the page before it has started all
        # of its own: pages overlap in their tails, never compete for rows.
        previous = trio.Event()
        previous.set()
        held: list[tuple[int, list[Any] | None, int]] = []
        async with open_nursery() as pages:
            while True:
                chunk = list(itertools.islice(rows, self.page_size))
                if not chunk:
                    break
                offset = position
                position += len(chunk)
                # The lease is taken only when a slot is free, so it cannot
                # expire while the page waits for the page before it.
                await slots.acquire()
                started = await self._try_page(pages, chunk, offset, slots, previous)
                if isinstance(started, trio.Event):
                    previous = started
                    continue
                slots.release()
                if started is None:
                    # Keep the rows only if the source cannot be read again.
                    held.append((offset, None if reread else chunk, len(chunk)))
            for offset, kept, length in held:
                await slots.acquire()
                claim = await self._await_page(offset)
                chunk = kept if kept is not None else reread(offset, length)  # type: ignore[misc]
                started = await self._try_page(pages, chunk, offset, slots, previous, claim)
                if isinstance(started, trio.Event):
                    previous = started
                else:
                    slots.release()

    async def _try_page(
        self,
        pages: trio.Nursery,
        chunk: list[Any],
        offset: int,
        slots: trio.Semaphore,
        previous: trio.Event,
        claim: PageLease | Literal["held", "done"] | None = None,
    ) -> trio.Event | object | None:
        """Start the page if it is ours to run.

        Returns the page's "all rows started" event, ``_DONE`` when nothing
        in it needs to run, or ``None`` when a live peer holds it. A page
        marked done is not trusted blindly: its rows are checked against the
        sheet, so rows added to the input since, or rows that failed in an
        earlier attempt, still run.
        """
        if claim is None:
            claim = await self._lease_page(offset)
        if claim == "held":
            return None
        planned = await self._plan_page(chunk, offset)
        if claim == "done":
            if not planned:
                return _DONE
            claim = await self._lease_page(offset, reopen=True)
            if not isinstance(claim, PageLease):
                for _, key, _ in planned:
                    self.inflight_keys.discard(key)
                return None if claim == "held" else _DONE
        assert isinstance(claim, PageLease)
        spawned = trio.Event()
        pages.start_soon(self._run_page, planned, claim, slots, previous, spawned)
        await trio.lowlevel.checkpoint()
        return spawned

    async def _lease_page(
        self, offset: int, *, reopen: bool = False
    ) -> PageLease | Literal["held", "done"]:
        """Claim a page: its lease, ``"held"`` by a live peer, or ``"done"``."""
        ctx = self.ctx
        takeover: str | None = None
        while True:
            claim = await ctx.store.claim_page(
                ctx.run_id,
                self.name,
                offset,
                owner=ctx.owner,
                lease_ttl=self.limits.lease_ttl,
                now=ctx.wall_clock(),
                takeover_lease=takeover,
                reopen=reopen,
            )
            if claim.status == "claimed":
                assert claim.lease_id is not None
                return PageLease(ctx.run_id, self.name, offset, claim.lease_id)
            if claim.status == "held" and takeover is None and owner_is_dead(claim.owner):
                takeover = claim.lease_id  # a crashed local process: take over now
                continue
            return claim.status

    async def _await_page(self, offset: int) -> PageLease | Literal["done"]:
        """Wait while a live peer holds a page: until it is done or its lease runs out."""
        while True:
            claim = await self._lease_page(offset)
            if claim != "held":
                return claim
            await trio.sleep(self.limits.receipt_wait_delay)

    async def _release_page(self, lease: PageLease) -> None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self.limits.cleanup_timeout
            try:
                await self.ctx.store.release_page(lease, now=self.ctx.wall_clock())
            except Exception:
                pass  # the lease expires on its own

    async def _keep_page(self, lease: PageLease, page: _Page, scope: trio.CancelScope) -> None:
        """Renew a page lease every ``lease_ttl / 2``; give the page up if it is gone.

        A lost page lease means another process took the page over (ours
        looked dead to it): our unfinished rows of that page are cancelled
        and left to the new owner, whose receipts replay what we already paid.
        """
        while True:
            await trio.sleep(self.limits.lease_ttl / 2)
            try:
                (expiry,) = await self.ctx.store.heartbeat_pages(
                    [lease], lease_ttl=self.limits.lease_ttl, now=self.ctx.wall_clock()
                )
            except Exception as exc:
                log.warning("page lease heartbeat failed: %s", exc)
                continue
            if expiry is None:
                page.lost = True
                log.warning(
                    "dataset %r: the page at row %d passed to another process; "
                    "its unfinished rows are left to it",
                    self.name,
                    lease.offset,
                )
                self.ctx.emit("map.page_lost", {"map": self.name, "page_offset": lease.offset})
                scope.cancel()
                return

    async def _plan_page(
        self, chunk: list[Any], offset: int
    ) -> list[tuple[int, str, dict[str, Any]]]:
        """Keys for ``chunk``; drop duplicates and rows already completed."""
        keyed: list[tuple[int, str, dict[str, Any]]] = []
        for index, raw in enumerate(chunk):
            position = offset + index
            if not isinstance(raw, dict | Mapping):  # dict first: no ABC check
                raise PlayInputError(
                    f"dataset {self.name!r} row {position}: expected a mapping of fields, "
                    f"got {type(raw).__name__}"
                )
            keyed.append((position, self._key_of(raw, position), dict(raw)))
        # Keys in flight before the sheet read are duplicates; a key that
        # commits during the read is in the sheet by then.
        busy = {key for _, key, _ in keyed if key in self.inflight_keys}
        entries: dict[str, SheetEntry] = await self.ctx.store.sheet_status(
            self.ctx.run_id, self.name, list({key for _, key, _ in keyed})
        )
        attempt = self.ctx.attempt
        planned: list[tuple[int, str, dict[str, Any]]] = []
        for position, key, data in keyed:
            entry = entries.get(key)
            if key in busy or key in self.inflight_keys:
                self.result.duplicate_count += 1
                self.result.skipped_count += 1
            elif entry is not None and (entry.status == "completed" or entry.attempt == attempt):
                if entry.attempt == attempt:
                    self.result.duplicate_count += 1
                else:
                    self._drop_retained()  # the sheet holds rows this attempt never saw
                self.result.skipped_count += 1
            else:
                self.inflight_keys.add(key)
                planned.append((position, key, data))
        return planned

    def _key_of(self, raw: Mapping[str, Any], position: int) -> str:
        if self.key_field is None:
            return str(position)
        value = raw.get(self.key_field)
        if value is None or value == "":
            raise PlayInputError(
                f"dataset {self.name!r} row {position}: the key field "
                f"{self.key_field!r} is missing or empty",
                column=self.key_field,
            )
        return value if isinstance(value, str) else dumps(value)

    # -- one page -----------------------------------------------------------
    async def _run_page(
        self,
        planned: list[tuple[int, str, dict[str, Any]]],
        lease: PageLease,
        slots: trio.Semaphore,
        previous_spawned: trio.Event,
        spawned: trio.Event,
    ) -> None:
        offset = lease.offset
        try:
            await previous_spawned.wait()
            observer = MapStallObserver(
                map_name=self.name,
                page_offset=offset,
                interval=self.limits.stall_log_interval,
                writer_diagnostics=self.writer.diagnostics,
                emit=lambda report: self.ctx.emit("map.stall", report),
            )
            page = _Page(offset, observer)
            limiter = self.ctx.row_limiter
            budget = self.ctx.row_budget
            async with open_nursery() as nursery:
                await nursery.start(observer.run)
                nursery.start_soon(self._keep_page, lease, page, nursery.cancel_scope)
                async with open_nursery() as rows:
                    # Consume the plan as rows start: a finished row's data must
                    # not stay alive until its whole page ends.
                    planned.reverse()
                    while planned:
                        position, key, data = planned.pop()
                        token = object()
                        try:
                            limiter.acquire_on_behalf_of_nowait(token)
                        except trio.WouldBlock:
                            await limiter.acquire_on_behalf_of(token)
                        try:
                            estimate = self.sizes.estimate()
                            reserved = budget.try_acquire(estimate)
                            if reserved is None:
                                reserved = await budget.acquire(estimate)
                        except BaseException:
                            limiter.release_on_behalf_of(token)
                            raise
                        page.outstanding += 1
                        rows.start_soon(self._run_row, page, position, key, data, token, reserved)
                    page.spawning_done = True
                    spawned.set()
                    if page.outstanding == 0:
                        page.settled.set()
                await page.settled.wait()
                nursery.cancel_scope.cancel()
            if page.lost:
                return
            await self.ctx.store.finish_page(
                lease, attempt=self.ctx.attempt, failed=page.failed, now=self.ctx.wall_clock()
            )
        except BaseException:
            await self._release_page(lease)
            raise
        finally:
            slots.release()

    async def _run_row(
        self,
        page: _Page,
        position: int,
        key: str,
        data: dict[str, Any],
        token: object,
        reserved: int,
    ) -> None:
        try:
            row, failure = await self._resolve(page, position, key, data)
            terminal_token = page.observer.terminal_queued()
            size = len(row.data_json) + len(key) + 64
            self.sizes.observe(size)
            # Keep the row itself only while someone may still want it in memory.
            wanted = len(self.result.preview) < _PREVIEW_ROWS
            keep = data if row.status == "completed" and wanted else None
            # The row now lives in row.data_json: a row waiting for admission
            # must not hold its parsed values as well.
            del data
            await self.writer.admit(TerminalRow(row, size, page, terminal_token, keep))
            page.observer.terminal_admitted(terminal_token)
        except BaseException:
            page.row_settled()
            raise
        finally:
            self.ctx.row_limiter.release_on_behalf_of(token)
            self.ctx.row_budget.release(reserved)
        if failure is not None and self.on_row_error == "fail":
            failure.add_note(f"trioplay: dataset {self.name!r}, row {key!r} failed")
            raise failure

    async def _resolve(
        self, page: _Page, position: int, key: str, data: dict[str, Any]
    ) -> tuple[SheetRow, Exception | None]:
        rc = self.ctx.row_context(self.name, key, page.observer)
        observer_token = page.observer.resolver_started()
        rc.observer_token = observer_token
        column = ""
        try:
            for column, resolver in self.dataset.columns:
                value = resolver(data, rc)
                if inspect.isawaitable(value):
                    value = await value
                data[column] = value
            try:
                text = dumps(data)
            except (TypeError, ValueError):
                raise _not_serialisable(data, self.dataset.columns) from None
            if len(text) > self.limits.active_rows_budget_bytes:
                raise MapMemoryLimitError(
                    f"the row is {len(text):,} bytes as JSON, more than "
                    f"active_rows_budget_bytes={self.limits.active_rows_budget_bytes:,}"
                )
        except _FATAL as exc:
            exc.add_note(f"trioplay: dataset {self.name!r}, row {key!r}, column {column!r}")
            raise
        except Exception as exc:
            return self._failed_row(position, key, data, exc), exc
        finally:
            page.observer.resolver_finished(observer_token)
        return SheetRow(key, position, "completed", text, None, self.ctx.attempt), None

    def _failed_row(
        self, position: int, key: str, data: dict[str, Any], exc: Exception
    ) -> SheetRow:
        kept: dict[str, Any] = {}
        for name, value in data.items() if not isinstance(exc, MapMemoryLimitError) else ():
            try:
                dumps(value)
            except (TypeError, ValueError):
                continue
            kept[name] = value
        return SheetRow(key, position, "failed", dumps(kept), format_error(exc), self.ctx.attempt)

    # -- commits ------------------------------------------------------------
    def _on_commit(self, batch: list[TerminalRow]) -> None:
        result = self.result
        budget = self.limits.retained_rows_budget_bytes
        for item in batch:
            row = item.row
            self.inflight_keys.discard(row.key)
            if row.status == "completed":
                result.completed_count += 1
                if len(result.preview) < _PREVIEW_ROWS and item.data is not None:
                    result.preview.append(item.data)
                if result._retained is not None:
                    self.retained_bytes += item.size
                    if self.retained_bytes > budget:
                        self._release_retained()
                    else:
                        result._retained.append((row.position, row.data_json))
            page: _Page = item.page
            if row.status == "failed":
                result.failed_count += 1
                page.failed += 1
            page.observer.terminal_committed(item.token)
            page.row_settled()
        self.progress_dirty = True

    def _drop_retained(self) -> None:
        self.result._retained = None
        self.result.retained_rows_complete = False

    def _release_retained(self) -> None:
        self._drop_retained()
        log.info(
            "dataset %r: completed rows passed retained_rows_budget_bytes=%d; "
            "rows() will stream them from the store",
            self.name,
            self.limits.retained_rows_budget_bytes,
        )

    def _counts(self) -> dict[str, Any]:
        r = self.result
        return {
            "map": self.name,
            "completed": r.completed_count,
            "failed": r.failed_count,
            "skipped": r.skipped_count,
            "duplicates": r.duplicate_count,
            "total": self.total,
        }

    async def _report_progress(self) -> None:
        """Emit ``map.progress`` every ``progress_flush_interval`` while counts change."""
        while True:
            await trio.sleep(self.limits.progress_flush_interval)
            if self.progress_dirty:
                self.progress_dirty = False
                self.ctx.emit("map.progress", self._counts())


def _not_serialisable(
    data: dict[str, Any], columns: tuple[tuple[str, Resolver], ...]
) -> RowOutputNotJsonSerializable:
    for name, value in data.items():
        try:
            dumps(value)
        except (TypeError, ValueError) as exc:
            kind = "column" if any(name == column for column, _ in columns) else "input field"
            return RowOutputNotJsonSerializable(
                f"{kind} {name!r} holds a {type(value).__name__} that cannot be stored "
                f"as JSON ({exc}); return str, int, float, bool, None, list or dict"
            )
    return RowOutputNotJsonSerializable("the row cannot be stored as JSON")
