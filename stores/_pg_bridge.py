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
the worker hands the outcome back through the Trio token.

Every call has a deadline (``call_timeout``, from the moment it is made:
waiting for a worker, connecting and running the job all count). A silent
database (a network that drops everything, a proxy that forwards nothing)
acknowledges nothing that libpq could notice in time, so this deadline is
kept here, on the Trio side: when it passes, the call fails at once with
:class:`NoAnswer`, and its worker is abandoned and replaced. An abandoned
worker asks the server to cancel its job (bounded by ``cancel_timeout``, in a
thread of its own) and then shuts its connection's socket down, which wakes
its thread with an error: the connection is discarded, never reused.

Cancellation:

- while waiting for a worker, or while the job is still queued on it or
  waiting for its connection to open: nothing happened, the call raises
  ``Cancelled`` at once (a worker caught opening a connection is replaced);
- while the job runs: the server is asked to cancel it and the caller waits up
  to ``cancel_timeout`` (default 0.25 s) for the worker. A cancelled statement
  rolls its transaction back, so the call happened not at all; if the job
  finished before the cancel reached it, it happened whole and its result is
  returned (the caller's cancellation is then delivered at its next
  checkpoint, as for any Trio operation whose abort came too late). A worker
  whose job was cancelled closes its connection, so that a cancel signal
  arriving late can never hit the next job; a worker that does not come back
  within the bound (a dead network) is abandoned as above.

A connection that breaks (the server restarted, a backend was terminated, the
network dropped) fails the call that was using it with ``ConnectionLost``;
the worker opens a new connection for its next job. An idle connection is
checked before each job (a readable socket on an idle connection means the
server has hung up), so a restart costs no failed call when the pool was idle.

