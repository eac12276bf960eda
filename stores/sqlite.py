"""``sqlite:///path.db``: the embedded default store, on stdlib :mod:`sqlite3`.

One dedicated thread owns the connection and runs jobs in order; Trio tasks
hand it a job and sleep until the result is handed back through the Trio
token, so a call costs two thread hops and never a new thread.
"""

from __future__ import annotations

import enum
import itertools
import os
import queue
import sqlite3
import threading
import time
from contextlib import contextmanager
from functools import cache, partial
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import outcome
import trio

from trioplay import (
    Claimed,
    ClaimOutcome,
    ClaimRequest,
    Completion,
    Failure,
    Lease,
    PageClaim,
    PageLease,
    Receipt,
    RunRecord,
    SheetEntry,
    SheetRow,
    StoreError,
)

from ._rules import PageRecord, decide_claims, decide_page, lease_ids

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from trioplay._records import RowStatus, RunStatus

T = TypeVar("T")

SCHEMA_VERSION = 1

# Bound variables per statement: SQLite's limit before 3.32 (32766 since). A
# multi-row statement (see _ManyRows) of a hundred rows already spreads the
# per-statement cost thin.
_MAX_VARIABLES = 999
# Keys per "IN (...)" list, leaving room for the statement's other parameters.
_CHUNK = 500
_BUSY_TIMEOUT = 5.0
# Jobs at most this large run inline, on the Trio thread (a few ms at most);
# larger payloads (sheet rows, results) are written on the worker thread.
_INLINE_BYTES = 1 << 20
_INLINE_KEYS = 4096
_WAL_CHECKPOINT_PAGES = 10_000

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
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
)

_RUN_COLUMNS = (
    "run_id, play, input_json, status, attempt, created_at, updated_at,"
    " output_json, error, stats_json"
)
_RECEIPT_COLUMNS = (
    "key, operation, name, status, run_id, lease_id, lease_expires_at, owner, attempts,"
    " result_json, error_json, created_at, updated_at, completed_at"
)
_SHEET_COLUMNS = "key, position, status, data_json, error, attempt"
_PAGE_COLUMNS = "status, lease_id, lease_expires_at, owner, attempt, failed, updated_at"

