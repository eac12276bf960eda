"""``sqlite:///path.db``: the embedded default store, on stdlib :mod:`sqlite3`.

One dedicated thread owns the connection and runs jobs in order; Trio tasks
hand it a job and sleep until the result is handed back through the Trio
token, so a call costs two thread hops and never a new thread (a short job
runs inline instead when the thread is idle). The thread lives in
:mod:`trioplay.stores._sqlite_worker`, the schema and the statements in
:mod:`trioplay.stores._sqlite_sql`; this module holds the store and its
jobs, each a function of the connection run in one transaction.
"""

from __future__ import annotations

import math
import os
import sqlite3
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl

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

from ._columns import (
    PAGE_COLUMNS,
    RECEIPT_COLUMNS,
    RUN_COLUMNS,
    SHEET_COLUMNS,
    page_values,
    receipt_values,
)
from ._rules import PageRecord, decide_claims, decide_page, lease_ids
from ._sqlite_sql import (
    _COMPLETE,
    _FAIL,
    _FINISH_PAGE,
    _HEARTBEAT,
    _HEARTBEAT_PAGE,
    _INSERT_FRESH,
    _INSERT_NEW_ROWS,
    _MIGRATIONS,
    _RELEASE,
    _RELEASE_PAGE,
    _UPSERT_CLAIMED,
    _UPSERT_ROWS,
    SCHEMA_VERSION,
    _rows_in,
)
from ._sqlite_worker import DEFAULT_LOCK_TIMEOUT, _Worker, check_file

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from trioplay import RowStatus, RunStatus

T = TypeVar("T")

_HINTS = {
    sqlite3.SQLITE_FULL: "; the disk is full (or the database reached its size limit):"
    " free space, then run the same command again",
    sqlite3.SQLITE_IOERR: "; the operating system refused a read or write of the file:"
    " a file-size limit (ulimit -f), a failing disk, or a file system that went away",
}
"""What a full disk and an I/O error each ask of the operator (by SQLite's primary code)."""

# Jobs at most this large run inline, on the Trio thread (a few ms at most);
# larger payloads (sheet rows, results) are written on the worker thread.
_INLINE_BYTES = 1 << 20
_INLINE_KEYS = 4096


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
    to ``lock_timeout`` seconds (default 5; ``sqlite:///path.db?lock_timeout=S``)
    for a lock held by another, then fails the call with a
    :class:`trioplay.StoreError` saying how long it waited; a cancelled call
    stops waiting at once. :meth:`aclose` stops the thread and
    closes the file; a store that is never closed keeps both until the
    process exits.

    Payload columns are stored as the text they are given, never parsed.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    ) -> None:
        if not (math.isfinite(lock_timeout) and lock_timeout >= 0):
            raise ValueError(
                f"lock_timeout must be finite seconds of at least 0, got {lock_timeout!r}"
            )
        self._path = os.fspath(path)
        self._lock_timeout = lock_timeout
        self._worker: _Worker | None = None
        # Whether the next claim_many tries first to claim every key as new (see _claim_many).
        self._fresh_claims = True

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """The store for ``url``; raises ``ValueError`` if it is not a SQLite URL."""
        prefix = "sqlite:///"
        path, _, query = url[len(prefix) :].partition("?")
        if not url.startswith(prefix) or not path:
            raise ValueError(
                f"bad SQLite store URL {url!r}: use sqlite:///relative.db,"
                " sqlite:////absolute/path.db or sqlite:///:memory:"
            )
        options: dict[str, float] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name != "lock_timeout":
                raise ValueError(
                    f"unknown option {name!r} in the SQLite store URL {url!r}: the one"
                    " option is lock_timeout (seconds)"
                )
            try:
                options[name] = float(value)
            except ValueError:
                raise ValueError(f"bad lock_timeout {value!r} in a SQLite URL") from None
        return cls(path, **options)

    @property
    def url(self) -> str:
        return f"sqlite:///{self._path}"

    @property
    def lock_timeout(self) -> float:
        """Seconds a call waits for a lock another connection holds."""
        return self._lock_timeout

    async def open(self) -> None:
        if self._worker is not None:
            raise StoreError(f"{self.url}: open: the store is already open")
        self._worker = _Worker(self._path, self._lock_timeout)
        try:
            await self._call("open", partial(_migrate, url=self.url))
        except StoreError as exc:
            await self.aclose()
            # A few stat calls, on the way out of a failed open only.
            problem = path_problem(self._path)
            if problem is None:
                raise
            raise StoreError(f"{self.url}: open: {problem}") from exc.__cause__
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
        started = trio.current_time()
        try:
            return await worker.run(work, interruptible=interruptible, urgent=urgent, inline=inline)
        except (sqlite3.Error, OSError, UnicodeEncodeError) as exc:
            # OSError: creating the parent directories; UnicodeEncodeError: text
            # that is not valid UTF-8 (a lone surrogate) cannot be stored.
            elapsed = trio.current_time() - started
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            hint = _HINTS.get(code, "")  # a write the disk refused: nothing of it committed
            raise StoreError(
                f"{self.url}: {operation}: {exc}{hint} (after {elapsed:.2f}s)",
                store=self.url,
                operation=operation,
                elapsed=elapsed,
            ) from exc

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


