"""The keyword arguments of four ``Store`` methods, written once for every store.

``begin_attempt``, ``finish_attempt``, ``read_rows`` and ``claim_page`` take several keyword
arguments (engine/_store.py says what each one means). Each store takes
them whole (``**end: Unpack[AttemptEnd]``), and reads them through
:func:`attempt_end` and :func:`row_query`, which hold the defaults, or hands
them on to :func:`trioplay.stores._rules.decide_page`. Type checkers see the
same signature as the protocol's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:
    from trioplay import RowStatus


class AttemptStart(TypedDict):
    """``begin_attempt``'s keyword arguments, as every store takes them; :func:`attempt_start`
    gives them with their defaults (``RunStore.begin_attempt`` in engine/_store.py)."""

    now: float
    play_ref: NotRequired[str | None]
    parent_run_id: NotRequired[str | None]


def attempt_start(
    now: float, play_ref: str | None = None, parent_run_id: str | None = None
) -> tuple[float, str | None, str | None]:
    """``begin_attempt``'s ``now``, ``play_ref`` and ``parent_run_id``."""
    return now, play_ref, parent_run_id


class AttemptEnd(TypedDict):
    """``finish_attempt``'s keyword arguments, as every store takes them; :func:`attempt_end`
    gives them with their defaults (``RunStore.finish_attempt`` in engine/_store.py)."""

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
) -> tuple[int, tuple[float, str | None, str | None, str | None]]:
    """``finish_attempt``'s ``attempt`` (its fence), and its ``now``, ``output_json``,
    ``error`` and ``stats_json`` (what it writes)."""
    return attempt, (now, output_json, error, stats_json)


class RowQuery(TypedDict, total=False):
    """``read_rows``'s keyword arguments, as every store takes them; :func:`row_query`
    gives them with their defaults (``SheetStore.read_rows`` in engine/_store.py)."""

    status: RowStatus | None
    after_position: int
    limit: int


def row_query(
    status: RowStatus | None = None, after_position: int = -1, limit: int = 1000
) -> tuple[RowStatus | None, int, int]:
    """``read_rows``'s ``status``, ``after_position`` and ``limit``, defaults filled in."""
    return status, after_position, limit


class PageTerms(TypedDict):
    """``claim_page``'s keyword arguments, taken whole by every store and handed to
    :func:`decide_page` (what each one means: ``PageStore.claim_page`` in engine/_store.py)."""

    owner: str
    lease_ttl: float
    now: float
    takeover_lease: NotRequired[str | None]
    reopen: NotRequired[bool]
