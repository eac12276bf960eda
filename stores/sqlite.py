"""``sqlite:///path.db``: the embedded default store, on stdlib :mod:`sqlite3`.

One dedicated thread owns the connection and runs jobs in order; Trio tasks
hand it a job and sleep until the result is handed back through the Trio
token, so a call costs two thread hops and never a new thread (a short job
runs inline instead when the thread is idle). The thread lives in
:mod:`trioplay.stores._sqlite_bridge`, the connection (and the bridge of
:meth:`SqliteStore.run_direct`, which runs jobs on the caller's thread
without Trio) in :mod:`trioplay.stores._sqlite_connect`, the jobs (each a
function of the connection, run in one transaction) in
:mod:`trioplay.stores._sqlite_jobs`, the schema and the statements in
:mod:`trioplay.stores._sqlite_sql`; this module holds the store, which
hands each operation to its job. It imports no Trio itself: the thread's
module is imported when the store opens for a run.
"""

from __future__ import annotations

import math
import os
import sqlite3
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl

from trioplay import StoreError

from . import _sqlite_jobs as jobs
from ._rules import decide_page
from ._sql_store import SqlStore
from ._sqlite_connect import DEFAULT_LOCK_TIMEOUT, Direct
from ._sqlite_sql import SCHEMA_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

    import trioplay as tp

    from ._rules import Begin
    from ._sqlite_bridge import Worker
    from ._terms import End, Page, PageTerms, Query

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