_UPSERT_CLAIMED = f"""
    INSERT INTO receipts ({_RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (key) DO UPDATE SET
        operation = excluded.operation, name = excluded.name, status = excluded.status,
        run_id = excluded.run_id, lease_id = excluded.lease_id,
        lease_expires_at = excluded.lease_expires_at, owner = excluded.owner,
        attempts = excluded.attempts, result_json = excluded.result_json,
        error_json = excluded.error_json, updated_at = excluded.updated_at,
        completed_at = excluded.completed_at
"""
_FENCE = "WHERE key = ? AND lease_id = ? AND status = 'running'"
_HEARTBEAT = f"UPDATE receipts SET lease_expires_at = ?, updated_at = ? {_FENCE}"
_COMPLETE = f"""
    UPDATE receipts SET status = 'completed', lease_expires_at = NULL, result_json = ?,
        error_json = NULL, updated_at = ?, completed_at = ?
    {_FENCE}
"""
_FAIL = f"""
    UPDATE receipts SET status = 'failed', lease_expires_at = NULL, result_json = NULL,
        error_json = ?, updated_at = ?, completed_at = ?
    {_FENCE}
"""
_RELEASE = f"""
    UPDATE receipts SET status = 'pending', lease_id = NULL, lease_expires_at = NULL,
        owner = NULL, updated_at = ?
    {_FENCE}
"""
_PAGE_FENCE = (
    "WHERE run_id = ? AND dataset = ? AND page_offset = ? AND lease_id = ? AND status = 'running'"
)
_HEARTBEAT_PAGE = f"UPDATE pages SET lease_expires_at = ?, updated_at = ? {_PAGE_FENCE}"
_FINISH_PAGE = f"""
    UPDATE pages SET status = 'done', lease_expires_at = NULL, attempt = ?, failed = ?,
        updated_at = ?
    {_PAGE_FENCE}
"""
_RELEASE_PAGE = f"""
    UPDATE pages SET status = 'pending', lease_id = NULL, lease_expires_at = NULL, owner = NULL,
        updated_at = ?
    {_PAGE_FENCE}
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
_INSERT_FRESH = _ManyRows(
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
_INSERT_NEW_ROWS = _ManyRows(
    """
    INSERT OR ROLLBACK INTO sheet_rows (run_id, dataset, key, position, status, data_json,
        error, attempt)
    {values}
    ON CONFLICT (run_id, dataset, key) DO NOTHING
    """,
    "(?, ?, ?, ?, ?, ?, ?, ?)",
)
_UPSERT_ROWS = _ManyRows(
    """
    INSERT INTO sheet_rows (run_id, dataset, key, position, status, data_json, error, attempt)
    {values}
    ON CONFLICT (run_id, dataset, key) DO UPDATE SET
        position = excluded.position, status = excluded.status,
        data_json = excluded.data_json, error = excluded.error, attempt = excluded.attempt
    """,
    "(?, ?, ?, ?, ?, ?, ?, ?)",
)


class SqliteStore:
    """A :class:`trioplay.Store` in one SQLite file, the embedded default.

    Build it with :meth:`from_url` (``sqlite:///relative.db``,
    ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``) or from a
    path; :meth:`open` creates missing parent directories, opens the
    database in WAL mode and migrates its schema, refusing with
    :class:`trioplay.StoreError` a database written by a newer trioplay.

    Every call is one job on the store's own thread, and every batch call is
    one transaction. Cancelling a call whose job has not started yet drops
    the job; a job already running is waited for (writes are short and must
    finish or roll back whole) except reads, which are interrupted. Several
    stores, in one process or many, may share a file: every write takes
    SQLite's write lock up front (``BEGIN IMMEDIATE``), and a store waits up
    to 5 s for a lock held by another. :meth:`aclose` stops the thread and
    closes the file; a store that is never closed keeps both until the
    process exits.

    Payload columns are stored as the text they are given, never parsed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._worker: _Worker | None = None
        # Whether the next claim_many tries first to claim every key as new (see _claim_many).
        self._fresh_claims = True

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """The store for ``url``; raises ``ValueError`` if it is not a SQLite URL."""
        prefix = "sqlite:///"
        if not url.startswith(prefix) or len(url) == len(prefix):
            raise ValueError(
                f"bad SQLite store URL {url!r}: use sqlite:///relative.db,"
                " sqlite:////absolute/path.db or sqlite:///:memory:"
            )
        return cls(url[len(prefix) :])

    @property
    def url(self) -> str:
        return f"sqlite:///{self._path}"

    async def open(self) -> None:
        if self._worker is not None:
            raise StoreError(f"{self.url}: open: the store is already open")
        self._worker = _Worker(self._path)
        try:
            await self._call("open", partial(_migrate, url=self.url))
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            with trio.CancelScope(shield=True):
                await worker.stop()

    async def _call(
        self,
        operation: str,
        work: Callable[[sqlite3.Connection], T],
        *,
        interruptible: bool = False,
        urgent: bool = False,
        inline: bool | None = None,
    ) -> T:
        """Run ``work`` as one job; short jobs run inline (see :meth:`_Worker.run`).

        ``inline`` defaults to ``not interruptible``: reads that may scan a
        whole table run on the thread, where cancelling them interrupts them.
        """
        if inline is None:
            inline = not interruptible
        await trio.lowlevel.checkpoint_if_cancelled()
        worker = self._worker
        if worker is None:
            raise StoreError(f"{self.url}: {operation}: the store is not open")
        try:
            return await worker.run(work, interruptible=interruptible, urgent=urgent, inline=inline)
        except (sqlite3.Error, OSError, UnicodeEncodeError) as exc:
            # OSError: creating the parent directories; UnicodeEncodeError: text
            # that is not valid UTF-8 (a lone surrogate) cannot be stored.
            raise StoreError(f"{self.url}: {operation}: {exc}") from exc

    # -- runs ---------------------------------------------------------------
    async def begin_attempt(
        self, run_id: str, play: str, input_json: str, *, now: float
    ) -> RunRecord:
        return await self._call(
            "begin_attempt", partial(_begin_attempt, run_id, play, input_json, now)
        )

    async def finish_attempt(
        self,
        run_id: str,
        status: RunStatus,
        *,
        now: float,
        output_json: str | None = None,
        error: str | None = None,
        stats_json: str | None = None,
    ) -> None:
        params = (status, now, output_json, error, stats_json, run_id)
        updated = await self._call("finish_attempt", partial(_finish_attempt, params))
        if not updated:
            raise StoreError(f"{self.url}: finish_attempt: unknown run {run_id!r}")

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._call("get_run", partial(_get_run, run_id), interruptible=True)

    async def list_runs(self, *, limit: int = 50) -> list[RunRecord]:
        return await self._call("list_runs", partial(_list_runs, limit), interruptible=True)

    # -- receipts -----------------------------------------------------------
    async def claim_many(
        self, requests: Sequence[ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[ClaimOutcome]:
        claim = partial(_claim_many, requests, owner, lease_ttl, now, self._fresh_claims)
        outcomes, self._fresh_claims = await self._call("claim_many", claim)
        return outcomes

    async def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        expires = now + lease_ttl
        params = [(expires, now, lease.key, lease.lease_id) for lease in leases]
        updated = await self._call(
            "heartbeat_many", partial(_fenced, _HEARTBEAT, params), urgent=True
        )
        return [expires if ok else None for ok in updated]

    async def complete_many(self, items: Sequence[Completion], *, now: float) -> list[bool]:
        params = [(item.result_json, now, now, item.key, item.lease_id) for item in items]
        small = sum(len(item.result_json) for item in items) <= _INLINE_BYTES
        return await self._call("complete_many", partial(_fenced, _COMPLETE, params), inline=small)

    async def fail_many(self, items: Sequence[Failure], *, now: float) -> list[bool]:
        params = [(item.error_json, now, now, item.key, item.lease_id) for item in items]
        return await self._call("fail_many", partial(_fenced, _FAIL, params))

    async def release_many(self, leases: Sequence[Lease], *, now: float) -> list[bool]:
        params = [(now, lease.key, lease.lease_id) for lease in leases]
        return await self._call("release_many", partial(_fenced, _RELEASE, params))

    async def get_many(self, keys: Sequence[str]) -> list[Receipt | None]:
        found = await self._call("get_many", partial(_get_many, keys), interruptible=True)
        return [found.get(key) for key in keys]

    async def count_receipts(self, run_id: str) -> dict[str, int]:
        return await self._call(
            "count_receipts", partial(_count_receipts, run_id), interruptible=True
        )

    # -- dataset sheets -----------------------------------------------------
    async def write_terminal_rows(
        self, run_id: str, dataset: str, rows: Sequence[SheetRow]
    ) -> None:
        # A large batch is written on the thread, so the event loop goes on meanwhile.
        small = sum(len(row.data_json) for row in rows) <= _INLINE_BYTES
        await self._call(
            "write_terminal_rows", partial(_write_rows, run_id, dataset, rows), inline=small
        )

    async def sheet_status(
        self, run_id: str, dataset: str, keys: Sequence[str]
    ) -> dict[str, SheetEntry]:
        return await self._call(
            "sheet_status",
            partial(_sheet_status, run_id, dataset, keys),
            interruptible=True,
            inline=len(keys) <= _INLINE_KEYS,
        )

    async def read_rows(
        self,
        run_id: str,
        dataset: str,
        *,
        status: RowStatus | None = None,
        after_position: int = -1,
        limit: int = 1000,
    ) -> list[SheetRow]:
        return await self._call(
            "read_rows",
            partial(_read_rows, run_id, dataset, status, after_position, limit),
            interruptible=True,
        )

    async def count_rows(self, run_id: str, dataset: str) -> dict[str, int]:
        return await self._call(
            "count_rows", partial(_count_rows, run_id, dataset), interruptible=True
        )

    async def list_datasets(self, run_id: str) -> list[str]:
        return await self._call(
            "list_datasets", partial(_list_datasets, run_id), interruptible=True
        )

    # -- page leases --------------------------------------------------------
    async def claim_page(
        self,
        run_id: str,
        dataset: str,
        offset: int,
        *,
        owner: str,
        lease_ttl: float,
        now: float,
        takeover_lease: str | None = None,
        reopen: bool = False,
    ) -> PageClaim:
        decide = partial(
            decide_page,
            owner=owner,
            lease_ttl=lease_ttl,
            now=now,
            takeover_lease=takeover_lease,
            reopen=reopen,
        )
        return await self._call("claim_page", partial(_claim_page, run_id, dataset, offset, decide))

    async def heartbeat_pages(
        self, leases: Sequence[PageLease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        expires = now + lease_ttl
        params = [(expires, now, *_page_lease(lease)) for lease in leases]
        updated = await self._call(
            "heartbeat_pages", partial(_fenced, _HEARTBEAT_PAGE, params), urgent=True
        )
        return [expires if ok else None for ok in updated]

    async def finish_page(self, lease: PageLease, *, attempt: int, failed: int, now: float) -> bool:
        params = [(attempt, failed, now, *_page_lease(lease))]
        [finished] = await self._call("finish_page", partial(_fenced, _FINISH_PAGE, params))
        return finished

    async def release_page(self, lease: PageLease, *, now: float) -> bool:
        params = [(now, *_page_lease(lease))]
        [released] = await self._call("release_page", partial(_fenced, _RELEASE_PAGE, params))
        return released


# -- the worker thread -------------------------------------------------------


class _State(enum.Enum):
    QUEUED = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()
    DROPPED = enum.auto()


@attrs.define(eq=False)
class _Job:
    work: Callable[[sqlite3.Connection], Any]
    task: trio.lowlevel.Task
    token: trio.lowlevel.TrioToken
    interruptible: bool
    last: bool = False
    state: _State = _State.QUEUED
    interrupted: bool = False


class _Worker:
    """The thread that owns one connection and runs jobs on it, one at a time, in order.

    Urgent jobs (lease renewals) go ahead of the queue: a renewal stuck
    behind a backlog of batch writes would lose a lease its owner still holds.
    ``_lock`` guards job states, so a job is either dropped before it starts
    or runs to the end, and an interrupt only ever hits the job it was meant for.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._jobs: queue.PriorityQueue[tuple[bool, int, _Job]] = queue.PriorityQueue()
        self._submitted = itertools.count()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._outstanding = 0  # jobs handed to the thread and not back (Trio thread only)
        self._thread = threading.Thread(
            target=self._serve, name=f"trioplay-sqlite {path}", daemon=True
        )
        self._thread.start()

    async def run(
        self,
        work: Callable[[sqlite3.Connection], T],
        *,
        interruptible: bool = False,
        urgent: bool = False,
        last: bool = False,
        inline: bool = False,
    ) -> T:
        """Run ``work(conn)``: on the thread, or here when ``inline`` and the thread is idle.

        An inline job costs no thread round trip. It never waits for a lock
        (the connection's busy timeout is 0): a job that finds the database
        locked by another connection moves to the thread, which waits.
        """
        if inline and not self._outstanding and self._conn is not None:
            # The thread is idle, so the connection is ours to use here.
            try:
                done = work(self._conn)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                # Another connection holds the lock: wait for it on the thread.
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return done
        task = trio.lowlevel.current_task()
        job = _Job(work, task, trio.lowlevel.current_trio_token(), interruptible, last)
        self._jobs.put((not urgent, next(self._submitted), job))
        self._outstanding += 1

        def abort(_: object) -> trio.lowlevel.Abort:
            with self._lock:
                if job.state is _State.QUEUED:
                    job.state = _State.DROPPED
                    return trio.lowlevel.Abort.SUCCEEDED
                if job.state is _State.RUNNING and job.interruptible and self._conn is not None:
                    job.interrupted = True
                    self._conn.interrupt()
            return trio.lowlevel.Abort.FAILED

        try:
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        except sqlite3.OperationalError:
            if job.interrupted:
                # Raise the cancellation that interrupted the read, not its error.
                await trio.lowlevel.checkpoint()
            raise
        finally:
            self._outstanding -= 1
        return result

    async def stop(self) -> None:
        await self.run(sqlite3.Connection.close, last=True)
        # The thread returns right after handing back the last job's result.
        self._thread.join()

    def _serve(self) -> None:
        while True:
            _, _, job = self._jobs.get()
            with self._lock:
                if job.state is _State.DROPPED:
                    continue
                job.state = _State.RUNNING
            result = outcome.capture(self._execute, job)
            with self._lock:
                job.state = _State.DONE
            try:
                job.token.run_sync_soon(trio.lowlevel.reschedule, job.task, result)
            except trio.RunFinishedError:
                pass
            if job.last:
                return

    def _execute(self, job: _Job) -> Any:
        if self._conn is None:
            if job.last:
                return None
            self._conn = _connect(self._path)
        # The connection's own busy timeout is 0 (inline jobs must not block
        # the event loop), so the thread waits for other connections' locks here.
        deadline = time.monotonic() + _BUSY_TIMEOUT
        pause = 0.001
        while True:
            try:
                return job.work(self._conn)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or job.interrupted or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """The database is locked by another connection (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "locked" in str(exc)
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _connect(path: str) -> sqlite3.Connection:
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=0, isolation_level=None, cached_statements=512, check_same_thread=False
    )
    try:
        _enable_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        # Content-addressed keys land on random index pages, so each batch
        # dirties many pages; checkpointing (and syncing) every 10k WAL pages
        # rather than SQLite's 1k writes each hot page back once, not ten times.
        conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_CHECKPOINT_PAGES}")
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection) -> None:
    # Switching a file to WAL needs an exclusive lock. When waiting for it
    # could deadlock, SQLite answers "database is locked" at once, without its
    # busy handler; seen with two processes opening one new file together
    # (benchmarks/scaling.py). Retry within the busy timeout.
    deadline = time.monotonic() + _BUSY_TIMEOUT
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


@contextmanager
def _transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    conn.execute(begin)
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection, *, url: str) -> None:
    with _transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        version = row[0] or 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{url}: open: the database has schema version {version}, newer than"
                f" {SCHEMA_VERSION} which this trioplay understands; upgrade trioplay"
            )
        for statements in _MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))


