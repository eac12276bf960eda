"""Records exchanged between the engine and a store.

Stores persist these and hand them back; the engine never sees a store's own
row types. Payloads (results, row data, errors) travel as JSON text so a store
stores them as they are and never parses them.
"""

from __future__ import annotations

import json
import math
from typing import Literal

import attrs

from ._errors import InvalidWait

# The records built for every call (a claim's request and answer, a
# completion and its sibling failure) are plain ``attrs.define`` classes, not
# frozen ones: a frozen slotted class sets each field through
# ``object.__setattr__``, some 850 machine instructions a field, and a row of
# two calls builds six of them (``docs/benchmarks.md``, issue 27, third
# pass: 3% of the instructions of a row). Nothing changes them once built;
# equality is still by value (they are unhashable, and nothing hashes them).

ReceiptStatus = Literal["pending", "running", "completed", "failed", "skipped"]
Operation = Literal["tool", "fetch", "step", "play"]
RowStatus = Literal["completed", "failed"]
RunStatus = Literal["running", "completed", "failed", "interrupted", "cancelled", "waiting"]
"""``interrupted``: a cancel scope around the run (Ctrl-C, a timeout) ended the attempt;
the same run id runs again as its next attempt. ``cancelled``: ``trioplay cancel`` ended
the run for good; it never runs again."""
WaitStatus = Literal["waiting", "delivered", "rejected", "timed_out", "cancelled"]
SheetWrite = Literal["written", "kept", "fenced"]
"""What ``write_terminal_rows`` did with one row.

``written``: the row is in the sheet. ``kept``: the row was failed and the
sheet already held the key completed, which stays. ``fenced``: the row's
page lease is no longer the writer's (another process took the page over),
so nothing was written.
"""


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


@attrs.define  # not frozen: built per call (see the note at the top)
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


@attrs.define  # not frozen: built per call (see the note at the top)
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


@attrs.define  # not frozen: built per call (see the note at the top)
class Completion:
    """Mark ``key`` completed with ``result_json``; fenced by ``lease_id``."""

    key: str
    lease_id: str
    result_json: str


@attrs.define  # not frozen: built per call (see the note at the top)
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
class RunLeases:
    """The leases a run holds, for telling a live run from a dead one.

    ``expires_at``: the latest expiry among its running receipts and pages
    (``None`` if it holds none); ``renewed_at``: the last time one of them
    was claimed or renewed (its last heartbeat), ``None`` likewise.
    """

    expires_at: float | None = None
    renewed_at: float | None = None


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
    # Child plays (issue 23) and ``trioplay resume RUN`` (issue 22): the run
    # that started this one, the root of its tree (itself for a root), its
    # depth (0 for a root), and the play's reference (``FILE.py:PLAY``), when known.
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    play_ref: str | None = None


# -- waits and events (issue 22) ----------------------------------------------
# The checks below run when a wait or an event record is built, so bad input
# is refused (InvalidWait, naming the field) before any store sees it.


def check_wait_name(field: str, value: object) -> None:
    """A non-empty string (a wait's name, an id, a token)."""
    if not isinstance(value, str) or not value:
        raise InvalidWait(field, f"must be a non-empty string, got {value!r}")


def check_json_text(field: str, value: object) -> None:
    """JSON text; the refusal names the line and column where it stops parsing."""
    if not isinstance(value, str):
        raise InvalidWait(field, f"must be JSON text, got {type(value).__name__}")
    try:
        json.loads(value)
    except ValueError as error:
        if isinstance(error, json.JSONDecodeError):
            problem = f"at line {error.lineno}, column {error.colno}: {error.msg}"
        else:
            problem = str(error)
        raise InvalidWait(field, f"is not JSON {problem}") from None


