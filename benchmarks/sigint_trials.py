"""Signal trials: CLI runs interrupted by SIGINT (or SIGTERM) at random points.

``python -m benchmarks sigint [--trials N] [--seed S] [--signal TERM] [--rows R] [--mode M]``
runs ``trioplay run benchmarks/sigint_play.py`` N times (default 100), each
on a new SQLite store in a temporary folder, and sends each run one signal
after a random delay (seeded), drawn between the start of the process and
the end of an uninterrupted run of the same play (timed once first). So the
signal lands anywhere: while Python starts, while the store opens, in the
map, while the run is recorded, after it ended. After each run, the store is
read with plain :mod:`sqlite3` and the trial reports:

- the exit code, and how long after the signal the process exited;
- runs left ``running``, and receipts left ``running``;
- paid results dropped: provider calls that answered (``ok`` or a recorded
  failure, as the providers' own log says) whose receipt does not hold that
  result (``completed``, or ``failed``);
- errors on stderr that are not the expected one-line report (a traceback,
  "cannot start a transaction within a transaction").

``--mode library`` runs the play as a library user's program instead
(``python -m benchmarks.sigint_play``: ``trio.run`` with Trio's own Ctrl-C
handling, no signal receiver), to measure what Trio's ``KeyboardInterrupt``
leaves behind (docs/durability.md, "In your own program").

It is not a timing benchmark: the bound on the exit (3 s) is generous, and
the numbers mean the same on a busy machine. ``tests/test_signals.py`` runs
a short form (a few trials) in ``make test``; docs/durability.md records the
figures of the full form.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import attrs

from trioplay._keys import idempotency_key

from .sigint_play import LOG_ENV

ROOT = Path(__file__).resolve().parents[1]
PLAY = Path(__file__).with_name("sigint_play.py")
DEFAULT_TRIALS = 100
DEFAULT_ROWS = 3_000
EXIT_BOUND = 3.0
"""Seconds from the signal to the exit within which every trial must end."""
HANG_LIMIT = 60.0
"""A run still alive this long after its signal is killed and counted as hung."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@attrs.frozen
class StoreState:
    """What a trial left in its store."""

    run_status: str | None
    runs_running: int
    receipts_running: int
    paid: int
    dropped: int
    error: str | None = None


@attrs.frozen
class Trial:
    delay: float
    exit_code: int
    exit_after: float | None
    """Seconds from the signal to the exit; None when the run ended before the signal."""
    state: StoreState
    stderr_problem: str | None
    signum: signal.Signals

    @property
    def at_startup(self) -> bool:
        """The signal came while Python was still loading trioplay: Python's own
        default (a ``KeyboardInterrupt`` traceback for SIGINT), nothing stored."""
        state = self.state
        return self.exit_code == -self.signum and state.run_status is None and not state.paid

    @property
    def cancelled_run(self) -> bool:
        """The signal stopped a run that had begun."""
        return self.exit_after is not None and self.state.run_status == "interrupted"

    @property
    def sound(self) -> bool:
        """The store is consistent and the process said nothing amiss (however long it took)."""
        state = self.state
        return (
            state.error is None
            and state.runs_running == 0
            and state.receipts_running == 0
            and state.dropped == 0
            and (self.stderr_problem is None or self.at_startup)
        )

    @property
    def clean(self) -> bool:
        return self.sound and (self.exit_after is None or self.exit_after <= EXIT_BOUND)


