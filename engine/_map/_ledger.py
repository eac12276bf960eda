"""The commit ledger: a map's counts, changed in this one place.

What a map reports (completed, failed, skipped, duplicates, waiting,
unconfirmed) is counted here and nowhere else: rows skipped as the pages are
planned (:meth:`CommitLedger.planned`), rows committed as the terminal-row
writer confirms each batch (:meth:`CommitLedger.committed`), rows the store
refused to write (:meth:`CommitLedger.refused`), rows suspended on an event
wait (:meth:`CommitLedger.waiting`), rows of a write whose outcome is unknown
(:meth:`CommitLedger.unconfirmed_rows`); the ledger is the writer's
``commits``. A
row counts as completed or failed only once its batch has committed.

The ledger also knows *which* input positions each count covers (one byte
per row read), so that at the end of a map it can check that every row
read is accounted for (:meth:`CommitLedger.check`): completed + failed +
waiting + skipped (duplicates included) + rows left to another process
(pages given back or lost) equals the rows read, or the map fails naming
up to ten positions that went missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import MapAccountingError
from ._report import MapCounts
from ._result import WaitingRow

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._records import SheetWrite, WaitRecord
    from ._plan import Plan
    from ._report import MapReport
    from ._result import MapResult
    from ._writer import TerminalRow


class CommitLedger:
    """The counts of one map, kept in its :class:`MapResult`; see the module docstring.

    Each commit is also handed on, row by row, to those who wait for it:
    the planner (``done``: the key is no longer in flight), the row's page
    (:meth:`Page.row_committed`) and the report (the next progress tick).
    """

    __slots__ = (
        "_accounted",
        "_done",
        "_handed_pages",
        "_lost",
        "_pages",
        "_report",
        "handed_off",
        "result",
        "unconfirmed",
    )

    def __init__(self, result: MapResult, done: Callable[[str], None], report: MapReport) -> None:
        self.result = result
        self._done = done
        self._report = report
        self.unconfirmed = 0  # rows of a failed write that may have committed
        self.handed_off = 0  # rows left to another process (pages given back or lost)
        # Per input position: 1 once a count covers the row (see check()).
        self._accounted = bytearray()
        self._pages: dict[int, int] = {}  # page offset -> its rows
        # Pages lost to another process: their plans, and the positions of the
        # rows they left to it (see left_to_peer()).
        self._lost: dict[int, tuple[Plan, list[int]]] = {}
        self._handed_pages: set[int] = set()  # the pages of the rows in handed_off

    def counts(self) -> MapCounts:
        """The counts so far; rows of a lost page count as handed over until it is planned again."""
        r = self.result
        handed, pages = self.handed_off, set(self._handed_pages)
        for offset in self._lost:
            if left := len(self.left_to_peer(offset)):
                handed += left
                pages.add(offset)
        return MapCounts(
            r.completed_count,
            r.failed_count,
            r.skipped_count,
            r.duplicate_count,
            self.unconfirmed,
            len(r.waiting),
            handed,
            len(pages),
        )

    def forget_retained(self) -> None:
        """The sheet holds rows this map will skip: ``rows()`` must read them from it."""
        self.result.forget_retained()

    def planned(self, plan: Plan, offset: int, length: int) -> None:
        """A page of ``length`` rows from ``offset`` was planned: count the rows it skips.

        A page lost to another process and planned again (``RowPlanner.plan``
        with ``again``) counts its skipped rows anew: its first plan's are
        taken back.
        """
        result = self.result
        lost = self._lost.pop(offset, None)
        if lost is not None:
            first = lost[0]
            result.skipped_count -= first.skipped
            result.duplicate_count -= first.duplicates
        result.skipped_count += plan.skipped
        result.duplicate_count += plan.duplicates
        if plan.handed_over:  # rows it left to another process, which ran them
            self.handed_off += plan.handed_over
            self._handed_pages.add(offset)
        if plan.foreign:
            result.forget_retained()
        accounted = self._accounted
        end = offset + length
        if len(accounted) < end:
            accounted.extend(bytes(end - len(accounted)))
        accounted[offset:end] = b"\x01" * length  # skipped, unless it runs:
        for position, _, _ in plan.rows:
            accounted[position] = 0
        self._pages[offset] = length

    def unplanned(self, plan: Plan, offset: int, length: int) -> None:
        """A planned page was given back before it ran: undo :meth:`planned`."""
        result = self.result
        result.skipped_count -= plan.skipped
        result.duplicate_count -= plan.duplicates
        self.handed_off -= plan.handed_over
        self._accounted[offset : offset + length] = bytes(length)

    def handed_over(self, offset: int, length: int) -> None:
        """A page's rows were run by another process (it was done when claimed again)."""
        accounted = self._accounted
        end = offset + length
        if len(accounted) < end:
            accounted.extend(bytes(end - len(accounted)))
        handed = accounted.count(0, offset, end)
        if handed:
            self.handed_off += handed
            self._handed_pages.add(offset)
        accounted[offset:end] = b"\x01" * length

    def page_lost(self, offset: int, plan: Plan, rows: list[tuple[int, str]]) -> list[str]:
        """A page passed to another process: the keys of its ``rows`` (position, key)
        not committed here, which are now that process's (unless the page is planned
        again: :meth:`planned`)."""
        accounted = self._accounted
        left = [(position, key) for position, key in rows if not accounted[position]]
        self._lost[offset] = (plan, [position for position, _ in left])
        self._report.changed()
        return [key for _, key in left]

    def left_to_peer(self, offset: int) -> frozenset[int]:
        """The positions of the rows a lost page left to another process, not committed here."""
        lost = self._lost.get(offset)
        if lost is None:
            return frozenset()
        accounted = self._accounted
        return frozenset(position for position in lost[1] if not accounted[position])

    def waiting(self, position: int, key: str, wait: WaitRecord) -> None:
        """A row suspended on an event wait: counted, never written."""
        self.result.waiting.append(
            WaitingRow(
                key, position, wait.name, wait.key_json, wait.deadline, wait.wait_key, wait.token
            )
        )
        self._accounted[position] = 1
        self._report.changed()

    def check(self, read: int) -> None:
        """Every row read is accounted for, once; else :class:`MapAccountingError`.

        Called when the writer has committed everything, on a map that did
        not fail. Rows of lost pages that did not commit here are counted as
        left to the process that took the page over.
        """
        accounted = self._accounted
        for offset in list(self._lost):
            del self._lost[offset]
            self.handed_over(offset, self._pages.get(offset, 0))
        if len(accounted) < read:
            accounted.extend(bytes(read - len(accounted)))
        r = self.result
        counted = (
            r.completed_count + r.failed_count + len(r.waiting) + r.skipped_count + self.handed_off
        )
        missing: list[int] = []
        position = accounted.find(0, 0, read)
        while position != -1 and len(missing) < 10:
            missing.append(position)
            position = accounted.find(0, position + 1, read)
        if counted != read or missing:
            raise MapAccountingError(self._report.name, read, counted, missing)

    def committed(self, batch: list[TerminalRow]) -> None:
        """A batch of terminal rows committed (the writer tells its ``commits``)."""
        result = self.result
        done = self._done
        accounted = self._accounted
        for item in batch:
            row = item.row
            done(row.key)
            accounted[row.position] = 1
            if row.status == "completed":
                result.completed_count += 1
                result.keep(row.position, row.data_json, item.size, item.data)
                item.page.row_committed(item.token, True)
            else:
                result.failed_count += 1
                item.page.row_committed(item.token, False)
        self._report.changed()

    def refused(self, items: list[tuple[TerminalRow, SheetWrite]]) -> None:
        """Rows the store did not write (the writer tells its ``commits``).

        ``kept``: the row failed here, but the key is completed in the sheet
        (a peer ran it): counted as skipped. ``fenced``: the row's page
        passed to another process, which runs it: not counted here, and the
        page is given up (:meth:`Page.lose`) if it still runs.
        """
        result = self.result
        done = self._done
        for item, answer in items:
            done(item.row.key)
            page = item.page
            if answer == "kept":
                result.skipped_count += 1
            else:
                page.lose()  # its runner says so once it has ended
            page.row_committed(item.token, True)
        self._report.changed()

    def unconfirmed_rows(self, count: int) -> None:
        """A write's outcome is unknown: ``count`` rows may or may not have committed."""
        self.unconfirmed = count
