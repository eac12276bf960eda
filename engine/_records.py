"""Records exchanged between the engine and a store.

Stores persist these and hand them back; the engine never sees a store's own
row types. Payloads (results, row data, errors) travel as JSON text so a store
stores them as they are and never parses them.
"""

from __future__ import annotations

from typing import Literal

import attrs

ReceiptStatus = Literal["pending", "running", "completed", "failed", "skipped"]
Operation = Literal["tool", "fetch", "step", "play"]
RowStatus = Literal["completed", "failed"]
RunStatus = Literal["running", "completed", "failed", "cancelled"]


@attrs.frozen
class Receipt:
    """The durable record of one external effect."""

    key: str
    operation: str
    name: str
    status: ReceiptStatus
    run_id: str | None = None
    lease_id: str | None = None
    lease_expires_at: float | None = None
    owner: str | None = None
    attempts: int = 0
    result_json: str | None = None
    error_json: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    completed_at: float | None = None


@attrs.frozen
class ClaimRequest:
    """Ask the store for ownership of one receipt key.

    The store decides, atomically per key:

    - no receipt, or a ``pending`` one, or one whose lease expired
      (``lease_expires_at <= now``): claim it -> :class:`Claimed`;
    - a ``running`` receipt with a live lease: -> :class:`Held`, even when
      ``force`` (a live lease is never duplicated), unless
      ``takeover_lease`` equals its ``lease_id`` (the engine proved that
      owner dead), then claim it;
    - ``completed``/``skipped``: -> :class:`Settled`, unless ``force`` or the
      receipt is older than ``stale_after`` seconds (``completed_at <=
      now - stale_after``), then claim it;
    - ``failed``: -> :class:`Settled`, unless ``force`` or
      ``refresh_failed``, then claim it.

    A claim sets ``status="running"``, a fresh ``lease_id``, ``lease_expires_at
    = now + lease_ttl``, ``owner``, ``run_id`` and increments ``attempts``.
    """

    key: str
    operation: str
    name: str
    run_id: str
    force: bool = False
    stale_after: float | None = None
    refresh_failed: bool = False
    takeover_lease: str | None = None


@attrs.frozen
class Claimed:
    key: str
    lease_id: str
    lease_expires_at: float
    attempt: int


@attrs.frozen
class Held:
    receipt: Receipt


@attrs.frozen
class Settled:
    receipt: Receipt


ClaimOutcome = Claimed | Held | Settled


@attrs.frozen
class Lease:
    key: str
    lease_id: str


@attrs.frozen
class Completion:
    """Mark ``key`` completed with ``result_json``; fenced by ``lease_id``."""

    key: str
    lease_id: str
    result_json: str


@attrs.frozen
class Failure:
    """Mark ``key`` failed with ``error_json``; fenced by ``lease_id``."""

    key: str
    lease_id: str
    error_json: str


@attrs.frozen
class SheetRow:
    """One terminal row of a dataset sheet.

    ``data_json`` is the row (input fields plus computed columns) as a JSON
    object; ``error`` is the formatted error of a failed row. ``attempt`` is
    the run attempt that wrote it.
    """

    key: str
    position: int
    status: RowStatus
    data_json: str
    error: str | None = None
    attempt: int = 0


@attrs.frozen
class SheetEntry:
    """What ``sheet_status`` reports for a key that is already in the sheet."""

    status: RowStatus
    attempt: int


PageStatus = Literal["claimed", "held", "done"]


@attrs.frozen
class PageClaim:
    """What ``claim_page`` decided for one page of a dataset.

    ``claimed``: this owner runs the page under ``lease_id`` until
    ``lease_expires_at`` (renewed by heartbeats). ``held``: another owner's
    lease is live (``owner``, ``lease_id``, ``lease_expires_at`` say whose).
    ``done``: the page was finished by attempt ``attempt`` with ``failed``
    failed rows.
    """

    status: PageStatus
    lease_id: str | None = None
    lease_expires_at: float | None = None
    owner: str | None = None
    attempt: int = 0
    failed: int = 0


@attrs.frozen
class PageLease:
    run_id: str
    dataset: str
    offset: int
    lease_id: str


@attrs.frozen
class RunRecord:
    run_id: str
    play: str
    input_json: str
    status: RunStatus
    attempt: int
    created_at: float
    updated_at: float
    output_json: str | None = None
    error: str | None = None
    stats_json: str | None = None
    # Child plays: the run that called this one, the root of its tree, its depth (root 0).
    # Kept by the memory store; the SQL stores keep them once their schema has the columns.
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
