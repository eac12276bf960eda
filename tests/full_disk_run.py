"""A run on SQLite whose disk fills up mid-run, in a process of its own.

``python -m tests.full_disk_run DB ROWS FAULT_AT`` runs a play of ROWS rows
on ``sqlite:///DB``; once FAULT_AT rows have committed it caps the size of
every file this process writes at what the database files hold now
(``RLIMIT_FSIZE``), so the next write that would grow the database or its
write-ahead log fails as on a full disk (``EFBIG``; SQLite answers
``SQLITE_FULL``). It prints one JSON line: the error the run raised, the
StoreError in it, the seconds from the cap to the error, and the rows the
run reported committed.

Why a file-size limit in a subprocess rather than ``PRAGMA max_page_count``:
the limit fails the operating system's write under the store's own
connection, as a full disk does (the WAL append of a commit, a checkpoint),
with nothing in the store changed for the test; ``max_page_count`` is a
setting of one connection, the store's own, that the test would have to
reach into. And a process of its own, because the limit holds for every
file the process writes, which in the test runner would include its logs
and caches. ``SIGXFSZ`` is ignored, so the write fails instead of the
process being killed.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from typing import Any

import trio

import trioplay

from .support import CountingTool, find_email, registry


def main(db: str, rows: int, fault_at: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    reported = 0
    capped_at: float | None = None

    def cap() -> None:
        nonlocal capped_at
        size = max(os.path.getsize(path) for path in (db, f"{db}-wal") if os.path.exists(path))
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
        capped_at = time.monotonic()

    def on_event(event: trioplay.RuntimeEvent) -> None:
        nonlocal reported
        if event.type == "map.progress":
            reported = max(reported, event.data["completed"])
            if reported >= fault_at and capped_at is None:
                cap()

    @trioplay.play("faults")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        source = [{"domain": f"d{i}.example"} for i in range(rows)]
        return await ctx.dataset("s", source).with_column("email", find_email).run(key="domain")

    async def run() -> BaseException | None:
        limits = trioplay.Limits(
            writer_max_flush=0.02, progress_flush_interval=0.01, cleanup_timeout=0.5
        )
        try:
            async with trioplay.open_runtime(
                store=f"sqlite:///{db}",
                tools=registry(finder=CountingTool(delay=0.002)),
                limits=limits,
                on_event=on_event,
            ) as rt:
                await rt.run(play, {}, run_id="r")
        except trioplay.TrioplayError as exc:
            return exc
        return None

    error = trio.run(run)
    ended = time.monotonic()
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    stores = [e for e in chain if isinstance(e, trioplay.StoreError)]
    report = {
        "type": type(error).__name__ if error is not None else None,
        "error": str(error) if error is not None else None,
        "store_error": str(stores[0]) if stores else None,
        "elapsed": ended - capped_at if capped_at is not None else None,
        "reported": reported,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