def check_instant(field: str, value: object) -> None:
    """A finite wall-clock instant (epoch seconds)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidWait(field, f"must be a finite instant in epoch seconds, got {value!r}")


def check_send_body(payload_json: str | None, reject: str | None) -> None:
    """An event carries a payload or a reject reason (a non-empty string), not both."""
    if payload_json is not None and reject is not None:
        raise InvalidWait("reject", "an event carries a payload or a reject reason, not both")
    if reject is not None:
        check_wait_name("reject", reject)
    elif payload_json is None:
        raise InvalidWait("payload_json", "an event needs a payload (JSON) or a reject reason")


def _name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_wait_name(attribute.name, value)


def _json(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_json_text(attribute.name, value)


def _json_or_none(
    instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None:
        check_json_text(attribute.name, value)


def _instant(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    check_instant(attribute.name, value)


@attrs.frozen
class WaitRequest:
    """What a row (or a play) registers: one wait for an outside event.

    ``wait_key`` is derived like a receipt key from (run, dataset, row key,
    name, key, occurrence), so a rerun meets the same wait. ``dataset`` and
    ``row_key`` are ``None`` for a play-level wait. ``key_json`` is the
    canonical JSON of the user's key (``"null"`` when none). ``deadline`` is
    a wall-clock instant (epoch seconds) and ``token`` an opaque, unguessable
    string (``secrets.token_urlsafe(24)``): both are written once, when the
    wait is first registered, and never recomputed. Bad values raise
    :class:`trioplay.InvalidWait` naming the field, before any store sees them.
    """

    wait_key: str = attrs.field(validator=_name)
    run_id: str = attrs.field(validator=_name)
    dataset: str | None
    row_key: str | None
    name: str = attrs.field(validator=_name)
    key_json: str = attrs.field(validator=_json)
    deadline: float = attrs.field(validator=_instant)
    token: str = attrs.field(validator=_name)


@attrs.frozen
class WaitRecord:
    """A wait as stored.

    ``status`` starts ``waiting`` and settles once: ``delivered`` (the
    event's payload copied into ``payload_json``, so every replay in any
    process reads this one value), ``rejected`` (the sender's ``reason``),
    ``timed_out`` (``now > deadline`` with no event) or ``cancelled`` (the
    run was cancelled). ``event_id`` names the event that settled it.
    """

    wait_key: str
    run_id: str
    dataset: str | None
    row_key: str | None
    name: str
    key_json: str
    token: str
    deadline: float
    status: WaitStatus
    created_at: float
    settled_at: float | None = None
    payload_json: str | None = None
    reason: str | None = None
    event_id: str | None = None


@attrs.frozen
class SendRequest:
    """An event for the waits of ``(run_id, name, key_json)``.

    ``payload_json`` is the event's payload (``None`` with ``reject``: the
    wait settles ``rejected`` with that reason). ``event_id`` is the
    sender's id (``--id``) or a fresh random one: the same id sent again is
    a no-op. With ``token``, the event is addressed by a wait's token
    instead: ``name`` and ``key_json`` come from that wait (pass them empty).
    """

    run_id: str = attrs.field(validator=_name)
    name: str
    key_json: str
    payload_json: str | None = attrs.field(validator=_json_or_none)
    event_id: str = attrs.field(validator=_name)
    reject: str | None = None
    token: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.token is None:
            check_wait_name("name", self.name)
            check_json_text("key_json", self.key_json)
        check_send_body(self.payload_json, self.reject)


@attrs.frozen
class SendResult:
    """What ``send_event`` did: ``delivered`` (to ``wait_key``, in ``dataset``
    and ``row_key``), ``buffered`` (no open wait yet: the next one to
    register takes it) or ``duplicate`` (this ``event_id`` was sent before
    with the same content; nothing written)."""

    outcome: Literal["delivered", "buffered", "duplicate"]
    event_id: str
    wait_key: str | None = None
    dataset: str | None = None
    row_key: str | None = None


@attrs.frozen
class EventRecord:
    """An event as stored; ``consumed_by`` is the wait that took it, ``None`` while buffered."""

    event_id: str
    run_id: str
    name: str
    key_json: str
    payload_json: str | None
    reject: str | None
    sent_at: float
    consumed_by: str | None = None
