"""Four ``Store`` methods whose keyword arguments every store reads alike, written once.

``begin_attempt``, ``finish_attempt``, ``read_rows`` and ``claim_page`` take several keyword
arguments (engine/_store.py says what each one means). :class:`StoreTerms`, a base of every
store, defines the four: each takes its keyword arguments whole (``**end: Unpack[AttemptEnd]``,
so type checkers see the same signature as the protocol's), fills in their defaults
(:func:`attempt_start`, :func:`attempt_end`, :func:`row_query`), and hands them to the
store's own hook (``_begin_attempt``, ``_finish_attempt``, ``_read_rows``, ``_claim_page``),
which takes them in order. ``claim_page``'s terms go on whole, to
:func:`trioplay.stores._rules.decide_page`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict, Unpack

from trioplay import StoreError

from ._rules import Begin

if TYPE_CHECKING:
    from trioplay import PageClaim, RowStatus, RunRecord, RunStatus, SheetRow

End = tuple[float, str | None, str | None, str | None]
"""What ``finish_attempt`` writes: ``now``, ``output_json``, ``error``, ``stats_json``."""

Page = tuple[str, str, int]
"""A page's address: ``run_id``, ``dataset``, ``offset``."""

Query = tuple["RowStatus | None", int, int]
"""Which rows ``read_rows`` reads: ``status``, ``after_position``, ``limit``."""


class StoreTerms:
    """``begin_attempt``, ``finish_attempt``, ``read_rows`` and ``claim_page``, for every store.

    A store defines the four hooks; ``_finish_attempt`` answers ``None`` for a run the
    store does not have (``finish_attempt`` raises :class:`trioplay.StoreError` for it).
    """

    @property
    def url(self) -> str:
        raise NotImplementedError

    async def begin_attempt(
        self, run_id: str, play: str, input_json: str, **start: Unpack[AttemptStart]
    ) -> RunRecord:
        return await self._begin_attempt(Begin(run_id, play, input_json, *attempt_start(**start)))

    async def finish_attempt(
        self, run_id: str, status: RunStatus, **end: Unpack[AttemptEnd]
    ) -> bool:
        attempt, ending = attempt_end(**end)
        written = await self._finish_attempt(run_id, status, attempt, ending)
        if written is None:
            raise StoreError(f"{self.url}: finish_attempt: unknown run {run_id!r}")
        return written

    async def read_rows(
        self, run_id: str, dataset: str, **query: Unpack[RowQuery]
    ) -> list[SheetRow]:
        return await self._read_rows(run_id, dataset, row_query(**query))

    async def claim_page(
        self, run_id: str, dataset: str, offset: int, **terms: Unpack[PageTerms]
    ) -> PageClaim:
        return await self._claim_page((run_id, dataset, offset), terms)

    async def _begin_attempt(self, begin: Begin) -> RunRecord:
        raise NotImplementedError

    async def _finish_attempt(
        self, run_id: str, status: RunStatus, attempt: int, end: End
    ) -> bool | None:
        """Write the end of ``attempt``, fenced by it; ``None`` for an unknown run."""
        raise NotImplementedError

    async def _read_rows(self, run_id: str, dataset: str, query: Query) -> list[SheetRow]:
        raise NotImplementedError

    async def _claim_page(self, page: Page, terms: PageTerms) -> PageClaim:
        raise NotImplementedError


class AttemptStart(TypedDict):
    """``begin_attempt``'s keyword arguments, as :class:`StoreTerms` takes them;
    :func:`attempt_start` gives them with their defaults (``RunStore.begin_attempt`` in
    engine/_store.py)."""

    now: float
    play_ref: NotRequired[str | None]
    parent_run_id: NotRequired[str | None]


def attempt_start(
    now: float, play_ref: str | None = None, parent_run_id: str | None = None
) -> tuple[float, str | None, str | None]:
    """``begin_attempt``'s ``now``, ``play_ref`` and ``parent_run_id``."""
    return now, play_ref, parent_run_id


class AttemptEnd(TypedDict):
    """``finish_attempt``'s keyword arguments, as :class:`StoreTerms` takes them;
    :func:`attempt_end` gives them with their defaults (``RunStore.finish_attempt`` in
    engine/_store.py)."""

    attempt: int
    now: float
    output_json: NotRequired[str | None]
    error: NotRequired[str | None]
    stats_json: NotRequired[str | None]


def attempt_end(
    attempt: int,
    now: float,
    output_json: str | None = None,
    error: str | None = None,
    stats_json: str | None = None,
) -> tuple[int, End]:
    """``finish_attempt``'s ``attempt`` (its fence), and its ``now``, ``output_json``,
    ``error`` and ``stats_json`` (what it writes)."""
    return attempt, (now, output_json, error, stats_json)


class RowQuery(TypedDict, total=False):
    """``read_rows``'s keyword arguments, as :class:`StoreTerms` takes them; :func:`row_query`
    gives them with their defaults (``SheetStore.read_rows`` in engine/_store.py)."""

    status: RowStatus | None
    after_position: int
    limit: int


def row_query(
    status: RowStatus | None = None, after_position: int = -1, limit: int = 1000
) -> Query:
    """``read_rows``'s ``status``, ``after_position`` and ``limit``, defaults filled in."""
    return status, after_position, limit


class PageTerms(TypedDict):
    """``claim_page``'s keyword arguments, taken whole by :class:`StoreTerms` and handed to
    :func:`decide_page` (what each one means: ``PageStore.claim_page`` in engine/_store.py)."""

    owner: str
    lease_ttl: float
    now: float
    takeover_lease: NotRequired[str | None]
    reopen: NotRequired[bool]
