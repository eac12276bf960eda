"""The SQLite store's schema and statements: migrations, fenced writes, multi-row inserts.

Each statement is text built once at import; the store's connection caches
their compiled form (``cached_statements``). The jobs that run them live in
:mod:`trioplay.stores._sqlite_jobs`.
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import TYPE_CHECKING, Any

import attrs

from ._columns import (
    EVENT_COLUMNS,
    RECEIPT_COLUMNS,
    RUN_COLUMNS,
    RUN_FIELDS,
    WAIT_COLUMNS,
    WAIT_FIELDS,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

SCHEMA_VERSION = 2

# Bound variables per statement: SQLite's limit before 3.32 (32766 since). A
# multi-row statement (see _ManyRows) of a hundred rows already spreads the
# per-statement cost thin.
_MAX_VARIABLES = 999
# Keys per "IN (...)" list, leaving room for the statement's other parameters.
_CHUNK = 500

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            play TEXT NOT NULL,
            input_json TEXT NOT NULL,
            status TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            output_json TEXT,
            error TEXT,
            stats_json TEXT
        )""",
        "CREATE INDEX runs_by_update ON runs (updated_at)",
        """CREATE TABLE receipts (
            key TEXT PRIMARY KEY,
            operation TEXT NOT NULL,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            run_id TEXT,
            lease_id TEXT,
            lease_expires_at REAL,
            owner TEXT,
            attempts INTEGER NOT NULL,
            result_json TEXT,
            error_json TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            completed_at REAL
        )""",
        # Only run_id: an index on status would be rewritten by every completion.
        "CREATE INDEX receipts_by_run ON receipts (run_id)",
        """CREATE TABLE sheet_rows (
            run_id TEXT NOT NULL,
            dataset TEXT NOT NULL,
            key TEXT NOT NULL,
            position INTEGER NOT NULL,
            status TEXT NOT NULL,
            data_json TEXT NOT NULL,
            error TEXT,
            attempt INTEGER NOT NULL,
            PRIMARY KEY (run_id, dataset, key)
        )""",
        "CREATE INDEX sheet_rows_by_position ON sheet_rows (run_id, dataset, position)",
        """CREATE TABLE pages (
            run_id TEXT NOT NULL,
            dataset TEXT NOT NULL,
            page_offset INTEGER NOT NULL,
            status TEXT NOT NULL,
            lease_id TEXT,
            lease_expires_at REAL,
            owner TEXT,
            attempt INTEGER NOT NULL,
            failed INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (run_id, dataset, page_offset)
        )""",
    ),
    # 2: waits and events (issue 22); runs know their parent, root, depth and play.
    (
        "ALTER TABLE runs ADD COLUMN parent_run_id TEXT",
        "ALTER TABLE runs ADD COLUMN root_run_id TEXT",
        "ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN play_ref TEXT",
        "UPDATE runs SET root_run_id = run_id",
        """CREATE TABLE waits (
            wait_key TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            dataset TEXT,
            row_key TEXT,
            name TEXT NOT NULL,
            key_json TEXT NOT NULL,
            token TEXT NOT NULL UNIQUE,
            deadline REAL NOT NULL,
            status TEXT NOT NULL,
            created_at REAL NOT NULL,
            settled_at REAL,
            payload_json TEXT,
            reason TEXT,
            event_id TEXT
        )""",
        "CREATE INDEX waits_by_slot ON waits (run_id, name, key_json, status)",
        "CREATE INDEX waits_by_run ON waits (run_id, created_at, wait_key)",
        # seq (the rowid, never reused: nothing is deleted) is the send order.
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY,
            event_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            key_json TEXT NOT NULL,
            payload_json TEXT,
            reject TEXT,
            sent_at REAL NOT NULL,
            consumed_by TEXT,
            UNIQUE (run_id, event_id)
        )""",
        "CREATE INDEX events_unclaimed ON events (run_id, seq) WHERE consumed_by IS NULL",
    ),
)

BEGIN_ATTEMPT = f"""
    INSERT INTO runs ({RUN_COLUMNS}) VALUES ({", ".join("?" * len(RUN_FIELDS))})
    ON CONFLICT (run_id) DO UPDATE SET
        {", ".join(f"{name} = excluded.{name}" for name in RUN_FIELDS[1:])}
"""

# -- waits and events --------------------------------------------------------------
SELECT_WAITS = f"SELECT {WAIT_COLUMNS} FROM waits WHERE wait_key IN "
WAIT_BY_TOKEN = f"SELECT {WAIT_COLUMNS} FROM waits WHERE token = ?"
OPEN_WAITS = f"""
    SELECT {WAIT_COLUMNS} FROM waits
    WHERE run_id = ? AND name = ? AND key_json = ? AND status = 'waiting'
