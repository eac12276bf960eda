"""Fault trials: one of two processes sharing a run is paused past its lease, then resumed.

``python -m benchmarks faults [--trials N] [--seed S] [--rows R] [--stores sqlite,postgres]``
runs, N times per store (default 20), two processes of
:mod:`benchmarks.pause_play` on one run and one fresh store (a SQLite file
in a temporary folder; a PostgreSQL schema of its own). Once the providers
have answered a random share (10 to 60 %) of the rows, it stops one of the
two, chosen at random, with SIGSTOP (as a GC pause, a VM migration or CPU
starvation would), leaves it stopped for 1.5 to 3 times ``lease_ttl``
(2 s), so that its peer finds its leases expired and takes its pages over,
then resumes it with SIGCONT. Each trial then checks what a fleet needs:

- **no hang**: both processes exit within :data:`HANG_LIMIT` of the resume
  (a process still alive then is killed and counted as hung);
- **no completed row replaced**: the provider never fails, so every row of
  the sheet must be ``completed``, with the provider's answer; a ``failed``
  row is one a paused process wrote (``LeaseLost``) over or instead of the
  peer's;
- **every row once**: the sheet holds each key once, and the two processes'
  own counts of rows they committed add up to the row count (no row was
  committed by both);
- **run status right**: the run is ``completed``, both processes exit 0;
- no receipt left ``running``; calls executed twice (the paused process's
  calls in flight, re-run by the peer with the same idempotency key) are
  counted and bounded by the paused process's concurrency.

A paused process that holds SQLite's write lock (it was stopped inside a
transaction) blocks every writer of the file for the pause: the trials
give the SQLite store a ``lock_timeout`` (30 s) longer than any pause, so a
peer waits for the lock rather than failing its run. ``tests/test_fault_trials.py``
runs a short form (a few trials, fewer rows) in ``make test``;
docs/durability.md records the figures of the full form.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

import trioplay

from .pause_play import CONCURRENCY, DATASET, RUN_ID
from .workload import drop_schemas, postgres_problem, postgres_url, save_results

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRIALS = 20
DEFAULT_ROWS = 4_000
LEASE_TTL = 2.0
PAUSE = (1.5, 3.0)
"""The pause, in lease lifetimes: always past the lease, at most three times it."""
PROGRESS = (0.1, 0.6)
"""When to pause: after this share of the rows has been answered, drawn at random."""
SQLITE_LOCK_TIMEOUT = 30.0
HANG_LIMIT = 90.0
"""Seconds after the resume within which both processes must have exited."""
START_LIMIT = 120.0
"""Seconds for the processes to reach the pause point (else the trial is void)."""


@attrs.frozen
class Trial:
    store: str
    victim: int
    """Which process was paused: 0 (started first) or 1."""
    paused_after: int
    """Provider calls answered when the pause began."""
    pause: float
    exit_codes: tuple[int | None, int | None]
    hung: int
    run_status: str | None
    keys: int
    """Distinct keys in the sheet."""
    failed_rows: int
    wrong_rows: int
    """Completed rows whose value is not the provider's answer."""
    committed_by_both: int
    """Rows the two processes' own counts say they committed, beyond the row count."""
    receipts_running: int
    paid_twice: int
    errors: tuple[str, ...]

    def clean(self, rows: int) -> bool:
        return (
            self.hung == 0
            and self.exit_codes == (0, 0)
            and self.run_status == "completed"
            and self.keys == rows
            and self.failed_rows == 0
            and self.wrong_rows == 0
            and self.committed_by_both == 0
            and self.receipts_running == 0
            and self.paid_twice <= CONCURRENCY
            and not self.errors
        )


@attrs.frozen
class Report:
    rows: int
    trials: list[Trial]

    @property
    def clean(self) -> bool:
        return all(trial.clean(self.rows) for trial in self.trials)

    def lines(self) -> list[str]:
        out = []
        for store in sorted({trial.store for trial in self.trials}):
            trials = [trial for trial in self.trials if trial.store == store]
            pauses = sorted(trial.pause for trial in trials)
            statuses = Counter(trial.run_status or "none" for trial in trials)
            codes = Counter(code for trial in trials for code in trial.exit_codes)
            out += [
                f"faults, pause ({store}): {len(trials)} trials of two processes on "
                f"{self.rows:,} rows, lease_ttl={LEASE_TTL:g} s, one paused "
                f"{pauses[0]:.1f}-{pauses[-1]:.1f} s",
                f"  hangs: {sum(trial.hung for trial in trials)}",
                "  completed rows replaced (failed rows in the sheet): "
                f"{sum(trial.failed_rows for trial in trials)}; wrong values: "
                f"{sum(trial.wrong_rows for trial in trials)}",
                "  run status: " + ", ".join(f"{s} x{n}" for s, n in sorted(statuses.items())),
                "  exit codes: " + ", ".join(f"{c} x{n}" for c, n in codes.most_common()),
                f"  every row once: {sum(trial.keys == self.rows for trial in trials)} of "
                f"{len(trials)} sheets hold every key; rows committed by both processes: "
                f"{sum(trial.committed_by_both for trial in trials)}",
                f"  receipts left running: {sum(trial.receipts_running for trial in trials)}",
                "  calls executed twice (in flight in the paused process), per trial max: "
                f"{max(trial.paid_twice for trial in trials)} (bound {CONCURRENCY})",
                f"  clean: {sum(trial.clean(self.rows) for trial in trials)} of {len(trials)}",
            ]
            for trial in trials:
                if not trial.clean(self.rows):
                    out.append(f"  NOT CLEAN: {trial}")
        return out


