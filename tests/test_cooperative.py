"""Acceptance: several processes share one run; every key and call happens once.

Runs on every store that several processes can share (SQLite on one machine,
PostgreSQL anywhere).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

import trioplay

from .crash_play import CONCURRENCY
from .test_postgres import DSN, drop_schema, new_schema_name, require_postgres, with_schema

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
ROWS = 4_000  # four pages of 1,000 rows
# The victim of the kill hangs on one row of each page (the 500th), so it
# cannot finish a page it took: when it is killed it surely holds one.
VICTIM_HANGS = [f"d{page + 500}.example" for page in range(0, ROWS, 1000)]


def start(store: str, log: Path, lease_ttl: float = 60.0, *hang: str) -> subprocess.Popen[str]:
    """A worker on the run; it opens its runtime, says ``ready`` and waits for :func:`go`."""
    command = [sys.executable, "-m", "tests.crash_play", store, str(log), str(ROWS)]
    return subprocess.Popen(
        [*command, str(lease_ttl), "--wait-for-go", *(f"--hang={key}" for key in hang)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def go(procs: list[subprocess.Popen[str]]) -> None:
    """Start the workers' runs together, once every one is ready.

    Python's start-up takes longer than a run of these rows: workers left to
    start their runs on their own could find the run finished before them.
    """
    for proc in procs:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line == "ready\n", (line, proc.communicate())
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()  # communicate() closes it


async def sheet(store_url: str) -> tuple[list[str], dict[str, int]]:
    async with trioplay.open_runtime(store=store_url) as rt:
        keys: list[str] = []
        after = -1
        while True:
            rows = await rt.store.read_rows("crash-test", "sheet", after_position=after, limit=5000)
            keys += [row.key for row in rows if row.status == "completed"]
            if len(rows) < 5000:
                break
            after = rows[-1].position
        return keys, await rt.store.count_receipts("crash-test")


def executions(log: Path) -> Counter[tuple[str, str]]:
    # Read while the workers append: only lines that end in a newline are
    # whole (a read may see half of a concurrent append).
    lines = log.read_text().split("\n")[:-1]
    return Counter((entry["tool_id"], entry["idempotency_key"]) for entry in map(json.loads, lines))


def check_sheet(keys: list[str]) -> None:
    assert len(keys) == len(set(keys)) == ROWS
    assert set(keys) == {f"d{i}.example" for i in range(ROWS)}


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    """The test's worker processes; any still running at the end are killed."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/coop.db"
        return
    require_postgres()
    schema = new_schema_name()
    try:
        yield with_schema(DSN, schema)
    finally:
        drop_schema(schema)


@pytest.mark.deadline(600)
async def test_three_processes_share_one_run(
    store_url: str, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    log = tmp_path / "tools.jsonl"
    procs = [start(store_url, log) for _ in range(3)]
    workers += procs
    await go(procs)
    outputs: list[dict[str, Any]] = []
    for proc in procs:
        out, err = await trio.to_thread.run_sync(lambda p=proc: p.communicate(timeout=300))
        assert proc.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    # Each process ran part of the rows; together they ran each row once.
    assert sum(o["completed"] for o in outputs) == ROWS
    assert sum(1 for o in outputs if o["completed"] > 0) >= 2
    keys, receipts = await sheet(store_url)
    check_sheet(keys)
    assert receipts.get("running", 0) == 0
    counts = executions(log)
    assert len(counts) == 2 * ROWS
    assert max(counts.values()) == 1


@pytest.mark.deadline(600)
async def test_a_killed_process_leaves_its_pages_to_the_others(
    store_url: str, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    log = tmp_path / "tools.jsonl"
    victim = start(store_url, log, 5.0, *VICTIM_HANGS)
    procs = [victim, start(store_url, log, 5.0), start(store_url, log, 5.0)]
    workers += procs
    await go(procs)
    # The victim's call hangs: it has taken a page that it cannot finish.
    deadline = time.monotonic() + 120
    while not log.exists() or '"outcome":"hang"' not in log.read_text():
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "the victim never reached its hanging row"
        await trio.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    await trio.to_thread.run_sync(lambda: victim.communicate(timeout=10))
    for proc in procs[1:]:
        _, err = await trio.to_thread.run_sync(lambda p=proc: p.communicate(timeout=300))
        assert proc.returncode == 0, err
    keys, receipts = await sheet(store_url)
    check_sheet(keys)
    assert receipts.get("running", 0) == 0
    counts = executions(log)
    assert len(counts) == 2 * ROWS
    # Only calls in flight in the killed process ran twice.
    assert sum(n - 1 for n in counts.values()) <= CONCURRENCY
