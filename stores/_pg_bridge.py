"""The PostgreSQL store's Trio bridge: threads that each own one connection.

psycopg's async connection runs on asyncio only. Two bridges were weighed:

- trio-asyncio: the user's whole program would have to run inside
  ``trio_asyncio.open_loop()`` (a library must not ask that of its callers),
  every call would cross two event loops, and turning a Trio cancellation into
  a server-side cancel would go through asyncio task cancellation and
  psycopg's reaction to it, which is hard to bound.
- psycopg's synchronous API with one dedicated thread per connection (chosen).
  No asyncio loop anywhere, a connection is only ever touched by its own
  thread, and cancellation is explicit: the Trio side asks the server to
  cancel (libpq's cancel protocol, ``Connection.cancel_safe``, the one
  connection method psycopg documents as safe from another thread) and waits,
  shielded and bounded, for the thread to come back.

A store holds a small pool of such *workers* (``pool_size``, default 4). A call
takes an idle worker (callers queue in FIFO order when all are busy), hands it
one *job* — a function of the connection, one transaction — and sleeps until
the worker hands the outcome back through the Trio token. Cancellation:

- while waiting for a worker, or while the job is still queued on it: nothing
  happened, the call raises ``Cancelled`` at once;
- while the job runs: the server is asked to cancel it and the caller waits up
  to ``cancel_timeout`` (default 1 s) for the worker. A cancelled statement
  rolls its transaction back, so the call happened not at all; if the job
  finished before the cancel reached it, it happened whole and its result is
  returned (the caller's cancellation is then delivered at its next
  checkpoint, as for any Trio operation whose abort came too late). A worker
  whose job was cancelled closes its connection, so that a cancel signal
  arriving late can never hit the next job; a worker that does not come back
  within the bound (a dead network) is abandoned and replaced.

A connection that breaks (the server restarted, a backend was terminated, the
network dropped) fails the call that was using it with a ``StoreError`` saying
``connection lost``; the worker opens a new connection for its next job. An
idle connection is checked before each job (a readable socket on an idle
connection means the server has hung up), so a restart costs no failed call
when the pool was idle. A write whose connection broke before the server
confirmed its ``COMMIT`` is reported as failed, never as done.
"""

from __future__ import annotations

import enum
import queue
import select
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import outcome
import psycopg
import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from psycopg.rows import TupleRow

    _Conn = psycopg.Connection[TupleRow]

T = TypeVar("T")


