"""What the SQL stores' thread bridges share: a job's states, its hand-back to Trio.

Each SQL store runs its jobs (functions of a connection) on threads that own
their connections (:mod:`trioplay.stores._sqlite_bridge`,
:mod:`trioplay.stores._pg_bridge`). Both follow one policy, written here once:

- a job moves ``QUEUED`` (handed to a worker) -> ``CONNECTING`` (its worker
  opens a connection; PostgreSQL only) -> ``RUNNING`` -> ``DONE``, each step
  under its worker's lock;
- a caller that gives up (cancelled, or out of time) drops a job that has not
  started (``DROPPED``): its worker skips it, so it never runs. A job that
  started runs to its end; each bridge says what it does meanwhile (interrupt
  a read, cancel on the server, abandon the connection);
- the worker hands the outcome back through the caller's Trio token; a Trio
  run that has finished meanwhile has nobody left to tell.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Protocol

import trio

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable


class JobState(enum.Enum):
    QUEUED = enum.auto()
    CONNECTING = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()
    DROPPED = enum.auto()


class Job(Protocol):
    state: JobState


def advance(lock: threading.Lock, job: Job, state: JobState) -> bool:
    """Move a job its worker took to ``state``; ``False`` if its caller dropped it."""
    with lock:
        if job.state is JobState.DROPPED:
            return False
        job.state = state
        return True


def drop(job: Job) -> bool:
    """Drop ``job`` if it has not started; ``True`` if it never will (hold the worker's lock)."""
    if job.state in (JobState.QUEUED, JobState.CONNECTING):
        job.state = JobState.DROPPED
        return True
    return False


def hand_back(token: trio.lowlevel.TrioToken, deliver: Callable[..., Any], *args: Any) -> None:
    """Run ``deliver(*args)`` on the caller's Trio thread (from a worker thread)."""
    try:
        token.run_sync_soon(deliver, *args)
    except trio.RunFinishedError:
        pass  # the Trio run is over: nobody waits for this job any more


def one_line(exc: BaseException) -> str:
    """An error's message on one line (database messages span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__