def _rows_in(
    conn: sqlite3.Connection, select: str, params: tuple[Any, ...], keys: Sequence[str]
) -> list[Any]:
    # `select` ends in "IN "; one statement per chunk of keys.
    rows: list[Any] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows += conn.execute(f"{select}({marks})", (*params, *chunk)).fetchall()
    return rows


# -- jobs: each runs on the worker thread, in one transaction ------------------


def _begin_attempt(
    run_id: str, play: str, input_json: str, now: float, conn: sqlite3.Connection
) -> RunRecord:
    with _transaction(conn):
        row = conn.execute(
            "SELECT attempt, created_at FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        attempt, created_at = (row[0] + 1, row[1]) if row is not None else (1, now)
        conn.execute(
            """
            INSERT INTO runs (run_id, play, input_json, status, attempt, created_at, updated_at)
            VALUES (?, ?, ?, 'running', ?, ?, ?)
            ON CONFLICT (run_id) DO UPDATE SET
                play = excluded.play, input_json = excluded.input_json, status = 'running',
                attempt = excluded.attempt, updated_at = excluded.updated_at,
                output_json = NULL, error = NULL, stats_json = NULL
            """,
            (run_id, play, input_json, attempt, created_at, now),
        )
    return RunRecord(run_id, play, input_json, "running", attempt, created_at, now)


def _finish_attempt(params: tuple[Any, ...], conn: sqlite3.Connection) -> bool:
    with _transaction(conn):
        cursor = conn.execute(
            """
            UPDATE runs SET status = ?, updated_at = ?, output_json = ?, error = ?, stats_json = ?
            WHERE run_id = ?
            """,
            params,
        )
    return cursor.rowcount == 1


def _get_run(run_id: str, conn: sqlite3.Connection) -> RunRecord | None:
    row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return RunRecord(*row) if row is not None else None


def _list_runs(limit: int, conn: sqlite3.Connection) -> list[RunRecord]:
    rows = conn.execute(
        f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY updated_at DESC, rowid DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [RunRecord(*row) for row in rows]


def _select_receipts(keys: Sequence[str], conn: sqlite3.Connection) -> dict[str, Receipt]:
    select = f"SELECT {_RECEIPT_COLUMNS} FROM receipts WHERE key IN "
    rows = _rows_in(conn, select, (), list(dict.fromkeys(keys)))
    return {row[0]: Receipt(*row) for row in rows}


def _get_many(keys: Sequence[str], conn: sqlite3.Connection) -> dict[str, Receipt]:
    # A read transaction, so that every chunk sees the same snapshot.
    with _transaction(conn, "BEGIN"):
        return _select_receipts(keys, conn)


class _Fallback(Exception):
    """A batch's fast way does not fit it (a lease not ours, a key not new): roll back."""


def _claim_many(
    requests: Sequence[ClaimRequest],
    owner: str,
    lease_ttl: float,
    now: float,
    fresh: bool,
    conn: sqlite3.Connection,
) -> tuple[list[ClaimOutcome], bool]:
    """Claim ``requests`` atomically; also answers whether the next batch tries ``fresh``.

    With ``fresh``, the batch first tries to claim every key as new
    (:func:`_claim_fresh`), the usual case in a first run and far cheaper
    than reading first. If some key is stored (or repeated), that
    transaction is rolled back (a savepoint would make SQLite journal every
    page the insert changes) and the batch takes the general way in another:
    read the stored receipts, ask :func:`decide_claims`, upsert the claimed
    ones. A batch that finds stored keys (a replay, say) sends the next one
    straight the general way, sparing it an insert bound to fail, until a
    batch finds none of its keys stored.
    """
    if fresh:
        try:
            with _transaction(conn):
                outcomes = _claim_fresh(requests, owner, lease_ttl, now, conn)
                if outcomes is None:
                    raise _Fallback
        except _Fallback:
            pass
        else:
            return outcomes, True
    with _transaction(conn):
        stored = _select_receipts([request.key for request in requests], conn)
        outcomes, claimed = decide_claims(
            requests, stored, owner=owner, lease_ttl=lease_ttl, now=now
        )
        conn.executemany(
            _UPSERT_CLAIMED,
            [
                (
                    r.key,
                    r.operation,
                    r.name,
                    r.status,
                    r.run_id,
                    r.lease_id,
                    r.lease_expires_at,
                    r.owner,
                    r.attempts,
                    r.result_json,
                    r.error_json,
                    r.created_at,
                    r.updated_at,
                    r.completed_at,
                )
                for r in claimed
            ],
        )
    return outcomes, not stored


def _claim_fresh(
    requests: Sequence[ClaimRequest],
    owner: str,
    lease_ttl: float,
    now: float,
    conn: sqlite3.Connection,
) -> list[ClaimOutcome] | None:
    """Claim every request as a new key; None if some key is stored or repeated.

    :func:`decide_claims` claims a key with no receipt whatever the request
    says (attempt 1, created now). So when an insert that skips stored keys
    (one per chunk) writes a row for every request, every key was new and
    distinct, and those rows and outcomes are what :func:`decide_claims`
    would give, with no read and no :class:`Receipt` built. On None, some
    rows may be written: the caller rolls them back.
    """
    lease_expires_at = now + lease_ttl
    ids = lease_ids(len(requests))
    rows = [
        (r.key, r.operation, r.name, r.run_id, lease_id, lease_expires_at, owner, now, now)
        for r, lease_id in zip(requests, ids, strict=True)
    ]
    if _INSERT_FRESH.execute(conn, rows) != len(rows):
        return None
    return [
        Claimed(r.key, lease_id, lease_expires_at, 1)
        for r, lease_id in zip(requests, ids, strict=True)
    ]


def _fenced(sql: str, params: list[tuple[Any, ...]], conn: sqlite3.Connection) -> list[bool]:
    """Whether each of ``params`` matched its lease, for the one-row fenced write ``sql``.

    Usually every lease is ours: one ``executemany``, whose total rowcount
    says so. Otherwise it is rolled back and redone one item at a time,
    whose rowcounts say which leases matched.
    """
    try:
        with _transaction(conn):
            if conn.executemany(sql, params).rowcount != len(params):
                raise _Fallback
    except _Fallback:
        pass
    else:
        return [True] * len(params)
    with _transaction(conn):
        cursor = conn.cursor()
        updated: list[bool] = []
        for item in params:
            cursor.execute(sql, item)
            updated.append(cursor.rowcount == 1)
    return updated


def _count_receipts(run_id: str, conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status, count(*) FROM receipts WHERE run_id = ? GROUP BY status", (run_id,)
    ).fetchall()
    return dict(rows)


def _write_rows(
    run_id: str, dataset: str, rows: Sequence[SheetRow], conn: sqlite3.Connection
) -> None:
    params = [
        (run_id, dataset, r.key, r.position, r.status, r.data_json, r.error, r.attempt)
        for r in rows
    ]
    with _transaction(conn):
        if _INSERT_NEW_ROWS.execute(conn, params) != len(params):
            _UPSERT_ROWS.execute(conn, params)


def _sheet_status(
    run_id: str, dataset: str, keys: Sequence[str], conn: sqlite3.Connection
) -> dict[str, SheetEntry]:
    select = (
        "SELECT key, status, attempt FROM sheet_rows WHERE run_id = ? AND dataset = ? AND key IN "
    )
    with _transaction(conn, "BEGIN"):
        rows = _rows_in(conn, select, (run_id, dataset), list(dict.fromkeys(keys)))
    return {key: SheetEntry(status, attempt) for key, status, attempt in rows}


def _read_rows(
    run_id: str,
    dataset: str,
    status: RowStatus | None,
    after_position: int,
    limit: int,
    conn: sqlite3.Connection,
) -> list[SheetRow]:
    where = "run_id = ? AND dataset = ? AND position > ?"
    params: tuple[Any, ...] = (run_id, dataset, after_position)
    if status is not None:
        where += " AND status = ?"
        params += (status,)
    rows = conn.execute(
        f"SELECT {_SHEET_COLUMNS} FROM sheet_rows WHERE {where} ORDER BY position LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [SheetRow(*row) for row in rows]


def _count_rows(run_id: str, dataset: str, conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status, count(*) FROM sheet_rows WHERE run_id = ? AND dataset = ? GROUP BY status",
        (run_id, dataset),
    ).fetchall()
    return dict(rows)


def _list_datasets(run_id: str, conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT dataset FROM sheet_rows WHERE run_id = ? ORDER BY dataset", (run_id,)
    ).fetchall()
    return [dataset for (dataset,) in rows]


def _page_lease(lease: PageLease) -> tuple[str, str, int, str]:
    return (lease.run_id, lease.dataset, lease.offset, lease.lease_id)


def _claim_page(
    run_id: str,
    dataset: str,
    offset: int,
    decide: Callable[[PageRecord | None], tuple[PageClaim, PageRecord | None]],
    conn: sqlite3.Connection,
) -> PageClaim:
    where = (run_id, dataset, offset)
    with _transaction(conn):
        row = conn.execute(
            f"SELECT {_PAGE_COLUMNS} FROM pages"
            " WHERE run_id = ? AND dataset = ? AND page_offset = ?",
            where,
        ).fetchone()
        answer, claimed = decide(PageRecord(*row) if row is not None else None)
        if claimed is not None:
            conn.execute(
                f"INSERT OR REPLACE INTO pages (run_id, dataset, page_offset, {_PAGE_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *where,
                    claimed.status,
                    claimed.lease_id,
                    claimed.lease_expires_at,
                    claimed.owner,
                    claimed.attempt,
                    claimed.failed,
                    claimed.updated_at,
                ),
            )
    return answer


__all__ = ["SCHEMA_VERSION", "SqliteStore"]