Whether a failed write committed: a job marks the moment it sends what
commits (:func:`transaction` before its ``COMMIT``, :func:`commit_point` before
a write in autocommit mode) and the moment the commit is confirmed. A call
that failed before the first mark committed nothing (the server rolls back
an open transaction whose connection is gone); one that failed between the
two may or may not have committed (``commit == "sent"``), and says so.
"""

from __future__ import annotations

import os
import queue
import select
import socket
import threading
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import attrs
import outcome
import psycopg
import trio

from ._bridge import JobState, advance, drop, hand_back, one_line

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from psycopg.rows import TupleRow

    Conn = psycopg.Connection[TupleRow]

T = TypeVar("T")


# Where a job got with its commit: nothing sent yet, sent and unconfirmed, confirmed.
Commit = Literal["sent", "done"] | None


class ConnectionLost(Exception):
    """The connection broke during a job (wraps psycopg's error)."""

    def __init__(self, cause: psycopg.Error, commit: Commit = None) -> None:
        super().__init__(one_line(cause))
        self.cause = cause
        self.commit = commit


class Unreachable(ConnectionLost):
    """No connection could be opened for a job."""


class SetupFailed(Exception):
    """A connection was made, but its setup statement failed (wraps psycopg's error)."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(one_line(cause))
        self.cause = cause


class NoAnswer(Exception):
    """The call's deadline passed; ``stage`` says where it was, ``commit`` how far it got."""

    def __init__(self, stage: Literal["queued", "connecting", "running"], commit: Commit) -> None:
        super().__init__(stage)
        self.stage = stage
        self.commit = commit


class Closed(Exception):
    """The pool was closed before a worker was free for the call."""


@attrs.define(eq=False)
class Job:
    work: Callable[[Conn], Any]
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.Factory(trio.Event)
    state: JobState = JobState.QUEUED
    cancel_requested: bool = False
    commit: Commit = None
    # Set when its caller gave up on it: from then on it may not commit.
    abandoned: bool = False
    guard: threading.Lock = attrs.Factory(threading.Lock)  # commit and abandoned
    result: outcome.Outcome[Any] | None = None

    def give_up(self) -> Commit:
        """Forbid the job to commit from now on; how far it got."""
        with self.guard:
            self.abandoned = True
            return self.commit


# The job the calling worker thread runs now (for commit_point).
_running = threading.local()


class Abandoned(Exception):
    """A job was about to commit after its caller had given up on it."""


def commit_point() -> None:
    """Mark, from a job, that it is about to send what commits (see the module docstring).

    Raises :class:`Abandoned` instead once the job's caller has given up: a
    job abandoned before its commit never commits, so its caller can say so.
    """
    job: Job | None = getattr(_running, "job", None)
    if job is None:
        return
    with job.guard:
        if job.abandoned:
            raise Abandoned
        if job.commit is None:
            job.commit = "sent"


def committed() -> None:
    """Mark, from a job, that the server confirmed its commit."""
    job: Job | None = getattr(_running, "job", None)
    if job is not None:
        job.commit = "done"


@contextmanager
def transaction(conn: Conn) -> Iterator[None]:
    """``conn.transaction()``, marking its ``COMMIT`` as sent, then as confirmed.

    In pipeline mode the ``COMMIT`` is confirmed only when the pipeline
    syncs: the job calls :func:`committed` itself after that.
    """
    with conn.transaction():
        yield
        commit_point()
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        committed()


class Worker:
    """A thread that owns one connection (opened lazily) and runs jobs on it in order.

    ``_lock`` guards job states: a job is either dropped before it starts or
    runs to its end. ``_conn_lock`` guards the connection's lifetime against a
    cancel request in flight from another thread: the connection is never
    closed under ``cancel_safe``.
    """

    def __init__(self, connect: Callable[[], Conn], name: str) -> None:
        self._connect = connect
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._conn_lock = threading.Lock()
        self._conn: Conn | None = None
        # A duplicate of the connection's socket, to shut it down from another thread.
        self._socket: socket.socket | None = None
        # Set by the Trio side: this worker takes no more jobs.
        self.retired = False
        self.connecting = False  # its thread is opening a connection
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Callable[[Conn], Any]) -> Job:
        job = Job(work, trio.lowlevel.current_trio_token())
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """Close the connection and end the thread once the current job (if any) is done."""
        self.retired = True
        self._jobs.put(None)

    def finished(self, job: Job) -> bool:
        """Whether ``job`` has run to its end (its result is there, handed back or not)."""
        with self._lock:
            return job.state is JobState.DONE

    def drop(self, job: Job) -> bool:
        """Withdraw ``job`` if it has not started; True if it never will.

        A worker caught opening a connection for it is retired: its thread is
        busy until the connection opens or fails, and nobody waits for it.
        """
        with self._lock:
            if job.state is JobState.CONNECTING:
                self.retired = True
            return drop(job)

    def sever(self, job: Job) -> None:
        """Shut the connection's socket down if ``job`` still runs on it (never blocks).

        The thread blocked on it wakes with an error and discards the
        connection. The socket is a duplicate owned by the worker, so it can
        never name another connection's socket.
        """
        with self._lock:
            if job.state is not JobState.RUNNING or self._socket is None:
                return
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone

    def abandon(self, job: Job, cancel_timeout: float) -> None:
        """Give up on a running job: cancel it on the server (bounded), then sever it.

        Blocks up to ``cancel_timeout``: call from a thread of its own.
        """
        self.cancel(job, cancel_timeout)
        self.sever(job)

    def cancel(self, job: Job, timeout: float) -> None:
        """Ask the server to cancel ``job`` if it is running (blocks: call from a thread)."""
        with self._conn_lock:
            with self._lock:
                if job.state is not JobState.RUNNING:
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
            if not advance(self._lock, job, JobState.CONNECTING):
                continue
            # Connecting is not part of the job: a caller cancelled meanwhile
            # drops a job that never started.
            ready = outcome.capture(self._ready)
            if not advance(self._lock, job, JobState.RUNNING):
                continue
            if isinstance(ready, outcome.Value):
                _running.job = job
                try:
                    result = outcome.capture(self._execute, job, ready.value)
                finally:
                    _running.job = None
            else:
                result = ready
            with self._lock:
                job.result = result  # a job DONE has its result (see Pool.run)
                job.state = JobState.DONE
                discard = job.cancel_requested
            if discard or not _idle(self._conn):
                # A late cancel must never hit the next job; a broken or
                # mid-transaction connection is of no further use.
                outcome.capture(self._close)
            hand_back(job.token, job.done.set)
        outcome.capture(self._close)

    def _execute(self, job: Job, conn: Conn) -> Any:
        try:
            return job.work(conn)
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise ConnectionLost(exc, job.commit) from exc
            raise

    def _ready(self) -> Conn:
        conn = self._conn
        if conn is not None and _healthy(conn):
            return conn
        self._close()
        self.connecting = True
        try:
            conn = self._connect()
        except psycopg.Error as exc:
            raise Unreachable(exc) from exc
        finally:
            self.connecting = False
        try:
            duplicate = socket.socket(fileno=os.dup(conn.fileno()))
        except BaseException:
            conn.close()
            raise
        with self._conn_lock, self._lock:
            self._conn = conn
            self._socket = duplicate
        return conn

    def _close(self) -> None:
        with self._conn_lock, self._lock:
            conn, self._conn = self._conn, None
            duplicate, self._socket = self._socket, None
        if duplicate is not None:
            duplicate.close()
        if conn is not None:
            conn.close()


def connect(params: dict[str, Any], setup: str) -> Conn:
    """A connection in autocommit mode (libpq's ``params``), after its ``setup`` statement.

    Connecting fails with psycopg's error (the worker says :class:`Unreachable`);
    the setup statement of a connection that was made fails with
    :class:`ConnectionLost` if the connection broke, else :class:`SetupFailed`.
    """
    conn = psycopg.Connection.connect(**params, autocommit=True)
    try:
        conn.execute(setup)
    except psycopg.Error as exc:
        broken = conn.broken or conn.closed
        conn.close()
        raise (ConnectionLost(exc) if broken else SetupFailed(exc)) from exc
    except BaseException:
        conn.close()
        raise
    return conn


