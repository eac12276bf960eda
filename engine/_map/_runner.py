"""Running a map: pages, row admission, the resolver chain, commits, progress.

``run_map`` reads source rows lazily in pages of ``page_size``. Each page
runs in its own nursery with its stall observer and its clone of the
terminal-row writer's send channel; the next page starts once a page has
started all its rows, so one page's stragglers and last commits never stall
the rows after them. Rows are admitted by slot and by bytes
(:class:`RowAdmission`: the runtime's row limiter and byte budget, shared by
every map of the runtime); a row's admission is given back when the
terminal-row writer admits it. Rows are counted as completed or failed only
when their batch has committed.
"""

from __future__ import annotations

import inspect
import itertools
from typing import TYPE_CHECKING, Any, Literal

import trio

from .._errors import (
    MapMemoryLimitError,
    PersistenceLatchTripped,
    PlayDefinitionError,
    PlayInputError,
    RowOutputNotJsonSerializable,
    RunEnded,
    StoreError,
    format_error,
)
from .._groups import open_nursery, start, start_soon
from .._json import dumps
from .._phase import enter_row, leave_row
from .._records import PageLease, SheetRow
from .._row_context import RowContext
from .._sources import open_source
from .._trace._cause import stall_cause
from .._trace._records import (
    MapFinished,
    MapProgress,
    MapStall,
    MapStarted,
    PageFinished,
    PageStarted,
    RowAdmitted,
    RowCommitted,
    RowResolverStarted,
    RowTerminal,
    RowWriterAdmitted,
)
from ._admission import RowAdmission
from ._pages import Page, PageLeases, PageState
from ._plan import Plan, RowPlanner
from ._result import PREVIEW_ROWS, MapResult
from ._stall import MapStallObserver
from ._writer import TerminalRow, TerminalRowWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .._run import RunServices
    from ._types import Columns, OnRowError

# Errors that no row can isolate: every other row would hit them too.
_FATAL = (PlayDefinitionError, PersistenceLatchTripped, StoreError, PlayInputError, RunEnded)
_DONE = object()  # a page with nothing left to run


async def run_map(
    services: RunServices,
    name: str,
    source: Any,
    columns: Columns,
    *,
    key: str | None,
    on_row_error: OnRowError,
    page_size: int,
) -> MapResult:
    """Run the rows of ``source`` not yet completed through ``columns``."""
    services.receipts.raise_if_ended()  # a dataset of a context kept past its run
    return await _MapRun(services, name, source, columns, key, on_row_error, page_size).run()


