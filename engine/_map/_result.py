"""What a dataset run produced: :class:`MapResult` and its cache of completed rows."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._json import loads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._store import SheetStore

log = logging.getLogger("trioplay")

PREVIEW_ROWS = 5
_READ_PAGE = 1000


@attrs.frozen
class WaitingRow:
    """A row suspended on an event wait: its key, and the wait it is suspended on.

    ``name`` and ``key_json`` are what a sender names (``trioplay
    send-event RUN NAME KEY``); ``token`` addresses the same wait alone;
    ``deadline`` is the wall-clock instant (epoch seconds) after which the
    row gets its default or :class:`~trioplay.EventWaitTimeout`.
    """

    row_key: str
    position: int
    name: str
    key_json: str
    deadline: float
    wait_key: str
    token: str


class _Retained:
    """The completed rows kept in memory while they fit the budget, as their JSON text.

    Strings cost their size, and the garbage collector never has to walk them.
    Once the budget is passed, or the sheet holds rows this attempt never saw,
    the cache is dropped for good and :meth:`MapResult.rows` reads the sheet.
    """

    __slots__ = ("budget", "rows", "size")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self.rows: list[tuple[int, str]] | None = []

    def add(self, position: int, text: str, size: int) -> bool:
        """Keep a committed row; False (and the cache dropped) once the budget is passed."""
        if self.rows is None:
            return True
        self.size += size
        if self.size > self.budget:
            self.drop()
            return False
        self.rows.append((position, text))
        return True

    def drop(self) -> None:
        self.rows = None


class MapResult:
    """What a dataset run produced.

    Counts cover this attempt: ``completed_count`` and ``failed_count`` rows
    committed now, ``skipped_count`` rows not run (their key was completed by
    an earlier attempt, or repeated in the input; ``duplicate_count`` is the
    latter part), ``waiting`` the rows suspended on an event wait (not
    written: a resume runs them again; see :class:`WaitingRow`).
    ``preview`` holds the first few completed rows. While the completed rows
    fit ``retained_rows_budget_bytes`` they are also kept in memory
    (``retained_rows_complete``); :meth:`rows` streams from the durable
    sheet otherwise, so a large map never needs its result in memory.
    """

    def __init__(
        self, *, dataset: str, run_id: str, sheet: SheetStore, retained_budget: int
    ) -> None:
        self.dataset = dataset
        self.run_id = run_id
        self.completed_count = 0
        self.failed_count = 0
        self.skipped_count = 0
        self.duplicate_count = 0
        self.waiting: list[WaitingRow] = []
        self.preview: list[dict[str, Any]] = []
        self._retained = _Retained(retained_budget)
        self._sheet = sheet

    @property
    def waiting_count(self) -> int:
        """How many rows are suspended on an event wait (:attr:`waiting` lists them)."""
        return len(self.waiting)

    @property
    def retained_rows_complete(self) -> bool:
        """Whether every completed row is also held in memory (see :meth:`rows`)."""
        return self._retained.rows is not None

    def to_dict(self) -> dict[str, Any]:
        """The counts and preview, as JSON (how a play returning this is stored)."""
        return {
            "dataset": self.dataset,
            "completed_count": self.completed_count,
            "failed_count": self.failed_count,
            "skipped_count": self.skipped_count,
            "duplicate_count": self.duplicate_count,
            "waiting_count": len(self.waiting),
            "preview": self.preview,
        }

    def __repr__(self) -> str:
        waiting = f", waiting={len(self.waiting)}" if self.waiting else ""
        return (
            f"MapResult(dataset={self.dataset!r}, completed={self.completed_count}, "
            f"failed={self.failed_count}, skipped={self.skipped_count}{waiting})"
        )

    async def rows(
        self, *, status: Literal["completed", "failed"] = "completed"
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the sheet's rows in input order (completed ones by default).

        Failed rows carry their error under ``"_error"``.
        """
        retained = self._retained.rows
        if status == "completed" and retained is not None:
            for _, text in sorted(retained, key=lambda item: item[0]):
                yield loads(text)
            return
        after = -1
        while True:
            batch = await self._sheet.read_rows(
                self.run_id, self.dataset, status=status, after_position=after, limit=_READ_PAGE
            )
            for row in batch:
                data = loads(row.data_json)
                if row.error is not None:
                    data["_error"] = row.error
                yield data
            if len(batch) < _READ_PAGE:
                return
            after = batch[-1].position

    # -- the commit ledger's side (it alone changes the counts) ---------------
    def keep(self, position: int, text: str, size: int, data: Any) -> None:
        """A completed row committed: keep it for the preview and the cache."""
        if data is not None and len(self.preview) < PREVIEW_ROWS:
            self.preview.append(data)
        if not self._retained.add(position, text, size):
            log.info(
                "dataset %r: completed rows passed retained_rows_budget_bytes=%d; "
                "rows() will stream them from the store",
                self.dataset,
                self._retained.budget,
            )

    def forget_retained(self) -> None:
        """The sheet holds rows this attempt never saw: :meth:`rows` must read it."""
        self._retained.drop()
