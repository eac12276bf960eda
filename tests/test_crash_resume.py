"""Acceptance: SIGKILL mid-run, rerun, every key once, every call paid once.

The first run cannot finish: its last row's call hangs. So the kill lands
mid-run however fast the machine is, and the run needs only a few pages.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from .crash_play import CONCURRENCY

ROOT = Path(__file__).resolve().parents[1]
ROWS = 3_000
KILL_AT = 1_000  # committed rows: the first page's worth, calls in flight on the next


def committed(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            (count,) = conn.execute("SELECT count(*) FROM sheet_rows").fetchone()
            return int(count)
    except sqlite3.Error:
        return 0


def start(db: Path, log: Path, *hang: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests.crash_play", f"sqlite:///{db}", str(log), str(ROWS)]
    return subprocess.Popen(
        [*command, *(f"--hang={key}" for key in hang)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_killed_run_resumes_with_every_key_once(tmp_path: Path) -> None:
    db, log = tmp_path / "crash.db", tmp_path / "tools.jsonl"
    first = start(db, log, f"d{ROWS - 1}.example")
    deadline = time.monotonic() + 120
    while committed(db) < KILL_AT:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, f"the first run never committed {KILL_AT:,} rows"
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=10)
    at_kill = committed(db)
    assert KILL_AT <= at_kill < ROWS

    second = start(db, log)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    output = json.loads(out.strip().splitlines()[-1])
    assert output["completed"] + output["skipped"] == ROWS
    assert output["skipped"] >= at_kill

    with sqlite3.connect(db) as conn:
        keys = [k for (k,) in conn.execute("SELECT key FROM sheet_rows WHERE status='completed'")]
    assert len(keys) == len(set(keys)) == ROWS
    assert set(keys) == {f"d{i}.example" for i in range(ROWS)}

    executions = Counter(
        (entry["tool_id"], entry["idempotency_key"])
        for entry in map(json.loads, log.read_text().splitlines())
    )
    assert len(executions) == 2 * ROWS
    repeated = sum(n - 1 for n in executions.values() if n > 1)
    # Only calls in flight at the kill may have run twice.
    assert repeated <= CONCURRENCY