LOOP_STALL = 0.5
"""Seconds late a deadline may fire before the wait counts as cut short by a loop stall."""


def _after_a_stall(deadline: float) -> float | None:
    """A new deadline if this one fired late (the event loop was blocked), else ``None``.

    A resolver that runs without ``await`` past a call's deadline holds up
    the whole event loop: the worker may have finished long ago, or be free
    for the next call, with nobody to hear it. The time the loop took away
    from the end of the wait is given back once more, and a wait that still
    ends is the database's.
    """
    late = trio.current_time() - deadline
    return trio.current_time() + late if late >= LOOP_STALL else None


def _idle(conn: Conn | None) -> bool:
    return (
        conn is not None
        and not conn.closed
        and not conn.broken
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


def _healthy(conn: Conn) -> bool:
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


class Pool:
    """The workers, each either idle in a channel or held by exactly one call.

    Retired workers (abandoned mid-job) leave the pool at once and are
    replaced; their threads end by themselves once their connection is
    severed, and :meth:`stop` waits for them too (bounded).
    """

    def __init__(
        self, size: int, new_worker: Callable[[], Worker], *, cancel_timeout: float
    ) -> None:
        self._new_worker = new_worker
        self._cancel_timeout = cancel_timeout
        self._send, self._receive = trio.open_memory_channel[Worker](size)
        self._workers: list[Worker] = []
        self._retired: list[Worker] = []
        self._closed = False
        for _ in range(size):
            self._send.send_nowait(self._add())

    def _add(self) -> Worker:
        worker = self._new_worker()
        self._workers.append(worker)
        return worker

    @trio.lowlevel.enable_ki_protection
    async def run(self, work: Callable[[Conn], T], *, timeout: float) -> T:
        """``work(conn)`` on the next idle worker, within ``timeout`` seconds.

        See the module docstring for the deadline and for cancellation.
        Raises :class:`Closed` if the pool closes before a worker is free,
        :class:`NoAnswer` when the deadline passes, and otherwise whatever
        the job raised. Protected from Ctrl-C: a ``KeyboardInterrupt`` never
        lands between taking a worker and giving it back (it comes at a
        checkpoint; the job itself runs on the worker's thread, out of its reach).
        """
        deadline: float | None = trio.current_time() + timeout
        worker: Worker | None = None
        while worker is None:
            assert deadline is not None
            with trio.move_on_at(deadline):
                try:
                    worker = await self._receive.receive()
                except (trio.ClosedResourceError, trio.EndOfChannel):
                    raise Closed from None
            if worker is None and (deadline := _after_a_stall(deadline)) is None:
                raise NoAnswer("queued", None)
        try:
            job = worker.submit(work)
            try:
                while deadline is not None:
                    with trio.move_on_at(deadline):
                        await job.done.wait()
                    if job.done.is_set() or worker.finished(job):
                        break  # finished on its worker: never a timeout
                    deadline = _after_a_stall(deadline)
                else:
                    self._give_up(worker, job)
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

    def _give_up(self, worker: Worker, job: Job) -> None:
        """The deadline passed with ``job`` unfinished: raise :class:`NoAnswer`."""
        if worker.drop(job):
            raise NoAnswer("connecting" if worker.retired else "queued", None)
        commit = job.give_up()
        worker.retired = True
        threading.Thread(
            target=worker.abandon,
            args=(job, self._cancel_timeout),
            name=f"{worker.thread.name} (abandon)",
            daemon=True,
        ).start()
        raise NoAnswer("running", commit)

    async def _interrupt(self, worker: Worker, job: Job) -> bool:
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
            job.give_up()
            worker.retired = True
            worker.sever(job)
            return False
        return isinstance(job.result, outcome.Value)

    def _release(self, worker: Worker) -> None:
        if self._closed:
            worker.stop()
            return
        if worker.retired:
            # Abandoned: it ends by itself once its blocking call returns.
            worker.stop()
            self._workers.remove(worker)
            self._retired = [w for w in self._retired if w.thread.is_alive()]
            self._retired.append(worker)
            worker = self._add()
        self._send.send_nowait(worker)

    async def stop(self) -> None:
        """Stop every worker, and wait a little (bounded) for their threads to end."""
        self._closed = True
        self._send.close()
        self._receive.close()
        workers, self._workers = self._workers + self._retired, []
        self._retired = []
        for worker in workers:
            worker.stop()

        def join() -> None:
            for worker in workers:
                if not worker.connecting:
                    worker.thread.join()

        # Idle workers end at once, and abandoned ones once their connection
        # is severed. One opening a connection (bounded by connect_timeout)
        # or stuck otherwise is left to its daemon thread rather than hold up
        # the caller: it closes its connection by itself.
        # Shielded from the caller's cancellation: a store is closed whole.
        with trio.CancelScope(shield=True), trio.move_on_after(max(1.0, self._cancel_timeout)):
            await trio.to_thread.run_sync(join, abandon_on_cancel=True)
