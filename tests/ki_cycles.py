"""Ctrl-C in a library program, many times over: ``python -m tests.ki_cycles FOLDER CYCLES SEED``.

Each cycle runs a play on a new SQLite store under ``trio.run`` with Trio's
own Ctrl-C handling, as a library user's program would, while a thread
raises SIGINT after a random delay (seeded). The play's two tools return at
once, so most of the time goes to the engine and the store's inline jobs:
that is where a ``KeyboardInterrupt`` must never land in the middle of a
transaction. After each cycle the store is checked (with plain
:mod:`sqlite3`): the run is not left ``running``, and it resumes to the
end in the same process (a store left inside a transaction fails that).

The last line printed is a JSON report: for every cycle whether it was
interrupted, the run's status afterwards, whether the resume completed, and
any problem (an error other than ``KeyboardInterrupt``, a store error
logged, a run left ``running``).
"""

from __future__ import annotations

import json
import logging
import random
import signal
import sqlite3
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import trio

import trioplay

# An uninterrupted run of ROWS takes about 0.3 s on a quiet 2-core machine
# (longer when it is busy): most delays up to MAX_DELAY land inside it.
ROWS = 1_000
MAX_DELAY = 0.25


async def company(input: dict[str, Any], call: trioplay.ToolCall) -> dict[str, Any]:
    return {"size": len(input["domain"])}


async def email(input: dict[str, Any], call: trioplay.ToolCall) -> dict[str, Any]:
    return {"email": f"info@{input['domain']}"}


async def size(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("company", {"domain": row["domain"]}))["size"]


async def address(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("email", {"domain": row["domain"]}))["email"]


@trioplay.play("ki-cycle")
async def play(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    await ctx.step("started-at", time.time)
    rows = ({"domain": f"d{i}.example"} for i in range(input["rows"]))
    result = await (
        ctx.dataset("sheet", rows).with_column("size", size).with_column("email", address).run()
    )
    return result.completed_count


TOOLS = trioplay.ToolRegistry()
TOOLS.add("company", company)
TOOLS.add("email", email)
# Leases left behind by an interrupt that landed outside the store expire
# quickly, so that the resume does not wait a minute for them.
LIMITS = trioplay.Limits(lease_ttl=1.0, receipt_wait_delay=0.1)


class _StoreProblems(logging.Handler):
    """Warnings the engine logs when a store call failed (recording the end of a run, say)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "could not" in message or "transaction" in message or "StoreError" in message:
            self.messages.append(message)


async def run_play(url: str, rows: int = ROWS) -> Any:
    """The cycle's play on the store at ``url`` (run id ``cycle``), to its end or an interrupt."""
    async with trioplay.open_runtime(store=url, tools=TOOLS, limits=LIMITS) as rt:
        return await rt.run(play, {"rows": rows}, run_id="cycle")


def _interrupt_after(delay: float, armed: list[bool], lock: threading.Lock) -> None:
    time.sleep(delay)
    with lock:
        if armed[0]:
            signal.raise_signal(signal.SIGINT)


def stored_status(db: Path) -> str | None:
    if not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        if "runs" not in tables:
            return None
        row = conn.execute("SELECT status FROM runs WHERE run_id = 'cycle'").fetchone()
    return str(row[0]) if row is not None else None


def cycle(db: Path, delay: float, problems: _StoreProblems) -> dict[str, Any]:
    url = f"sqlite:///{db}"
    armed, lock = [True], threading.Lock()
    thread = threading.Thread(target=_interrupt_after, args=(delay, armed, lock))
    report: dict[str, Any] = {"delay": round(delay, 3), "interrupted": False, "problem": None}
    problems.messages.clear()
    try:
        try:
            thread.start()
            trio.run(run_play, url)
        finally:
            with lock:
                armed[0] = False
            thread.join()
            time.sleep(0.01)  # a signal raised just before now is handled here
    except KeyboardInterrupt:
        report["interrupted"] = True
    except BaseException as exc:  # what an interrupt must never turn into
        report["problem"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exception(exc, file=sys.stderr)
    status = stored_status(db)
    report["status"] = status
    if status == "running" and report["problem"] is None:
        report["problem"] = "the run was left running"
    if problems.messages and report["problem"] is None:
        report["problem"] = "; ".join(problems.messages)
    try:
        completed = trio.run(run_play, url)
    except Exception as exc:
        report["resumed"] = False
        report["problem"] = report["problem"] or f"resume: {type(exc).__name__}: {exc}"
    else:
        report["resumed"] = completed is not None and stored_status(db) == "completed"
    return report


def main() -> None:
    folder, cycles, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    # Python's own Ctrl-C handling, which trio.run takes over, even when this
    # process started with SIGINT ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = random.Random(seed)
    problems = _StoreProblems()
    logging.getLogger("trioplay").addHandler(problems)
    reports = [
        cycle(folder / f"cycle-{index}.db", rng.uniform(0.0, MAX_DELAY), problems)
        for index in range(cycles)
    ]
    print(json.dumps(reports), flush=True)


if __name__ == "__main__":
    main()
