"""The SQLite store's thread: one connection, its jobs run in order, some inline.

One dedicated thread owns the connection and runs jobs in order; Trio tasks
hand it a job and sleep until the result is handed back through the Trio
token, so a call costs two thread hops and never a new thread. A short job
runs inline instead, on the Trio thread, when the thread is idle (see
:meth:`Worker.run`).

Ctrl-C: :meth:`Worker.run` is protected from ``KeyboardInterrupt``
(``trio.lowlevel.enable_ki_protection``), inline job included. Trio raises
a ``KeyboardInterrupt`` where the signal lands unless the code there is
protected; landing inside an inline job, it would leave the connection in
the middle of a transaction ("cannot start a transaction within a
transaction" for every later job), and landing between handing a job to the
thread and waiting for it, it would leave a result addressed to a task that
no longer waits (a ``TrioInternalError``). Protected, a store call
interrupted by Ctrl-C either never started its job or returns its result;
Trio delivers the ``KeyboardInterrupt`` at the next checkpoint of the main
task that can take it (a queued job is dropped then, a running one is waited for).
"""

from __future__ import annotations

import itertools
import os
import queue
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import outcome
import trio

from ._bridge import JobState, advance, drop, hand_back

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


@attrs.define(eq=False)
class _Job:
    work: Callable[[sqlite3.Connection], Any]
    task: trio.lowlevel.Task
    token: trio.lowlevel.TrioToken
    interruptible: bool
    last: bool = False
    state: JobState = JobState.QUEUED
    interrupted: bool = False
    cancelled: bool = False  # its caller was cancelled while it ran


class Worker:
    """The thread that owns one connection and runs jobs on it, one at a time, in order.

    Urgent jobs (lease renewals) go ahead of the queue: a renewal stuck
    behind a backlog of batch writes would lose a lease its owner still holds.
    ``_lock`` guards job states, so a job is either dropped before it starts
    or runs to the end, and an interrupt only ever hits the job it was meant for.
    """

    def __init__(self, path: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self._path = path
        self._lock_timeout = lock_timeout
        self._jobs: queue.PriorityQueue[tuple[bool, int, _Job]] = queue.PriorityQueue()
        self._submitted = itertools.count()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._outstanding = 0  # jobs handed to the thread and not back (Trio thread only)
        self._thread = threading.Thread(
            target=self._serve, name=f"trioplay-sqlite {path}", daemon=True
        )
        self._thread.start()

    @trio.lowlevel.enable_ki_protection
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
                if drop(job):
                    return trio.lowlevel.Abort.SUCCEEDED
                if job.state is JobState.RUNNING:
                    # A job waiting for another connection's lock stops waiting.
                    job.cancelled = True
                    if job.interruptible and self._conn is not None:
                        job.interrupted = True
                        self._conn.interrupt()
            return trio.lowlevel.Abort.FAILED

        try:
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        except sqlite3.OperationalError as exc:
            if job.interrupted or (job.cancelled and _is_busy(exc)):
                # Raise the cancellation that interrupted the read (or the
                # wait for a lock: the job did nothing), not its error.
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
            if not advance(self._lock, job, JobState.RUNNING):
                continue
            result = outcome.capture(self._execute, job)
            with self._lock:
                job.state = JobState.DONE
            hand_back(job.token, trio.lowlevel.reschedule, job.task, result)
            if job.last:
                return

    def _execute(self, job: _Job) -> Any:
        if self._conn is None:
            if job.last:
                return None
            self._conn = connect(self._path, self._lock_timeout)
        # The connection's own busy timeout is 0 (inline jobs must not block
        # the event loop), so the thread waits for other connections' locks
        # here, up to lock_timeout, and stops waiting when its caller is cancelled.
        started = time.monotonic()
        pause = 0.001
        while True:
            try:
                return job.work(self._conn)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or job.interrupted or job.cancelled:
                    raise
                waited = time.monotonic() - started
                if waited >= self._lock_timeout:
                    raise _LockTimeout(waited, self._lock_timeout) from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
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