@attrs.frozen
class Report:
    signal: signal.Signals
    calibration: float
    window: tuple[float, float]
    trials: list[Trial]

    @property
    def interrupted(self) -> list[Trial]:
        return [trial for trial in self.trials if trial.exit_after is not None]

    @property
    def clean(self) -> bool:
        return all(trial.clean for trial in self.trials)

    @property
    def sound(self) -> bool:
        return all(trial.sound for trial in self.trials)

    def lines(self) -> list[str]:
        trials, hit = self.trials, self.interrupted
        exits = sorted(trial.exit_after for trial in hit if trial.exit_after is not None)
        codes = Counter(trial.exit_code for trial in trials)
        statuses = Counter(trial.state.run_status or "none" for trial in trials)
        low, high = (self.calibration * fraction for fraction in self.window)
        lines = [
            f"sigint trials: {len(trials)} runs of {PLAY.name}, {self.signal.name} after a "
            f"random delay in [{low:.2f}, {high:.2f}] s (an uninterrupted run: "
            f"{self.calibration:.2f} s)",
            f"  signalled before the end: {len(hit)} (while Python loaded trioplay, before"
            f" the CLI ran: {sum(1 for t in trials if t.at_startup)}; stopping a run that had"
            f" begun: {sum(1 for t in trials if t.cancelled_run)}); ended before the signal: "
            f"{len(trials) - len(hit)}",
            "  exit codes: " + ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())),
            "  run status afterwards: "
            + ", ".join(f"{status} x{n}" for status, n in sorted(statuses.items())),
        ]
        if exits:
            slow = sum(1 for seconds in exits if seconds > EXIT_BOUND)
            lines.append(
                f"  exit after the signal: median {statistics.median(exits):.2f} s, "
                f"max {exits[-1]:.2f} s, over {EXIT_BOUND:.0f} s: {slow}"
            )
        lines += [
            f"  runs left running: {sum(t.state.runs_running for t in trials)}",
            f"  receipts left running: {sum(t.state.receipts_running for t in trials)} "
            f"(in {sum(1 for t in trials if t.state.receipts_running)} trials)",
            f"  paid results dropped: {sum(t.state.dropped for t in trials)} of "
            f"{sum(t.state.paid for t in trials):,} paid calls "
            f"(in {sum(1 for t in trials if t.state.dropped)} trials)",
            f"  stores unreadable: {sum(1 for t in trials if t.state.error)}",
            "  unexpected stderr (a traceback after start-up, an error line): "
            f"{sum(1 for t in trials if t.stderr_problem and not t.at_startup)}",
        ]
        for index, trial in enumerate(trials):
            if not trial.clean:
                lines.append(f"  trial {index} (delay {trial.delay:.3f} s): {trial}")
        return lines


def inspect_store(db: Path, log: Path) -> StoreState:
    """Read what a run left: its status, running runs and receipts, dropped paid results."""
    paid: dict[str, str] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry["outcome"] in ("ok", "error"):
                paid[entry["idempotency_key"]] = entry["outcome"]
    if not db.exists():
        dropped = len(paid)
        return StoreState(None, 0, 0, len(paid), dropped)
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
            if "runs" not in tables:
                return StoreState(None, 0, 0, len(paid), len(paid))
            statuses = [status for (status,) in conn.execute("SELECT status FROM runs")]
            receipts = conn.execute("SELECT key, status FROM receipts").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return StoreState(None, 0, 0, len(paid), 0, error=str(exc))
    recorded = {"completed": "ok", "failed": "error"}
    held = {idempotency_key(key, None): recorded.get(status) for key, status in receipts}
    dropped = sum(1 for key, outcome in paid.items() if held.get(key) != outcome)
    return StoreState(
        run_status=statuses[0] if statuses else None,
        runs_running=statuses.count("running"),
        receipts_running=sum(1 for _, status in receipts if status == "running"),
        paid=len(paid),
        dropped=dropped,
    )


def _stderr_problem(text: str) -> str | None:
    for needle in ("Traceback", "within a transaction", "error:"):
        if needle in text:
            return " | ".join(text.strip().splitlines()[-3:])
    return None


def _command(folder: Path, rows: int, mode: str) -> list[str]:
    store = f"sqlite:///{folder / 'trial.db'}"
    if mode == "library":
        return [sys.executable, "-m", "benchmarks.sigint_play", store, str(rows)]
    return [
        sys.executable,
        "-m",
        "trioplay",
        "run",
        str(PLAY),
        "--input",
        json.dumps({"rows": rows}),
        "--run-id",
        "trial",
        "--store",
        store,
    ]


