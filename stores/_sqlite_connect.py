"""The SQLite store's connection, and the bridge that runs jobs without Trio.

What here needs no Trio, so that a command which only reads or writes a
little (``trioplay runs list``, ``send-event``) can use the store without
importing Trio (about a third of such a command's start, docs/cli.md):
opening a connection (WAL mode, the file it opened remembered), waiting for
another connection's lock (:func:`run_waiting`, which the store's thread
uses too), and :class:`Direct`, the bridge of
:meth:`trioplay.stores.sqlite.SqliteStore.run_direct`. The Trio side, the
thread that owns a connection while a run goes on, is
:mod:`trioplay.stores._sqlite_bridge`.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

DEFAULT_LOCK_TIMEOUT = 5.0
_WAL_CHECKPOINT_PAGES = 10_000


class _LockTimeout(sqlite3.OperationalError):
    """Another connection held the database's lock for longer than ``lock_timeout``."""

    def __init__(self, waited: float, lock_timeout: float) -> None:
        super().__init__(
            f"the database is locked by another connection: waited {waited:.2f}s for its"
            f" lock (lock_timeout={lock_timeout:g}s); is another process writing to it?"
        )
        self.waited = waited


class _FileReplaced(sqlite3.OperationalError):
    """The database file was deleted or replaced under an open connection."""

    def __init__(self, path: str, now: str) -> None:
        super().__init__(
            f"the database file {path} was deleted or replaced while the run was writing to"
            f" it ({now}): what it wrote since went to a file nobody can open any more, so"
            " the run stops here; the same command starts over on whatever file is there now"
        )


class _Connection(sqlite3.Connection):
    """A connection that remembers the file it opened (its device and inode).

    A database file deleted (its folder removed, say) or replaced by another
    under an open connection does not stop SQLite: it goes on writing to the
    unlinked file, and a run completes "successfully" into a database that
    is gone. :func:`check_file` compares the file at the path with the one
    opened, at the start of every write transaction (one ``stat``).
    """

    path: str = ""
    opened: tuple[int, int] | None = None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def check_file(conn: sqlite3.Connection) -> None:
    """Raise :class:`_FileReplaced` if ``conn``'s file is no longer the one at its path."""
    if not isinstance(conn, _Connection) or conn.opened is None:
        return
    now = _identity(conn.path)
    if now != conn.opened:
        raise _FileReplaced(conn.path, "it is gone" if now is None else "another file is there")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """The database is locked by another connection (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "locked" in str(exc)
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def connect(path: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> sqlite3.Connection:
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(
        path,
        timeout=0,
        isolation_level=None,
        cached_statements=512,
        check_same_thread=False,
        factory=_Connection,
    )
    try:
        _enable_wal(conn, lock_timeout)
        conn.execute("PRAGMA synchronous = NORMAL")
        # Content-addressed keys land on random index pages, so each batch
        # dirties many pages; checkpointing (and syncing) every 10k WAL pages
        # rather than SQLite's 1k writes each hot page back once, not ten times.
        conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_CHECKPOINT_PAGES}")
        if path not in ("", ":memory:"):  # WAL mode has created the file
            conn.path, conn.opened = path, _identity(path)
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, lock_timeout: float) -> None:
    # Switching a file to WAL needs an exclusive lock. When waiting for it
    # could deadlock, SQLite answers "database is locked" at once, without its
    # busy handler; seen with two processes opening one new file together
    # (benchmarks/scaling.py). Retry within the lock timeout.
    started = time.monotonic()
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            waited = time.monotonic() - started
            if waited >= lock_timeout:
                raise _LockTimeout(waited, lock_timeout) from exc
            time.sleep(0.02)


def run_waiting(
    conn: sqlite3.Connection,
    work: Callable[[sqlite3.Connection], T],
    lock_timeout: float,
    given_up: Callable[[], bool],
) -> T:
    """``work(conn)``, again while another connection holds the lock, up to ``lock_timeout``.

    The connection's own busy timeout is 0 (inline jobs must not block the
    event loop), so waiting for other connections' locks happens here: on
    the store's thread, which stops waiting once ``given_up()`` (its caller
    was cancelled), or on the caller's thread of a :class:`Direct` bridge.
    """
    started = time.monotonic()
    pause = 0.001
    while True:
        try:
            return work(conn)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or given_up():
                raise
            waited = time.monotonic() - started
            if waited >= lock_timeout:
                raise _LockTimeout(waited, lock_timeout) from exc
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class Direct:
    """A bridge that runs each job on the caller's thread, at once: no thread, no Trio.

    A job that finds the database locked by another connection (a run
    writing to it) sleeps and tries again, up to the lock timeout, as the
    store's thread would; nothing else can run meanwhile, which is what a
    one-shot command wants. Its :meth:`run` never suspends, so a coroutine
    of store calls on it completes in one step
    (:meth:`~trioplay.stores.sqlite.SqliteStore.run_direct`).
    """

    clock = staticmethod(time.monotonic)

    def __init__(self, path: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self._path = path
        self._lock_timeout = lock_timeout
        self._conn: sqlite3.Connection | None = None

    async def run(self, work: Callable[[sqlite3.Connection], T], **_: Any) -> T:
        """``work(conn)`` here and now (the worker's scheduling options do not apply)."""
        if self._conn is None:  # as the thread does: the first job (open) connects
            self._conn = connect(self._path, self._lock_timeout)
        return run_waiting(self._conn, work, self._lock_timeout, lambda: False)

    async def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


__all__ = ["DEFAULT_LOCK_TIMEOUT", "Direct", "check_file", "connect", "is_busy", "run_waiting"]
