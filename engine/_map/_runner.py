"""Running a map: pages, their rows (each resolved by `_resolve`), the hand-off to the writer.

``run_map`` reads source rows lazily in pages of ``page_size``. Each page
runs in its own nursery with its stall observer and its clone of the
terminal-row writer's send channel; the next page starts once a page has
started all its rows, so one page's stragglers and last commits never stall
the rows after them. Rows are admitted by slot and by bytes
(:class:`RowAdmission`: the runtime's row limiter and byte budget, shared by
every map of the runtime); a row's admission is given back when the
terminal-row writer admits it. Rows are counted as completed or failed only
when their batch has committed (:class:`CommitLedger`), and every event the
map emits goes through its :class:`MapReport`.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._errors import (
    MapSuspended,
    PlayAborted,
    RowSuspended,
)
from .._groups import open_nursery, start, start_soon
from .._records import PageLease
from .._sources import open_source
from ._admission import RowAdmission
from ._ledger import CommitLedger
from ._pages import Page, PageLeases, PageState
from ._plan import Plan, RowPlanner
from ._report import MapReport
from ._resolve import RowResolver
from ._result import PREVIEW_ROWS, MapResult
from ._stall import MapStallObserver
from ._writer import TerminalRow, TerminalRowWriter, open_terminal_writer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from .._run import RunServices
    from ._types import Columns, OnRowError, OnWaiting

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
    on_waiting: OnWaiting = "stop",
) -> MapResult:
    """Run the rows of ``source`` not yet completed through ``columns``.

    The map's life: its source opened, its writer and progress task running
    while :class:`_MapRun` runs the pages, its counts reported at the end
    (also of a map that failed), and checked: every row read is accounted
    for. A map with rows waiting on events stops the play once the writer
    has committed the others (:class:`MapSuspended`), unless ``on_waiting``
    is ``"return"``.
    """
    services.receipts.raise_if_ended()  # a dataset of a context kept past its run
    limits = services.run.limits
    report = MapReport(services.run.run_id, name, services.run.facts, services.run.trace)
    planner = RowPlanner(services.run.store, services.run.run_id, name, key, services.run.attempt)
    result = MapResult(
        dataset=name,
        run_id=services.run.run_id,
        sheet=services.run.store,
        retained_budget=limits.retained_rows_budget_bytes,
    )
    ledger = CommitLedger(result, planner.done, report)
    writer = TerminalRowWriter(
        services.run.store,
        services.run.run_id,
        name,
        limits,
        cleanup=services.run.cleanup,
        commits=ledger,
        report=report,
    )
    status = "failed"
    try:
        if name in services.datasets:
            # An earlier map of this attempt wrote rows to this sheet that
            # this one will skip: rows() must read them from the sheet.
            ledger.forget_retained()
        services.datasets.add(name)
        opened = await open_source(name, source)
        computed = [column for column, _ in columns]
        report.started(opened.total, list(dict.fromkeys([*opened.fields, *computed])))
        try:
            async with open_nursery() as nursery:
                async with open_terminal_writer(writer):
                    interval = limits.progress_flush_interval
                    start_soon(nursery, report.keep_reporting, interval, ledger.counts)
                    pages = _MapRun(
                        services,
                        name,
                        columns,
                        on_row_error,
                        page_size,
                        planner=planner,
                        ledger=ledger,
                        report=report,
                        writer=writer,
                    )
                    read = await pages.run_pages(opened.rows, opened.reread)
                nursery.cancel_scope.cancel()
        finally:
            # The last counts, also of a map that failed, and of one whose
            # writer failed.
            report.progress(ledger.counts())
        services.receipts.raise_if_latched(f"dataset {name!r}")
        ledger.check(read)
        if result.waiting:
            status = "waiting"
            if on_waiting == "stop":
                waits = tuple(services.waits.suspended[row.wait_key] for row in result.waiting)
                raise MapSuspended(name, waits)
        else:
            status = "completed"
        return result
    finally:
        report.ended(status, ledger.counts())


@attrs.define(eq=False)
class _MapRun:
    """The pages and rows of one map: schedule pages, run a page, resolve a row, hand it on."""

    services: RunServices
    name: str
    columns: Columns
    on_row_error: OnRowError
    page_size: int
    planner: RowPlanner = attrs.field(kw_only=True)
    ledger: CommitLedger = attrs.field(kw_only=True)
    report: MapReport = attrs.field(kw_only=True)
    writer: TerminalRowWriter = attrs.field(kw_only=True)
    result: MapResult = attrs.field(init=False)  # read for the preview, never counted here
    admission: RowAdmission = attrs.field(init=False)
    pages: PageLeases = attrs.field(init=False)
    rows: RowResolver = attrs.field(init=False)
    lost: list[tuple[int, int]] = attrs.field(init=False, factory=list)
    """(offset, length) of the pages lost to a peer."""
    running: int = attrs.field(init=False, default=0)
    """Rows started and not yet handed to the writer."""
    open_pages: int = attrs.field(init=False, default=0)
    """Pages of this map running here."""
    read: bool = attrs.field(init=False, default=False)
    """The source is read and every page of it started: once no row is running,
    no row reaches the writer until a held or lost page is run here."""

    def __attrs_post_init__(self) -> None:
        services = self.services
        self.result = self.ledger.result
        self.admission = RowAdmission(services.row_limiter, services.row_budget)
        self.pages = PageLeases.of_map(services, self.name)
        self.rows = RowResolver(
            services, self.name, self.columns, self.admission, self.pages, self.report
        )

    async def run_pages(
        self, rows: Iterator[Any], reread: Callable[[int, int], list[Any]] | None
    ) -> int:
        """Lease and run every page; pages held by a live peer are run last, if at all.

        A page is read, leased and started only once the page before it has
        started all of its rows, so pages overlap in their tails and never
        compete for row slots. How many pages are open at once is bounded by
        row admission alone (an open page has a row in flight, or is the one
        starting its rows), not by a fixed window: a page waiting for one
        straggler holds that row's slot and nothing more, while later pages
        use the others. A page is claimed only once a row slot is free, so a
        process never holds a page none of whose rows it can start: peers
        sharing the run take pages by what each can run.
        """
        position = 0
        previous = trio.Event()
        previous.set()
        held: list[tuple[int, list[Any] | None, int]] = []
        async with open_nursery() as pages:
            while True:
                # Wait before reading: the input in memory stays about one page.
                await previous.wait()
                await self.admission.wait_for_slot()  # claim only what can start
                chunk = list(itertools.islice(rows, self.page_size))
                if not chunk:
                    self.read = True
                    if not self.running:
                        self.writer.flush_now()
                    if not self.open_pages:
                        self.pages.idle()
                    break
                offset = position
                position += len(chunk)
                started = await self._try_page(pages, chunk, offset)
                if isinstance(started, trio.Event):
                    previous = started
                elif started is None:
                    # Keep the rows only if the source cannot be read again.
                    held.append((offset, None if reread else chunk, len(chunk)))
            await self._revisit(pages, held, previous, reread, again=False)
        # Pages lost to a peer are waited for like held ones, once every page
        # of ours has ended: the map returns when every page is done. Their
        # rows are gone from memory, so only a source that reads again can.
        while self.lost and reread is not None:
            held = [(offset, None, length) for offset, length in self.lost]
            self.lost.clear()
            async with open_nursery() as pages:
                await self._revisit(pages, held, previous, reread, again=True)
        return position  # the rows read

    async def _revisit(
        self,
        pages: trio.Nursery,
        held: list[tuple[int, list[Any] | None, int]],
        previous: trio.Event,
        reread: Callable[[int, int], list[Any]] | None,
        *,
        again: bool,
    ) -> None:
        """Wait for each page a peer held until it is done or ours, and run it if ours.

        ``again``: the pages were run here before and lost (see :meth:`RowPlanner.plan`).
        """
        for offset, kept, length in held:
            await previous.wait()
            claim = await self.pages.wait_for(offset)
            chunk = kept if kept is not None else reread(offset, length)  # type: ignore[misc]
            started = await self._try_page(pages, chunk, offset, claim, again=again)
            if isinstance(started, trio.Event):
                previous = started

    async def _try_page(
        self,
        pages: trio.Nursery,
        chunk: list[Any],
        offset: int,
        claim: PageLease | Literal["held", "done"] | None = None,
        *,
        again: bool = False,
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
        # A page lost here before: its rows left to the new owner then, and
        # not committed here since, are its new owner's if the sheet has them.
        left = self.ledger.left_to_peer(offset) if again else frozenset()
        plan = await self.planner.plan(chunk, offset, again=again, left=left)
        self.ledger.planned(plan, offset, len(chunk))
        if claim == "done":
            if not plan.rows:
                return _DONE
            claim = await self.pages.claim(offset, reopen=True)
            if not isinstance(claim, PageLease):
                self.planner.give_back(plan)
                self.ledger.unplanned(plan, offset, len(chunk))
                if claim == "held":
                    return None  # planned again when its holder lets it go
                self.ledger.handed_over(offset, len(chunk))  # another process ran it
                return _DONE
        assert isinstance(claim, PageLease)
        spawned = trio.Event()
        self.open_pages += 1
        start_soon(pages, self._run_page, plan, claim, spawned, len(chunk))
        await trio.lowlevel.checkpoint()
        return spawned

    # -- one page -----------------------------------------------------------
    async def _run_page(
        self, plan: Plan, lease: PageLease, spawned: trio.Event, length: int
    ) -> None:
        """Run one leased page; ``spawned`` is set once its rows have started, or it ended.

        However the page ends (done, lost, released, failed), ``spawned`` is
        set: the page loop waits for it before reading the next page.
        """
        offset = lease.offset
        report = self.report
        page: Page | None = None
        planned = [(position, key) for position, key, _ in plan.rows]
        try:
            observer = MapStallObserver(
                map_name=self.name,
                page_offset=offset,
                interval=self.services.run.limits.stall_log_interval,
                writer_diagnostics=self.writer.diagnostics,
                emit=report.stalled,
                store_calls=self.services.run.store_calls,
                loop_watch=self.services.run.store_calls.loop_watch,
            )
            report.page_started(offset, len(plan.rows))
            with self.writer.sender() as sender:
                page = Page(offset, plan, observer, lease)
                async with open_nursery() as nursery:
                    page.scope = nursery.cancel_scope
                    await start(nursery, observer.run)
                    start_soon(nursery, self.pages.keep, lease, page)
                    async with open_nursery() as rows:
                        await self._start_rows(rows, page, sender.send)
                        page.all_started()
                        spawned.set()
                    await page.settled.wait()
                    nursery.cancel_scope.cancel()
            if page.state is not PageState.LOST and not await self.pages.finish(lease, page):
                self.pages.lost(page)  # taken over after its last row committed
            if page.state is PageState.LOST:
                # Its unfinished rows are the new owner's; their keys are no
                # longer in flight here, and the page is waited for at the end.
                self.planner.give_back_keys(key for _, key in planned)
                self.lost.append((offset, length))
                report.page_lost(offset, self.ledger.page_lost(offset, plan, planned))
                report.page_finished(offset, "lost")
                return
            report.page_finished(offset, "done")
        except BaseException:
            report.page_finished(offset, "failed")
            if page is None or page.state is not PageState.RELEASED:
                await self.pages.release(lease)
            raise
        finally:
            spawned.set()  # the pages after it must never wait for it
            self.open_pages -= 1
            if self.read and not self.open_pages:
                self.pages.idle()  # only peers' pages are left: see them done soon

    async def _start_rows(
        self, rows: trio.Nursery, page: Page, send: Callable[[TerminalRow], Awaitable[None]]
    ) -> None:
        """Admit and start each row of the page's plan, in order."""
        admission = self.admission
        report = self.report
        traced = report.trace is not None
        offset = page.offset
        # Consume the plan as rows start: a finished row's data must not stay
        # alive until its whole page ends.
        planned = page.plan.rows
        planned.reverse()
        while planned:
            position, key, data = planned.pop()
            token = object()
            reserved = admission.try_admit(token)
            if not reserved:  # no slot free (None), or no bytes (0)
                reserved = await admission.admit(token, has_slot=reserved == 0)
            page.outstanding += 1
            self.running += 1
            if traced:
                report.row_admitted(offset, key)
            start_soon(rows, self._run_row, page, send, position, key, data, token, reserved)

    async def _run_row(
        self,
        page: Page,
        send: Callable[[TerminalRow], Awaitable[None]],
        position: int,
        key: str,
        data: dict[str, Any],
        token: object,
        reserved: int,
    ) -> None:
        report, admission = self.report, self.admission
        try:
            row, failure = await self.rows.resolve(page, position, key, data)
            if row is None:  # suspended on an event wait: counted, never written
                assert isinstance(failure, RowSuspended)
                self._suspended(page, position, key, failure)
                return
            if report.trace is not None:
                report.row_terminal(key, row.status)
            terminal_token = page.observer.terminal_queued(key)
            size = len(row.data_json) + len(key) + 64
            admission.observe(size)
            # Keep the row itself only while someone may still want it in memory.
            keep = (
                data
                if row.status == "completed" and len(self.result.preview) < PREVIEW_ROWS
                else None
            )
            # The row now lives in row.data_json: a row waiting for admission
            # must not hold its parsed values as well.
            del data
            await send(TerminalRow(row, size, page, terminal_token, keep))
            page.observer.terminal_admitted(terminal_token)
            if report.trace is not None:
                report.row_writer_admitted(key)
        except BaseException:
            page.row_settled()
            raise
        finally:
            admission.release_slot(token)
            admission.release_bytes(reserved)
            self.running -= 1
            if self.read and not self.running:
                # The last rows: commit them now, not writer_max_flush later
                # (each process of a shared run would wait so at its end).
                self.writer.flush_now()
        if isinstance(failure, PlayAborted):
            raise failure  # its row is recorded failed; the run fails whatever on_row_error says
        if failure is not None and self.on_row_error == "fail":
            failure.add_note(f"trioplay: dataset {self.name!r}, row {key!r} failed")
            raise failure

    def _suspended(self, page: Page, position: int, key: str, suspended: RowSuspended) -> None:
        """A row suspended on an event wait: counted as waiting, its page told."""
        wait = suspended.wait
        self.ledger.waiting(position, key, wait)
        if self.report.trace is not None:
            self.report.row_waiting(key, wait.wait_key, wait.name, wait.deadline)
        page.row_settled()
