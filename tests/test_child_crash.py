"""Acceptance (issue 23): SIGKILL during a child play, resume: same child run, rows skipped."""

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

ROOT = Path(__file__).resolve().parents[1]
ROWS = 2_000


def committed(db: Path) -> set[str]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            found = conn.execute(
                "SELECT key FROM sheet_rows WHERE dataset = 'people' AND status = 'completed'"
            ).fetchall()
    except sqlite3.Error:
        return set()
    return {key for (key,) in found}


def start(db: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.child_crash_play", f"sqlite:///{db}", str(log), str(ROWS)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_killed_parent_resumes_the_same_child_run(tmp_path: Path) -> None:
    db, log = tmp_path / "crash.db", tmp_path / "tools.jsonl"
    first = start(db, log)
    deadline = time.monotonic() + 120
    while len(committed(db)) < 200:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the child never committed 200 rows"
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=10)
    at_kill = committed(db)
    assert 200 <= len(at_kill) < ROWS
    with sqlite3.connect(db) as conn:
        [(child_run, attempt)] = conn.execute(
            "SELECT run_id, attempt FROM runs WHERE play = 'crash-child'"
        ).fetchall()
    assert attempt == 1

    second = start(db, log)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    [account] = json.loads(out.strip().splitlines()[-1])
    assert account["people"]["completed"] + account["people"]["skipped"] == ROWS
    assert account["people"]["skipped"] >= len(at_kill)

    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT run_id, attempt, status FROM runs WHERE play = 'crash-child'")
        assert runs.fetchall() == [(child_run, 2, "completed")]
    executions = Counter(json.loads(line) for line in log.read_text().splitlines())
    assert set(executions) == {f"d{i}.example" for i in range(ROWS)}
    # A row committed before the kill was never called again.
    assert all(executions[domain] == 1 for domain in at_kill)