def path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why SQLite cannot keep a database at ``path``, and what to do instead.

    ``None`` when nothing visible is wrong. SQLite itself says only "unable
    to open database file"; :meth:`SqliteStore.open` asks this when opening
    fails, and the command line asks it before it starts a run.
    """
    shown = os.fspath(path)
    if shown == ":memory:":
        return None
    target = Path(shown)
    if target.is_dir():
        return (
            f"{shown} is a directory; name a database file, such as "
            f"sqlite:///{target / 'trioplay.db'}"
        )
    # The nearest existing folder is where the missing ones, the file and its -wal go.
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return (
            f"{folder} is a file, not a directory, so {shown} cannot be created below it; "
            f"name a path in a directory, or move {folder} away"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        why = "is on a read-only filesystem" if read_only else "is not writable"
        return (
            f"the directory {folder} {why}; SQLite creates the database and its -wal and "
            "-shm files there: name a path in a writable directory"
        )
    return None


@contextmanager
def _transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    conn.execute(begin)
    try:
        check_file(conn)  # never write on into a file that was deleted or replaced
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


# -- jobs: each runs on the worker thread, in one transaction ------------------


def _begin_attempt(
    run_id: str, play: str, input_json: str, now: float, conn: sqlite3.Connection
) -> RunRecord:
    with _transaction(conn):
        stored = _get_run(run_id, conn)
        if stored is not None and (stored.play, stored.input_json) != (play, input_json):
            return stored  # another play or input: the caller refuses the run id
        attempt, created_at = (stored.attempt + 1, stored.created_at) if stored else (1, now)
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
    row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return RunRecord(*row) if row is not None else None


def _list_runs(limit: int, conn: sqlite3.Connection) -> list[RunRecord]:
    rows = conn.execute(
        f"SELECT {RUN_COLUMNS} FROM runs ORDER BY updated_at DESC, rowid DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [RunRecord(*row) for row in rows]


def _select_receipts(keys: Sequence[str], conn: sqlite3.Connection) -> dict[str, Receipt]:
    select = f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE key IN "
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
        conn.executemany(_UPSERT_CLAIMED, [receipt_values(r) for r in claimed])
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
        f"SELECT {SHEET_COLUMNS} FROM sheet_rows WHERE {where} ORDER BY position LIMIT ?",
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
            f"SELECT {PAGE_COLUMNS} FROM pages"
            " WHERE run_id = ? AND dataset = ? AND page_offset = ?",
            where,
        ).fetchone()
        answer, claimed = decide(PageRecord(*row) if row is not None else None)
        if claimed is not None:
            conn.execute(
                f"INSERT OR REPLACE INTO pages (run_id, dataset, page_offset, {PAGE_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*where, *page_values(claimed)),
            )
    return answer


__all__ = ["SCHEMA_VERSION", "SqliteStore"]