"""
RUN_OPEN_WAITS = f"SELECT {WAIT_COLUMNS} FROM waits WHERE run_id = ? AND status = 'waiting'"
LIST_WAITS = f"SELECT {WAIT_COLUMNS} FROM waits WHERE run_id = ? ORDER BY created_at, wait_key"
INSERT_WAIT = f"INSERT INTO waits ({WAIT_COLUMNS}) VALUES ({', '.join('?' * len(WAIT_FIELDS))})"
SETTLE_WAIT = """
    UPDATE waits SET status = ?, settled_at = ?, payload_json = ?, reason = ?, event_id = ?
    WHERE wait_key = ? AND status = 'waiting'
"""
EVENT_BY_ID = f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND event_id = ?"
UNCLAIMED_EVENTS = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND consumed_by IS NULL ORDER BY seq"
)
LIST_EVENTS = f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq"
INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
CONSUME_EVENT = (
    "UPDATE events SET consumed_by = ? WHERE run_id = ? AND event_id = ? AND consumed_by IS NULL"
)
CANCEL_RUN = "UPDATE runs SET status = 'cancelled', updated_at = ? WHERE run_id = ?"

# Fenced by the attempt: a late attempt never overwrites a later one's end.
FINISH_ATTEMPT = """
    UPDATE runs SET status = ?, updated_at = ?, output_json = ?, error = ?, stats_json = ?
    WHERE run_id = ? AND attempt = ?
"""
UPSERT_CLAIMED = f"""
    INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (key) DO UPDATE SET
        operation = excluded.operation, name = excluded.name, status = excluded.status,
        run_id = excluded.run_id, lease_id = excluded.lease_id,
        lease_expires_at = excluded.lease_expires_at, owner = excluded.owner,
        attempts = excluded.attempts, result_json = excluded.result_json,
        error_json = excluded.error_json, updated_at = excluded.updated_at,
        completed_at = excluded.completed_at
"""
_FENCE = "WHERE key = ? AND lease_id = ? AND status = 'running'"
HEARTBEAT = f"UPDATE receipts SET lease_expires_at = ?, updated_at = ? {_FENCE}"
COMPLETE = f"""
    UPDATE receipts SET status = 'completed', lease_expires_at = NULL, result_json = ?,
        error_json = NULL, updated_at = ?, completed_at = ?
    {_FENCE}
"""
FAIL = f"""
    UPDATE receipts SET status = 'failed', lease_expires_at = NULL, result_json = NULL,
        error_json = ?, updated_at = ?, completed_at = ?
    {_FENCE}
"""
RELEASE = f"""
    UPDATE receipts SET status = 'pending', lease_id = NULL, lease_expires_at = NULL,
        owner = NULL, updated_at = ?
    {_FENCE}
"""
FAILED_RECEIPTS = f"""
    SELECT {RECEIPT_COLUMNS} FROM receipts
    WHERE run_id = ? AND status = 'failed' AND key > ? ORDER BY key LIMIT ?
"""
FORGET_FAILED = """
    UPDATE receipts SET status = 'pending', lease_id = NULL, lease_expires_at = NULL,
        owner = NULL, error_json = NULL, updated_at = ?
    WHERE key = ? AND run_id = ? AND status = 'failed'
"""
_PAGE_FENCE = (
    "WHERE run_id = ? AND dataset = ? AND page_offset = ? AND lease_id = ? AND status = 'running'"
)
HEARTBEAT_PAGE = f"UPDATE pages SET lease_expires_at = ?, updated_at = ? {_PAGE_FENCE}"
FINISH_PAGE = f"""
    UPDATE pages SET status = 'done', lease_expires_at = NULL, attempt = ?, failed = ?,
        updated_at = ?
    {_PAGE_FENCE}
"""
# The lease id stays until the next claim: rows the releasing process still
# flushes are its own until another process claims the page.
RELEASE_PAGE = f"""
    UPDATE pages SET status = 'pending', lease_expires_at = NULL, owner = NULL, updated_at = ?
    {_PAGE_FENCE}