class SqliteStore(SqlStore["Worker | Direct"]):
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
        # Whether the next claim_many tries first to claim every key as new (see _claim_many).
        self._fresh_claims = True
        self._direct = False  # open on the caller's thread, without Trio (see run_direct)

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

    def _start(self) -> Worker | Direct:
        if self._direct:
            return Direct(self._path, self._lock_timeout)
        from ._sqlite_bridge import Worker  # Trio: not for run_direct

        return Worker(self._path, self._lock_timeout)

    def run_direct(self, command: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Open the store, await ``command()`` without Trio, close the store; its result.

        For a command line that makes a few store calls and exits (``trioplay
        runs list``, ``send-event``): importing Trio would take longer than
        its queries. Every job runs on this thread at once (a lock another
        connection holds is waited for here, up to ``lock_timeout``), so no
        store call suspends and ``command`` completes in one step, running
        the same store methods, jobs and SQL as a run does. ``command`` may
        await this store's methods and coroutines that await only them;
        anything that suspends (Trio's sleeps and checkpoints, say) raises
        :class:`RuntimeError`.
        """
        if self._bridge is not None:
            raise StoreError(f"{self.url}: run_direct: the store is already open")
        self._direct = True
        try:
            return _to_the_end(self._opened(command))
        finally:
            self._direct = False

    async def _opened(self, command: Callable[[], Coroutine[Any, Any, T]]) -> T:
        await self.open()
        try:
            return await command()
        finally:
            await self.aclose()

    async def _migrate(self) -> None:
        try:
            await self._call("open", partial(jobs.migrate, url=self.url))
        except StoreError as exc:
            # A few stat calls, on the way out of a failed open only.
            problem = path_problem(self._path)
            if problem is None:
                raise
            raise StoreError(f"{self.url}: open: {problem}") from exc.__cause__

    async def _call(
        self,
        operation: str,
        work: Callable[[sqlite3.Connection], T],
        *,
        interruptible: bool = False,
        urgent: bool = False,
        inline: bool | None = None,
    ) -> T:
        """Run ``work`` as one job; short jobs run inline (see :meth:`Worker.run`).

        ``inline`` defaults to ``not interruptible``: reads that may scan a
        whole table run on the thread, where cancelling them interrupts them.
        """
        if inline is None:
            inline = not interruptible
        bridge = self._bridge_for(operation)
        started = bridge.clock()
        try:
            return await bridge.run(work, interruptible=interruptible, urgent=urgent, inline=inline)
        except (sqlite3.Error, OSError, UnicodeEncodeError) as exc:
            # OSError: creating the parent directories; UnicodeEncodeError: text
            # that is not valid UTF-8 (a lone surrogate) cannot be stored.
            elapsed = bridge.clock() - started
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            hint = _HINTS.get(code, "")  # a write the disk refused: nothing of it committed
            raise StoreError(
                f"{self.url}: {operation}: {exc}{hint} (after {elapsed:.2f}s)",
                store=self.url,
                operation=operation,
                elapsed=elapsed,
            ) from exc

    # -- runs ---------------------------------------------------------------
    async def _begin_attempt(self, begin: Begin) -> tp.RunRecord:
        return await self._call("begin_attempt", partial(jobs.begin_attempt, begin))

    async def _wait_job(self, operation: str, *args: Any, read: bool = False) -> Any:
        job = partial(getattr(jobs, operation), *args)
        return await self._call(operation, job, interruptible=read)

    async def _finish_attempt(
        self, run_id: str, status: tp.RunStatus, attempt: int, end: End
    ) -> bool | None:
        params = (status, *end, run_id, attempt)
        return await self._call("finish_attempt", partial(jobs.finish_attempt, params))

    async def get_run(self, run_id: str) -> tp.RunRecord | None:
        return await self._call("get_run", partial(jobs.get_run, run_id), interruptible=True)

    async def list_runs(self, *, limit: int = 50) -> list[tp.RunRecord]:
        return await self._call("list_runs", partial(jobs.list_runs, limit), interruptible=True)

    # -- receipts -----------------------------------------------------------
    async def claim_many(
        self, requests: Sequence[tp.ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[tp.ClaimOutcome]:
        claim = partial(jobs.claim_many, requests, owner, lease_ttl, now, self._fresh_claims)
        outcomes, self._fresh_claims = await self._call("claim_many", claim)
        return outcomes

    async def heartbeat_many(
        self, leases: Sequence[tp.Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        renew = partial(jobs.heartbeat_many, leases, lease_ttl, now)
        return await self._call("heartbeat_many", renew, urgent=True)

    async def complete_many(self, items: Sequence[tp.Completion], *, now: float) -> list[bool]:
        small = sum(len(item.result_json) for item in items) <= _INLINE_BYTES
        return await self._call(
            "complete_many", partial(jobs.complete_many, items, now), inline=small
        )

    async def fail_many(self, items: Sequence[tp.Failure], *, now: float) -> list[bool]:
        return await self._call("fail_many", partial(jobs.fail_many, items, now))

    async def release_many(self, leases: Sequence[tp.Lease], *, now: float) -> list[bool]:
        return await self._call("release_many", partial(jobs.release_many, leases, now))

    async def get_many(self, keys: Sequence[str]) -> list[tp.Receipt | None]:
        found = await self._call("get_many", partial(jobs.get_many, keys), interruptible=True)
        return [found.get(key) for key in keys]

    async def count_receipts(self, run_id: str) -> dict[str, int]:
        return await self._call(
            "count_receipts", partial(jobs.count_receipts, run_id), interruptible=True
        )

    # -- recorded failures (FailureStore) ------------------------------------
    async def list_failed_receipts(
        self, run_id: str, *, after_key: str = "", limit: int = 1000
    ) -> list[tp.Receipt]:
        listed = partial(jobs.list_failed_receipts, run_id, after_key, limit)
        return await self._call("list_failed_receipts", listed, interruptible=True)

    async def forget_failed_receipts(
        self, run_id: str, keys: Sequence[str], *, now: float
    ) -> list[str]:
        forget = partial(jobs.forget_failed_receipts, run_id, keys, now)
        return await self._call("forget_failed_receipts", forget)

    # -- dataset sheets -----------------------------------------------------
    async def write_terminal_rows(
        self,
        run_id: str,
        dataset: str,
        rows: Sequence[tp.SheetRow],
        *,
        leases: Sequence[tp.PageLease | None] = (),
    ) -> list[tp.SheetWrite]:
        # A large batch is written on the thread, so the event loop goes on meanwhile.
        small = sum(len(row.data_json) for row in rows) <= _INLINE_BYTES
        return await self._call(
            "write_terminal_rows",
            partial(jobs.write_terminal_rows, run_id, dataset, rows, leases),
            inline=small,
        )

    async def sheet_status(
        self, run_id: str, dataset: str, keys: Sequence[str]
    ) -> dict[str, tp.SheetEntry]:
        return await self._call(
            "sheet_status",
            partial(jobs.sheet_status, run_id, dataset, keys),
            interruptible=True,
            inline=len(keys) <= _INLINE_KEYS,
        )

    async def _read_rows(self, run_id: str, dataset: str, query: Query) -> list[tp.SheetRow]:
        status, after_position, limit = query
        return await self._call(
            "read_rows",
            partial(jobs.read_rows, run_id, dataset, status, after_position, limit),
            interruptible=True,
        )

    async def count_rows(self, run_id: str, dataset: str) -> dict[str, int]:
        return await self._call(
            "count_rows", partial(jobs.count_rows, run_id, dataset), interruptible=True
        )

    async def list_datasets(self, run_id: str) -> list[str]:
        return await self._call(
            "list_datasets", partial(jobs.list_datasets, run_id), interruptible=True
        )

    async def run_leases(self, run_ids: Sequence[str]) -> dict[str, tp.RunLeases]:
        return await self._call("run_leases", partial(jobs.run_leases, run_ids), interruptible=True)

    # -- page leases --------------------------------------------------------
    async def _claim_page(self, page: Page, terms: PageTerms) -> tp.PageClaim:
        claim = partial(jobs.claim_page, *page, partial(decide_page, **terms))
        return await self._call("claim_page", claim)

    async def heartbeat_pages(
        self, leases: Sequence[tp.PageLease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        renew = partial(jobs.heartbeat_pages, leases, lease_ttl, now)
        return await self._call("heartbeat_pages", renew, urgent=True)

    async def finish_page(
        self, lease: tp.PageLease, *, attempt: int, failed: int, now: float
    ) -> bool:
        finish = partial(jobs.finish_page, lease, attempt, failed, now)
        return await self._call("finish_page", finish)

    async def release_page(self, lease: tp.PageLease, *, now: float) -> bool:
        return await self._call("release_page", partial(jobs.release_page, lease, now))


def _to_the_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, with no event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError("a store command run without Trio (run_direct) awaited something else")


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


__all__ = ["SCHEMA_VERSION", "SqliteStore", "path_problem"]