def _start(folder: Path, rows: int, mode: str) -> subprocess.Popen[str]:
    folder.mkdir(parents=True)
    env = {**os.environ, LOG_ENV: str(folder / "paid.jsonl")}
    return subprocess.Popen(
        _command(folder, rows, mode),
        cwd=ROOT if mode == "library" else folder,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A background job (make, nohup, a CI step) may inherit SIGINT ignored;
        # the trial is of a run that the signal reaches, as a terminal's Ctrl-C does.
        preexec_fn=_default_signals,
    )


def _default_signals() -> None:
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def calibrate(root: Path, rows: int, mode: str) -> float:
    """Seconds an uninterrupted run takes, from the start of the process to its exit."""
    folder = root / "calibration"
    started = time.monotonic()
    proc = _start(folder, rows, mode)
    _, err = proc.communicate(timeout=300)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the uninterrupted run failed ({proc.returncode}): {err}")
    state = inspect_store(folder / "trial.db", folder / "paid.jsonl")
    if state.run_status != "completed" or state.dropped or state.receipts_running:
        raise RuntimeError(f"the uninterrupted run left {state}")
    return elapsed


def _wait_for_paid(log: Path, calls: int, proc: subprocess.Popen[str]) -> None:
    """Wait until ``log`` holds ``calls`` paid calls (or the process ended)."""
    deadline = time.monotonic() + HANG_LIMIT
    while proc.poll() is None and time.monotonic() < deadline:
        if log.exists() and log.read_bytes().count(b"\n") >= calls:
            return
        time.sleep(0.005)


def trial(
    folder: Path,
    rows: int,
    delay: float,
    signum: signal.Signals,
    mode: str,
    *,
    after_paid: int = 0,
) -> Trial:
    """One run, signalled ``delay`` seconds after its start (after its first
    ``after_paid`` paid calls, when given: then the run has surely begun)."""
    started = time.monotonic()
    proc = _start(folder, rows, mode)
    try:
        if after_paid:
            _wait_for_paid(folder / "paid.jsonl", after_paid, proc)
            started = time.monotonic()
        time.sleep(max(0.0, started + delay - time.monotonic()))
        exit_after: float | None = None
        if proc.poll() is None:
            proc.send_signal(signum)
            sent = time.monotonic()
            try:
                proc.wait(timeout=HANG_LIMIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            exit_after = time.monotonic() - sent
        err = proc.stderr.read() if proc.stderr is not None else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    return Trial(
        delay=delay,
        exit_code=proc.returncode,
        exit_after=exit_after,
        state=inspect_store(folder / "trial.db", folder / "paid.jsonl"),
        stderr_problem=_stderr_problem(err),
        signum=signum,
    )


def run(
    trials: int = DEFAULT_TRIALS,
    *,
    rows: int = DEFAULT_ROWS,
    seed: int = 0,
    signum: signal.Signals = signal.SIGINT,
    mode: str = "cli",
    window: tuple[float, float] = (0.0, 1.0),
    quiet: bool = False,
) -> Report:
    """Run the trials; print the report unless ``quiet``, and return it.

    Each signal comes after a delay drawn from ``window``, in fractions of
    an uninterrupted run (the short form in the tests skips Python's start-up).
    """
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="trioplay-sigint-") as tmp:
        root = Path(tmp)
        calibration = calibrate(root, rows, mode)
        low, high = (calibration * fraction for fraction in window)
        done = [
            trial(root / f"trial-{index}", rows, rng.uniform(low, high), signum, mode)
            for index in range(trials)
        ]
    report = Report(signum, calibration, window, done)
    if not quiet:
        print("\n".join(report.lines()), flush=True)
    return report


def parse_signal(name: str) -> signal.Signals:
    name = name.upper().removeprefix("SIG")
    if name not in ("INT", "TERM"):
        raise ValueError(f"--signal must be INT or TERM, got {name!r}")
    return signal.Signals[f"SIG{name}"]