class _ConnectionLost(Exception):
    """The connection broke during a job (wraps psycopg's error)."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(_one_line(cause))
        self.cause = cause


class _Unreachable(_ConnectionLost):
    """No connection could be opened for a job."""


class _Closed(Exception):
    """The pool was closed before a worker was free for the call."""


class _State(enum.Enum):
    QUEUED = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()
    DROPPED = enum.auto()


@attrs.define(eq=False)
class _Job:
    work: Callable[[_Conn], Any]
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.Factory(trio.Event)
    state: _State = _State.QUEUED
    cancel_requested: bool = False
    result: outcome.Outcome[Any] | None = None


class _Worker:
    """A thread that owns one connection (opened lazily) and runs jobs on it in order.

    ``_lock`` guards job states: a job is either dropped before it starts or
    runs to its end. ``_conn_lock`` guards the connection's lifetime against a
    cancel request in flight from another thread: the connection is never
    closed under ``cancel_safe``.
    """

    def __init__(self, connect: Callable[[], _Conn], name: str) -> None:
        self._connect = connect
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._conn_lock = threading.Lock()
        self._conn: _Conn | None = None
        # Set by the Trio side: this worker takes no more jobs.
        self.retired = False
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Callable[[_Conn], Any]) -> _Job:
        job = _Job(work, trio.lowlevel.current_trio_token())
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """Close the connection and end the thread once the current job (if any) is done."""
        self.retired = True
        self._jobs.put(None)

    def drop(self, job: _Job) -> bool:
        """Withdraw ``job`` if it has not started; True if it never will."""
        with self._lock:
            if job.state is _State.QUEUED:
                job.state = _State.DROPPED
                return True
            return False

    def cancel(self, job: _Job, timeout: float) -> None:
        """Ask the server to cancel ``job`` if it is running (blocks: call from a thread)."""
        with self._conn_lock:
            with self._lock:
                if job.state is not _State.RUNNING:
                    return
                job.cancel_requested = True
                conn = self._conn
            if conn is None:
                return
            try:
                conn.cancel_safe(timeout=timeout)
            except psycopg.Error:
                pass  # the caller's wait for the job is bounded anyway

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            # Connecting is not part of the job: a caller cancelled meanwhile
            # drops a job that never started.
            ready = outcome.capture(self._ready)
            with self._lock:
                if job.state is _State.DROPPED:
                    continue
                job.state = _State.RUNNING
            if isinstance(ready, outcome.Value):
                result = outcome.capture(self._execute, job, ready.value)
            else:
                result = ready
            with self._lock:
                job.state = _State.DONE
                discard = job.cancel_requested
            if discard or not _idle(self._conn):
                # A late cancel must never hit the next job; a broken or
                # mid-transaction connection is of no further use.
                outcome.capture(self._close)
            job.result = result
            try:
                job.token.run_sync_soon(job.done.set)
            except trio.RunFinishedError:
                pass
        outcome.capture(self._close)

    def _execute(self, job: _Job, conn: _Conn) -> Any:
        try:
            return job.work(conn)
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise _ConnectionLost(exc) from exc
            raise

    def _ready(self) -> _Conn:
        conn = self._conn
        if conn is not None and _healthy(conn):
            return conn
        self._close()
        try:
            conn = self._connect()
        except psycopg.Error as exc:
            raise _Unreachable(exc) from exc
        with self._conn_lock:
            self._conn = conn
        return conn

    def _close(self) -> None:
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _idle(conn: _Conn | None) -> bool:
    return (
        conn is not None
        and not conn.closed
        and not conn.broken
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


def _healthy(conn: _Conn) -> bool:
    """Whether an idle connection is still there.

    Between jobs the server has nothing to say, so a readable socket means it
    hung up (a terminated backend, a restart, a proxy that cut us off).
    """
    if not _idle(conn):
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


class _Pool:
    """The workers, each either idle in a channel or held by exactly one call."""

    def __init__(
        self, size: int, new_worker: Callable[[], _Worker], *, cancel_timeout: float
    ) -> None:
        self._new_worker = new_worker
        self._cancel_timeout = cancel_timeout
        self._send, self._receive = trio.open_memory_channel[_Worker](size)
        self._workers: list[_Worker] = []
        self._closed = False
        for _ in range(size):
            self._send.send_nowait(self._add())

    def _add(self) -> _Worker:
        worker = self._new_worker()
        self._workers.append(worker)
        return worker

    @trio.lowlevel.enable_ki_protection
    async def run(self, work: Callable[[_Conn], T]) -> T:
        """``work(conn)`` on the next idle worker; see the module docstring for cancellation.

        Raises :class:`_Closed` if the pool closes before a worker is free,
        and otherwise whatever the job raised. Protected from Ctrl-C: a
        ``KeyboardInterrupt`` never lands between taking a worker and giving
        it back (it comes at a checkpoint; the job itself runs on the
        worker's thread, out of its reach).
        """
        try:
            worker = await self._receive.receive()
        except (trio.ClosedResourceError, trio.EndOfChannel):
            raise _Closed from None
        try:
            job = worker.submit(work)
            try:
                await job.done.wait()
            except trio.Cancelled:
                if not await self._interrupt(worker, job):
                    raise
                # The job finished before the cancel reached the server, so it
                # happened whole: hand back what it did. The caller's scope is
                # still cancelled and raises at its next checkpoint.
        finally:
            self._release(worker)
        assert job.result is not None
        return cast("T", job.result.unwrap())

    async def _interrupt(self, worker: _Worker, job: _Job) -> bool:
        """Stop ``job`` after its caller was cancelled; True if it had succeeded anyway."""
        if worker.drop(job):
            return False
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._cancel_timeout
            await trio.to_thread.run_sync(
                partial(worker.cancel, job, self._cancel_timeout), abandon_on_cancel=True
            )
            await job.done.wait()
        if scope.cancelled_caught:
            worker.retired = True
            return False
        return isinstance(job.result, outcome.Value)

    def _release(self, worker: _Worker) -> None:
        if self._closed:
            worker.stop()
            return
        if worker.retired:
            # Abandoned mid-job: it ends by itself once its blocking call returns.
            worker.stop()
            self._workers.remove(worker)
            worker = self._add()
        self._send.send_nowait(worker)

    async def aclose(self, *, timeout: float) -> None:
        self._closed = True
        self._send.close()
        self._receive.close()
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()

        def join() -> None:
            for worker in workers:
                worker.thread.join()

        # Idle workers end at once; one stuck on a dead network is left to
        # its daemon thread rather than hold up the caller.
        with trio.move_on_after(timeout):
            await trio.to_thread.run_sync(join, abandon_on_cancel=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
