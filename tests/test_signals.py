"""Ctrl-C and SIGTERM: the command line cancels the run; a library program's store stays sound.

The command-line tests run ``python -m trioplay`` for real and signal it;
the library test runs many interrupted cycles in a child process (a signal
raised in the pytest process itself would stop the session). Every store is
a SQLite file under ``tmp_path``, read back with plain :mod:`sqlite3`.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

import trioplay
from benchmarks import sigint_trials

from .support import registry

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

HANG_PLAY = """
import pathlib, trio, trioplay
tools = trioplay.ToolRegistry()

@tools.tool("slow")
async def slow(input, call):
    pathlib.Path({started!r}).touch()
    try:
        await trio.sleep_forever()
    finally:
        if {stubborn!r}:
            with trio.CancelScope(shield=True):
                pathlib.Path({cleaning!r}).touch()
                await trio.sleep(60)

async def resolve(row, rc):
    return await rc.tool("slow", row)

@trioplay.play("hang")
async def hang(ctx, input):
    await ctx.dataset("d", [{{"i": i}} for i in range(5)]).with_column("x", resolve).run()
"""


def _default_signals() -> None:
    # The test may run as a background job, with SIGINT ignored: the CLI
    # under test should see the signal as a terminal's Ctrl-C delivers it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def start_hanging_run(tmp_path: Path, *, stubborn: bool = False) -> subprocess.Popen[str]:
    play = tmp_path / "hang.py"
    play.write_text(
        HANG_PLAY.format(
            started=str(tmp_path / "started"),
            cleaning=str(tmp_path / "cleaning"),
            stubborn=stubborn,
        )
    )
    store = f"sqlite:///{tmp_path / 'store.db'}"
    command = [sys.executable, "-m", "trioplay", "run", str(play), "--run-id", "h"]
    proc = subprocess.Popen(
        [*command, "--store", store],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )
    wait_for(tmp_path / "started", proc)
    return proc


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def stored(tmp_path: Path) -> tuple[str, dict[str, int]]:
    with sqlite3.connect(tmp_path / "store.db") as conn:
        (status,) = conn.execute("SELECT status FROM runs WHERE run_id = 'h'").fetchone()
        receipts = dict(conn.execute("SELECT status, count(*) FROM receipts GROUP BY status"))
    return status, receipts


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["INT", "TERM"]
)
def test_a_signal_cancels_the_run_like_a_cancel_scope(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    proc = start_hanging_run(tmp_path)
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert time.monotonic() - sent < 3.0
    assert proc.returncode == code, err
    assert "run h: cancelled (play hang, attempt 1)" in out  # the summary, as after any run
    assert "interrupted: run h stopped; the same command resumes it" in err
    assert "Traceback" not in err
    status, receipts = stored(tmp_path)
    assert status == "cancelled"
    assert receipts.get("running", 0) == 0  # the leases were released
    assert receipts == {"pending": 5}


def test_a_second_signal_during_the_cleanup_exits_at_once(tmp_path: Path) -> None:
    # The tool holds up the cancellation for a minute (a shielded cleanup).
    proc = start_hanging_run(tmp_path, stubborn=True)
    proc.send_signal(signal.SIGINT)
    wait_for(tmp_path / "cleaning", proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert time.monotonic() - sent < 3.0
    assert proc.returncode == 130, err
    assert "exiting at once" in err
    status, _ = stored(tmp_path)
    # Like a kill: the next attempt on this machine takes the run's leases over.
    assert status == "running"


def test_runs_interrupted_at_random_points_leave_a_sound_store() -> None:
    """The short form of ``python -m benchmarks sigint`` (the full one: docs/durability.md)."""
    report = sigint_trials.run(6, rows=1_500, seed=11, window=(0.3, 0.95), quiet=True)
    text = "\n".join(report.lines())
    assert report.clean, text
    stopped = [trial for trial in report.trials if trial.cancelled_run]
    assert stopped, text  # some signal landed in a run (not at start-up, nor after the end)
    assert all(trial.exit_code == 130 for trial in stopped), text


def test_runs_terminated_at_random_points_leave_a_sound_store() -> None:
    report = sigint_trials.run(
        3, rows=1_500, seed=12, signum=signal.SIGTERM, window=(0.3, 0.95), quiet=True
    )
    text = "\n".join(report.lines())
    assert report.clean, text
    assert all(trial.exit_code == 143 for trial in report.trials if trial.cancelled_run), text


def test_ctrl_c_in_a_library_program_never_leaves_the_store_in_a_transaction(
    tmp_path: Path,
) -> None:
    """Trio raises KeyboardInterrupt wherever the signal lands, except in protected code."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.ki_cycles", str(tmp_path), "16", "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        preexec_fn=_default_signals,
    )
    assert done.returncode == 0, done.stderr
    cycles = json.loads(done.stdout.strip().splitlines()[-1])
    problems = [cycle for cycle in cycles if cycle["problem"] or not cycle["resumed"]]
    assert not problems, problems
    assert sum(cycle["interrupted"] for cycle in cycles) >= len(cycles) // 2, cycles


async def test_plays_resolvers_and_tools_stay_interruptible() -> None:
    """The engine's protection from Ctrl-C stops where the user's code begins."""
    protected: dict[str, bool] = {}

    async def tool(input: dict[str, int], call: trioplay.ToolCall) -> dict[str, int]:
        protected["tool"] = trio.lowlevel.currently_ki_protected()
        return input

    async def resolve(row: trioplay.Row, rc: trioplay.RowContext) -> int:
        protected["resolver"] = trio.lowlevel.currently_ki_protected()
        return (await rc.tool("t", {"i": row["i"]}))["i"]

    def step() -> int:
        protected["step"] = trio.lowlevel.currently_ki_protected()
        return 1

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, input: object) -> None:
        protected["play"] = trio.lowlevel.currently_ki_protected()
        await ctx.step("s", step)
        await ctx.dataset("d", [{"i": 1}]).with_column("x", resolve).run()

    async with trioplay.open_runtime(store="memory://", tools=registry(t=tool)) as rt:
        await rt.run(play, {})
    assert protected == {"play": False, "step": False, "resolver": False, "tool": False}