class _MapRun:
    def __init__(
        self,
        services: RunServices,
        name: str,
        source: Any,
        columns: Columns,
        key: str | None,
        on_row_error: OnRowError,
        page_size: int,
    ) -> None:
        self.services = services
        self.trace = services.trace  # tested at each emit point: None when nobody listens
        self.name = name
        self.source = source
        self.columns = columns
        self.on_row_error = on_row_error
        self.page_size = page_size
        self.limits = limits = services.limits
        self.result = MapResult(
            dataset=name,
            run_id=services.run_id,
            sheet=services.store,
            retained_budget=limits.retained_rows_budget_bytes,
        )
        self.planner = RowPlanner(services.store, services.run_id, name, key, services.attempt)
        self.pages = PageLeases(
            services.store,
            services.run_id,
            name,
            services.owner,
            services.attempt,
            limits,
            services.wall_clock,
            services.emit,
            services.cleanup,
        )
        self.admission = RowAdmission(services.row_limiter, services.row_budget)
        self.total: int | None = None
        self.writer = TerminalRowWriter(
            services.store,
            services.run_id,
            name,
            buffer_bytes=limits.writer_buffer_bytes,
            max_flush=limits.writer_max_flush,
            cleanup=services.cleanup,
            on_commit=self._on_commit,
            trace=services.trace,
        )
        self.progress_dirty = False

    # -- the whole map ------------------------------------------------------
    async def run(self) -> MapResult:
        trace = self.trace
        if trace is None:
            return await self._run()
        status = "failed"
        try:
            result = await self._run()
            status = "completed"
            return result
        finally:
            r = self.result
            trace.add(
                MapFinished,
                self.name,
                status,
                r.completed_count,
                r.failed_count,
                r.skipped_count,
                r.duplicate_count,
                self.writer.unconfirmed,
            )

    async def _run(self) -> MapResult:
        if self.name in self.services.datasets:
            # An earlier map of this attempt wrote rows to this sheet that
            # this one will skip: rows() must read them from the sheet.
            self.result.forget_retained()
        self.services.datasets.add(self.name)
        opened = await open_source(self.name, self.source)
        self.total = opened.total
        emit = self.services.emit
        emit("map.started", {"map": self.name, "total": self.total})
        if self.trace is not None:
            self.trace.add(MapStarted, self.services.run_id, self.name, self.total)
        error: Exception | None = None
        try:
            async with open_nursery() as nursery:
                await start(nursery, self.writer.run)
                start_soon(nursery, self._report_progress)
                try:
                    await self._run_pages(opened.rows, opened.reread)
                except Exception as exc:
                    error = exc
                finally:
                    self.writer.close_input()
                if not isinstance(error, (StoreError, PersistenceLatchTripped)):
                    await self.writer.finished.wait()
                # Else the store failed: waiting for each write it still owes could
                # take a store deadline apiece; cancelling leaves the writer one
                # bounded try (its final flush) at what it admitted.
                nursery.cancel_scope.cancel()
        finally:
            # The last counts, also of a map that failed, and of one whose
            # writer failed (its error leaves the nursery before this line).
            self._progress()
        if error is not None:
            raise error
        self.services.receipts.raise_if_latched(f"dataset {self.name!r}")
        emit("map.finished", self._counts())
        return self.result

    async def _run_pages(
        self, rows: Iterator[Any], reread: Callable[[int, int], list[Any]] | None
    ) -> None:
        """Lease and run every page; pages held by a live peer are run last, if at all.

        A page is read, leased and started only once the page before it has
        started all of its rows, so pages overlap in their tails and never
        compete for row slots. How many pages are open at once is bounded by
        row admission alone (an open page has a row in flight, or is the one
        starting its rows), not by a fixed window: a page waiting for one
        straggler holds that row's slot and nothing more, while later pages
        use the others.
        """
        position = 0
        previous = trio.Event()
        previous.set()
        held: list[tuple[int, list[Any] | None, int]] = []
        async with open_nursery() as pages:
            while True:
                # Wait before reading: the input in memory stays about one page.
                await previous.wait()
                chunk = list(itertools.islice(rows, self.page_size))
                if not chunk:
                    break
                offset = position
                position += len(chunk)
                started = await self._try_page(pages, chunk, offset)
                if isinstance(started, trio.Event):
                    previous = started
                elif started is None:
                    # Keep the rows only if the source cannot be read again.
                    held.append((offset, None if reread else chunk, len(chunk)))
            for offset, kept, length in held:
                await previous.wait()
                claim = await self.pages.wait_for(offset)
                chunk = kept if kept is not None else reread(offset, length)  # type: ignore[misc]
                started = await self._try_page(pages, chunk, offset, claim)
                if isinstance(started, trio.Event):
                    previous = started

    async def _try_page(
        self,
        pages: trio.Nursery,
        chunk: list[Any],
        offset: int,
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
            claim = await self.pages.claim(offset)
        if claim == "held":
            return None
        plan = await self._plan(chunk, offset)
        if claim == "done":
            if not plan.rows:
                return _DONE
            claim = await self.pages.claim(offset, reopen=True)
            if not isinstance(claim, PageLease):
                self.planner.give_back(plan)
                return None if claim == "held" else _DONE
        assert isinstance(claim, PageLease)
        spawned = trio.Event()
        start_soon(pages, self._run_page, plan, claim, spawned)
        await trio.lowlevel.checkpoint()
        return spawned

    async def _plan(self, chunk: list[Any], offset: int) -> Plan:
        plan = await self.planner.plan(chunk, offset)
        result = self.result
        result.skipped_count += plan.skipped
        result.duplicate_count += plan.duplicates
        if plan.foreign:
            result.forget_retained()
        return plan

    # -- one page -----------------------------------------------------------
    async def _run_page(self, plan: Plan, lease: PageLease, spawned: trio.Event) -> None:
        offset = lease.offset
        services = self.services
        page: Page | None = None
        try:
            observer = MapStallObserver(
                map_name=self.name,
                page_offset=offset,
                interval=self.limits.stall_log_interval,
                writer_diagnostics=self.writer.diagnostics,
                emit=self._stalled,
                store_calls=services.store_calls,
                loop_watch=services.loop_watch,
            )
            admission = self.admission
            trace = self.trace
            planned = plan.rows
            if trace is not None:
                trace.add(PageStarted, self.name, offset, len(planned))
            with self.writer.sender() as sender:
                page = Page(offset, plan, observer, sender)
                async with open_nursery() as nursery:
                    await start(nursery, observer.run)
                    start_soon(nursery, self.pages.keep, lease, page, nursery.cancel_scope)
                    async with open_nursery() as rows:
                        # Consume the plan as rows start: a finished row's data must
                        # not stay alive until its whole page ends.
                        planned.reverse()
                        while planned:
                            position, key, data = planned.pop()
                            token = object()
                            reserved = admission.try_admit(token)
                            if not reserved:  # no slot free (None), or no bytes (0)
                                reserved = await admission.admit(token, has_slot=reserved == 0)
                            page.outstanding += 1
                            if trace is not None:
                                trace.add(RowAdmitted, self.name, offset, key)
                            start_soon(
                                rows, self._run_row, page, position, key, data, token, reserved
                            )
                        page.all_started()
                        spawned.set()
                    await page.settled.wait()
                    nursery.cancel_scope.cancel()
            if page.state is PageState.LOST:
                if self.trace is not None:
                    self.trace.add(PageFinished, self.name, offset, "lost")
                return
            await self.pages.finish(lease, page)
            if self.trace is not None:
                self.trace.add(PageFinished, self.name, offset, "done")
        except BaseException:
            if self.trace is not None:
                self.trace.add(PageFinished, self.name, offset, "failed")
            spawned.set()  # the pages after it must not wait for it
            if page is None or page.state is not PageState.RELEASED:
                await self.pages.release(lease)
            raise

    async def _run_row(
        self,
        page: Page,
        position: int,
        key: str,
        data: dict[str, Any],
        token: object,
        reserved: int,
    ) -> None:
        try:
            row, failure = await self._resolve(page, position, key, data)
            if self.trace is not None:
                self.trace.add(RowTerminal, self.name, key, row.status)
            terminal_token = page.observer.terminal_queued(key)
            size = len(row.data_json) + len(key) + 64
            self.admission.observe(size)
            # Keep the row itself only while someone may still want it in memory.
            keep = (
                data
                if row.status == "completed" and len(self.result.preview) < PREVIEW_ROWS
                else None
            )
            # The row now lives in row.data_json: a row waiting for admission
            # must not hold its parsed values as well.
            del data
            await page.sender.send(TerminalRow(row, size, page, terminal_token, keep))
            page.observer.terminal_admitted(terminal_token)
            if self.trace is not None:
                self.trace.add(RowWriterAdmitted, self.name, key)
        except BaseException:
            page.row_settled()
            raise
        finally:
            self.admission.release(token, reserved)
        if failure is not None and self.on_row_error == "fail":
            failure.add_note(f"trioplay: dataset {self.name!r}, row {key!r} failed")
            raise failure

    async def _resolve(
        self, page: Page, position: int, key: str, data: dict[str, Any]
    ) -> tuple[SheetRow, Exception | None]:
        if page.plan.rejected:  # rows whose key field is missing or empty
            error = page.plan.rejection(key)
            if error is not None:  # the row fails, its columns never run
                return self._failed_row(position, key, data, error), error
        observer = page.observer
        observer_token = observer.resolver_started(key)
        if self.trace is not None:
            self.trace.add(RowResolverStarted, self.name, key)
        rc = RowContext(self.services, self.name, key)
        # The row's phase, for the governor and fetch that run its calls in this task.
        row_phase = enter_row(observer.row_phase(observer_token))
        column = ""
        try:
            for column, resolver in self.columns:
                value = resolver(data, rc)
                if inspect.isawaitable(value):
                    value = await value
                data[column] = value
            try:
                text = dumps(data)
            except (TypeError, ValueError):
                raise _not_serialisable(data, self.columns) from None
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
            leave_row(row_phase)
            observer.resolver_finished(observer_token)
        return SheetRow(key, position, "completed", text, None, self.services.attempt), None

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
        return SheetRow(
            key, position, "failed", dumps(kept), format_error(exc), self.services.attempt
        )

    # -- commits ------------------------------------------------------------
    def _on_commit(self, batch: list[TerminalRow]) -> None:
        result = self.result
        done = self.planner.done
        trace = self.trace
        for item in batch:
            row = item.row
            done(row.key)
            if trace is not None:
                trace.add(RowCommitted, self.name, row.key, row.status)
            page: Page = item.page
            if row.status == "completed":
                result.count_committed(row.position, row.data_json, item.size, item.data)
                page.row_committed(item.token, True)
            else:
                result.failed_count += 1
                page.row_committed(item.token, False)
        self.progress_dirty = True

    def _stalled(self, report: dict[str, Any]) -> None:
        """A page's stall line: the ``map.stall`` event, and its typed record."""
        self.services.emit("map.stall", report)
        if self.trace is not None:
            phase = str(report.get("oldest_phase"))
            cause = stall_cause(report)
            self.trace.add(MapStall, self.name, report["page_offset"], phase, cause, dict(report))

    def _counts(self) -> dict[str, Any]:
        r = self.result
        return {
            "map": self.name,
            "completed": r.completed_count,
            "failed": r.failed_count,
            "skipped": r.skipped_count,
            "duplicates": r.duplicate_count,
            "unconfirmed": self.writer.unconfirmed,
            "total": self.total,
        }

    async def _report_progress(self) -> None:
        """Emit ``map.progress`` every ``progress_flush_interval`` while counts change."""
        while True:
            await trio.sleep(self.limits.progress_flush_interval)
            if self.progress_dirty:
                self.progress_dirty = False
                self._progress()

    def _progress(self) -> None:
        counts = self._counts()
        self.services.emit("map.progress", counts)
        if self.trace is not None:
            self.trace.add(MapProgress, *counts.values())


def _not_serialisable(data: dict[str, Any], columns: Columns) -> RowOutputNotJsonSerializable:
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