"""
# The current lease of the pages a fenced sheet write names (ends in "IN ").
PAGE_LEASES = (
    "SELECT page_offset, lease_id FROM pages WHERE run_id = ? AND dataset = ? AND page_offset IN "
)
# Which of a sheet write's failed rows' keys are completed already (ends in "IN ").
COMPLETED_KEYS = """
    SELECT key FROM sheet_rows WHERE run_id = ? AND dataset = ? AND status = 'completed'
    AND key IN """
# The latest expiry and renewal of each run's running receipts and pages ({marks}: its ids).
RUN_LEASES = """
    SELECT run_id, max(lease_expires_at), max(updated_at) FROM (
        SELECT run_id, lease_expires_at, updated_at FROM receipts
        WHERE status = 'running' AND run_id IN ({marks})
        UNION ALL
        SELECT run_id, lease_expires_at, updated_at FROM pages
        WHERE status = 'running' AND run_id IN ({marks})
    ) GROUP BY run_id
"""


@cache  # a few hundred at most: per statement, one per chunk size
def _many_rows_sql(template: str, row: str, count: int) -> str:
    """The text of a :class:`_ManyRows` statement over ``count`` rows, built once."""
    return template.format(values="VALUES " + ", ".join([row] * count))


@attrs.frozen
class _ManyRows:
    """One statement over many rows: ``template``'s ``{values}`` becomes ``VALUES row, row, ...``.

    ``executemany`` of a one-row statement executes it once per row, each
    execution paying SQLite's per-statement work (reset, bind, step, the
    program's setup) and the Python around it; one statement per chunk of
    rows pays it once.

    The catch: a statement that writes many rows and may fail halfway needs a
    statement journal, a copy of every page it changes, which spills to a
    temporary file past 64 KiB. With scattered keys (a page per row) that
    costs more than the statement saves: for 100 new receipts, a third more
    CPU than ``executemany``. ``INSERT OR ROLLBACK`` needs none, since a
    constraint error then rolls back the whole transaction, as the callers
    here would anyway. An upsert's ``DO UPDATE`` or an open savepoint needs
    one whatever the statement says.

    Statements must begin with INSERT (not WITH), or ``rowcount`` is -1.
    Completions stay one-row ``executemany``: an UPDATE ... FROM (VALUES ...)
    of a whole batch saved under 8% of their instructions (SQLite
    materialises the joined rows first), not worth its version check (3.33).
    """

    template: str
    row: str  # one row's tuple of values, e.g. "(?, ?, 'running')"

    def execute(self, conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> int:
        """Run the statement over ``rows``, in chunks; the total rowcount."""
        per_chunk = _MAX_VARIABLES // self.row.count("?")
        changed = 0
        for start in range(0, len(rows), per_chunk):
            chunk = rows[start : start + per_chunk]
            sql = _many_rows_sql(self.template, self.row, len(chunk))
            changed += conn.execute(sql, list(itertools.chain.from_iterable(chunk))).rowcount
        return changed


# Claims a batch of keys that have no receipt yet, as decide_claims would (see _claim_fresh).
INSERT_FRESH = _ManyRows(
    """
    INSERT OR ROLLBACK INTO receipts (key, operation, name, run_id, lease_id, lease_expires_at,
        owner, created_at, updated_at, status, attempts)
    {values}
    ON CONFLICT (key) DO NOTHING
    """,
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', 1)",
)
# A sheet batch: first the rows new to the sheet, which needs no statement journal, and
# only if some key was there already (or repeats) the upsert of every row, in order.
INSERT_NEW_ROWS = _ManyRows(
    """
    INSERT OR ROLLBACK INTO sheet_rows (run_id, dataset, key, position, status, data_json,
        error, attempt)
    {values}
    ON CONFLICT (run_id, dataset, key) DO NOTHING
    """,
    "(?, ?, ?, ?, ?, ?, ?, ?)",
)
UPSERT_ROWS = _ManyRows(
    """
    INSERT INTO sheet_rows (run_id, dataset, key, position, status, data_json, error, attempt)
    {values}
    ON CONFLICT (run_id, dataset, key) DO UPDATE SET
        position = excluded.position, status = excluded.status,
        data_json = excluded.data_json, error = excluded.error, attempt = excluded.attempt
    WHERE NOT (sheet_rows.status = 'completed' AND excluded.status = 'failed')
    """,
    "(?, ?, ?, ?, ?, ?, ?, ?)",
)


def rows_in(
    conn: sqlite3.Connection, select: str, params: tuple[Any, ...], keys: Sequence[str | int]
) -> list[Any]:
    # `select` ends in "IN "; one statement per chunk of keys.
    rows: list[Any] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows += conn.execute(f"{select}({marks})", (*params, *chunk)).fetchall()
    return rows