def _start(store_url: str, log: Path, rows: int) -> subprocess.Popen[str]:
    ttl = f"{LEASE_TTL:g}"
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.pause_play", store_url, str(log), str(rows), ttl],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _answered(log: Path) -> Counter[str]:
    """Provider executions per idempotency key, from the providers' own log."""
    if not log.exists():
        return Counter()
    # Only whole lines: a line being appended may be cut.
    lines = log.read_text().split("\n")[:-1]
    return Counter(json.loads(line)["idempotency_key"] for line in lines)


def _finish(proc: subprocess.Popen[str], limit: float) -> tuple[int | None, str, str, bool]:
    """Wait for ``proc`` up to ``limit`` seconds; kill it if it is still running (hung)."""
    try:
        out, err = proc.communicate(timeout=max(limit, 0.1))
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        return None, out, err, True


async def _read_store(store_url: str, rows: int) -> dict[str, Any]:
    async with trioplay.open_runtime(store=store_url) as rt:
        store = rt.store
        run = await store.get_run(RUN_ID)
        keys: set[str] = set()
        failed = wrong = 0
        after = -1
        while True:
            page = await store.read_rows(RUN_ID, DATASET, after_position=after, limit=5000)
            for row in page:
                keys.add(row.key)
                if row.status != "completed":
                    failed += 1
                elif json.loads(row.data_json).get("email") != f"info@{row.key}":
                    wrong += 1
            if len(page) < 5000:
                break
            after = page[-1].position
        receipts = await store.count_receipts(RUN_ID)
    return {
        "status": None if run is None else run.status,
        "keys": len(keys),
        "failed": failed,
        "wrong": wrong,
        "receipts_running": receipts.get("running", 0),
    }


def trial(store: str, store_url: str, folder: Path, rows: int, rng: random.Random) -> Trial:
    log = folder / "tools.jsonl"
    procs = [_start(store_url, log, rows), _start(store_url, log, rows)]
    errors: list[str] = []
    victim = rng.randrange(2)
    target = int(rows * rng.uniform(*PROGRESS))
    pause = LEASE_TTL * rng.uniform(*PAUSE)
    deadline = time.monotonic() + START_LIMIT
    answered = 0
    try:
        while (answered := sum(_answered(log).values())) < target:
            if procs[victim].poll() is not None:
                errors.append(f"process {victim} ended before the pause")
                break
            if time.monotonic() > deadline:
                errors.append(f"no progress to {target} calls within {START_LIMIT:g} s")
                break
            time.sleep(0.01)
        else:
            os.kill(procs[victim].pid, signal.SIGSTOP)
            time.sleep(pause)
            os.kill(procs[victim].pid, signal.SIGCONT)
        resumed = time.monotonic()
        ended = [_finish(proc, HANG_LIMIT - (time.monotonic() - resumed)) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    outputs = []
    for index, (code, out, err, _) in enumerate(ended):
        if code == 0 and out.strip():
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        else:
            errors.append(f"process {index} exited {code}: {err.strip()[-400:]}")
    state = trio.run(_read_store, store_url, rows)
    paid = _answered(log)
    committed = sum(output["completed"] for output in outputs)
    return Trial(
        store=store,
        victim=victim,
        paused_after=answered,
        pause=round(pause, 2),
        exit_codes=(ended[0][0], ended[1][0]),
        hung=sum(1 for *_, hung in ended if hung),
        run_status=state["status"],
        keys=state["keys"],
        failed_rows=state["failed"],
        wrong_rows=state["wrong"],
        committed_by_both=max(0, committed - rows) if len(outputs) == 2 else 0,
        receipts_running=state["receipts_running"],
        paid_twice=sum(n - 1 for n in paid.values()),
        errors=tuple(errors),
    )


def run(
    trials: int = DEFAULT_TRIALS,
    *,
    rows: int = DEFAULT_ROWS,
    seed: int = 0,
    stores: tuple[str, ...] = ("sqlite", "postgres"),
    save: bool = False,
    quiet: bool = False,
) -> Report:
    """Run ``trials`` pause trials on each of ``stores`` and print the report (unless ``quiet``)."""
    rng = random.Random(seed)
    done: list[Trial] = []
    for store in stores:
        if store == "postgres" and (problem := postgres_problem()) is not None:
            print(f"faults: {problem}; skipping PostgreSQL")
            continue
        for index in range(trials):
            with tempfile.TemporaryDirectory(prefix="trioplay-faults-") as tmp:
                folder = Path(tmp)
                if store == "sqlite":
                    url = f"sqlite:///{folder}/trial.db?lock_timeout={SQLITE_LOCK_TIMEOUT:g}"
                    result = trial(store, url, folder, rows, rng)
                else:
                    schema = f"faults_{uuid.uuid4().hex[:12]}"
                    try:
                        result = trial(store, postgres_url(schema), folder, rows, rng)
                    finally:
                        drop_schemas([schema])
            done.append(result)
            if quiet:
                continue
            mark = "ok" if result.clean(rows) else "NOT CLEAN"
            print(
                f"  {store} trial {index + 1}/{trials}: process {result.victim} paused "
                f"{result.pause:.1f} s after {result.paused_after} calls: {mark}",
                flush=True,
            )
    report = Report(rows, done)
    if not quiet:
        for line in report.lines():
            print(line)
    if save and done:
        payload = {"rows": rows, "seed": seed, "trials": [attrs.asdict(t) for t in done]}
        print(f"saved {save_results('faults', payload)}")
    return report
