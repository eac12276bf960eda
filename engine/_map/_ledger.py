"""The commit ledger: a map's counts, changed in this one place.

What a map reports (completed, failed, skipped, duplicates, unconfirmed) is
counted here and nowhere else: rows skipped as the pages are planned
(:meth:`CommitLedger.planned`), rows committed as the terminal-row writer
confirms each batch (:meth:`CommitLedger.committed`, the writer's
``on_commit``), rows the store refused to write (:meth:`CommitLedger.refused`,
the writer's ``on_refused``), rows of a write whose outcome is unknown
(:meth:`CommitLedger.unconfirmed_rows`, the writer's ``on_unconfirmed``). A
row counts as completed or failed only once its batch has committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._report import MapCounts

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._records import SheetWrite
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

    __slots__ = ("_done", "_report", "result", "unconfirmed")

    def __init__(self, result: MapResult, done: Callable[[str], None], report: MapReport) -> None:
        self.result = result
        self._done = done
        self._report = report
        self.unconfirmed = 0  # rows of a failed write that may have committed

    def counts(self) -> MapCounts:
        r = self.result
        return MapCounts(
            r.completed_count, r.failed_count, r.skipped_count, r.duplicate_count, self.unconfirmed
        )

    def forget_retained(self) -> None:
        """The sheet holds rows this map will skip: ``rows()`` must read them from it."""
        self.result.forget_retained()

    def planned(self, plan: Plan) -> None:
        """A page was planned: count the rows it skips."""
        result = self.result
        result.skipped_count += plan.skipped
        result.duplicate_count += plan.duplicates
        if plan.foreign:
            result.forget_retained()

    def committed(self, batch: list[TerminalRow]) -> None:
        """A batch of terminal rows committed (the writer's ``on_commit``)."""
        result = self.result
        done = self._done
        for item in batch:
            row = item.row
            done(row.key)
            if row.status == "completed":
                result.completed_count += 1
                result.keep(row.position, row.data_json, item.size, item.data)
                item.page.row_committed(item.token, True)
            else:
                result.failed_count += 1
                item.page.row_committed(item.token, False)
        self._report.changed()

    def refused(self, items: list[tuple[TerminalRow, SheetWrite]]) -> None:
        """Rows the store did not write (the writer's ``on_refused``).

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
            elif page.lose():
                self._report.page_lost(page.offset)
            page.row_committed(item.token, True)
        self._report.changed()

    def unconfirmed_rows(self, count: int) -> None:
        """A write's outcome is unknown: ``count`` rows may or may not have committed."""
        self.unconfirmed = count
