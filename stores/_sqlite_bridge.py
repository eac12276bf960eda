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
import queue
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import outcome
import trio

from ._bridge import JobState, advance, drop, hand_back
from ._sqlite_connect import DEFAULT_LOCK_TIMEOUT, connect, is_busy, run_waiting

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


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

    clock = staticmethod(trio.current_time)
    """The clock a store call's elapsed time is read on (the run's, virtual in tests)."""

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
        locked by another connection moves to the thread, which waits. A
        caller cancelled already does not start its job.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if inline and not self._outstanding and self._conn is not None:
            # The thread is idle, so the connection is ours to use here.
            try:
                done = work(self._conn)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
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
            if job.interrupted or (job.cancelled and is_busy(exc)):
                # Raise the cancellation that interrupted the read (or the
                # wait for a lock: the job did nothing), not its error.
                await trio.lowlevel.checkpoint()
            raise
        finally:
            self._outstanding -= 1
        return result

    async def stop(self) -> None:
        """Close the connection and end the thread (shielded: a store is closed whole)."""
        with trio.CancelScope(shield=True):
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
        # Another connection's lock is waited for here, on the thread, and
        # no longer once the job's caller is cancelled.
        return run_waiting(
            self._conn, job.work, self._lock_timeout, lambda: job.interrupted or job.cancelled
        )
