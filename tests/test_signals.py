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
from typing import TYPE_CHECKING, Any

import pytest
import trio

import trioplay
from benchmarks import sigint_trials

from . import ki_cycles
from .support import registry

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120
# Rows of the short sigint trials: the play's finder takes milliseconds a call,
# so 600 rows run about a second, longer than Python's start-up, and most
# random signals land in the run.
TRIAL_ROWS = 600

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
                await trio.sleep(3600)

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
    # The run hangs until the signal: that it ends at all is the signal's doing.
    proc = start_hanging_run(tmp_path)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == code, err
    assert "run h: cancelled (play hang, attempt 1)" in out  # the summary, as after any run
    assert "interrupted: run h stopped; the same command resumes it" in err
    assert "Traceback" not in err
    status, receipts = stored(tmp_path)
    assert status == "cancelled"
    assert receipts.get("running", 0) == 0  # the leases were released
    assert receipts == {"pending": 5}


def test_a_second_signal_during_the_cleanup_exits_at_once(tmp_path: Path) -> None:
    # The tool holds up the cancellation for an hour (a shielded cleanup):
    # the process exits within TIMEOUT only by the second signal.
    proc = start_hanging_run(tmp_path, stubborn=True)
    proc.send_signal(signal.SIGINT)
    wait_for(tmp_path / "cleaning", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, err
    assert "exiting at once" in err
    status, _ = stored(tmp_path)
    # Like a kill: the next attempt on this machine takes the run's leases over.
    assert status == "running"


def test_runs_interrupted_at_random_points_leave_a_sound_store(tmp_path: Path) -> None:
    """The short form of ``python -m benchmarks sigint`` (the full one: docs/durability.md).

    Sound, not clean: how soon a process exits after its signal is the
    benchmark's to measure (on a busy machine it is slower, not wrong). Where
    the random delays land depends on the machine's speed; one more trial
    signals the run once 200 calls were paid, so one signal surely lands in
    a run that had begun.
    """
    report = sigint_trials.run(6, rows=TRIAL_ROWS, seed=11, window=(0.3, 0.95), quiet=True)
    text = "\n".join(report.lines())
    assert report.sound, text
    stopped = [trial for trial in report.trials if trial.cancelled_run]
    assert all(trial.exit_code == 130 for trial in stopped), text
    midway = sigint_trials.trial(
        tmp_path / "midway", TRIAL_ROWS, 0.0, signal.SIGINT, "cli", after_paid=200
    )
    assert midway.sound, midway
    assert (midway.cancelled_run, midway.exit_code) == (True, 130), midway


def test_runs_terminated_at_random_points_leave_a_sound_store() -> None:
    report = sigint_trials.run(
        3, rows=TRIAL_ROWS, seed=12, signum=signal.SIGTERM, window=(0.3, 0.95), quiet=True
    )
    text = "\n".join(report.lines())
    assert report.sound, text
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


class _Interrupter:
    """Ctrl-C at the n-th moment of a kind in a run: Trio's SIGINT handler, called there.

    Python runs a signal's handler in the frame it interrupts; calling Trio's
    handler with that frame does what a SIGINT arriving then does: raise
    ``KeyboardInterrupt`` there unless the code is protected, else deliver it
    at the next checkpoint. The random delays of ``tests.ki_cycles`` find
    such a moment only now and then; this visits each one of a small run.
    """

    def __init__(self) -> None:
        self.seen = 0
        self.at = 0

    def moment(self, frame: FrameType) -> None:
        self.seen += 1
        if self.seen == self.at:
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler)
            assert handler is not signal.default_int_handler  # Trio's
            handler(signal.SIGINT, frame)

    def each_moment(self, tmp_path: Path, run: Callable[[Path], None]) -> dict[str, list[int]]:
        """Run ``tests.ki_cycles``' play interrupted at each moment in turn; what each became.

        After each, the run resumes to the end. Trio handles SIGINT only
        where it is Python's own handler (not in a background job, where it
        is ignored), so that is set for the while.
        """
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self.seen, self.at = 0, 0
            run(tmp_path / "clean.db")
            moments = self.seen
            outcomes: dict[str, list[int]] = {}
            for self.at in range(1, moments + 1):
                db = tmp_path / f"at-{self.at}.db"
                self.seen = 0
                try:
                    run(db)
                except KeyboardInterrupt:
                    outcome = "interrupted"
                except BaseException as exc:
                    outcome = f"{type(exc).__name__} (from {type(exc.__cause__).__name__})"
                else:
                    outcome = "completed"
                status = ki_cycles.stored_status(db)
                outcomes.setdefault(f"{outcome}, then {status}", []).append(self.at)
                self.at = 0
                run(db)
                assert ki_cycles.stored_status(db) == "completed", outcomes
        finally:
            signal.signal(signal.SIGINT, previous)
        return outcomes


def _small_cycle(db: Path) -> None:
    async def bounded() -> None:
        with trio.fail_after(10):
            await ki_cycles.run_play(f"sqlite:///{db}", rows=4)

    trio.run(bounded)


def _assert_interrupted_cleanly(outcomes: dict[str, list[int]]) -> None:
    """Each interrupt raised KeyboardInterrupt (or landed after the end), never another error."""
    cleanly = {f"interrupted, then {status}" for status in ("cancelled", "completed", None)}
    assert set(outcomes) <= {*cleanly, "completed, then completed"}, outcomes
    assert "interrupted, then cancelled" in outcomes, outcomes


def test_ctrl_c_as_a_task_parks_is_a_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C as a task is about to park, at each park of a run in turn.

    The moment: the frame about to yield to Trio in
    ``trio.lowlevel.wait_task_rescheduled``, as the engine and the store
    call it. A caller that named itself as its call's owner and was
    interrupted before parking was woken later for nothing (a
    ``TrioInternalError``, the run left ``running``).
    """
    interrupter = _Interrupter()
    original = trio.lowlevel.wait_task_rescheduled

    async def wait_task_rescheduled(abort_func: Callable[[Any], trio.lowlevel.Abort]) -> Any:
        interrupter.moment(sys._getframe())
        return await original(abort_func)

    monkeypatch.setattr(trio.lowlevel, "wait_task_rescheduled", wait_task_rescheduled)
    _assert_interrupted_cleanly(interrupter.each_moment(tmp_path, _small_cycle))


def test_ctrl_c_as_an_engine_nursery_exits_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    """Ctrl-C as the exit of an ``async with`` in the engine begins, at each one of a run in turn.

    The moment: the entry of an ``__aexit__`` called from the engine's code,
    where Python checks for signals. An exit interrupted there never runs:
    a nursery left open corrupts Trio's nursery stack (a ``RuntimeError``
    or ``TrioInternalError``, the run recorded ``failed``).
    """
    interrupter = _Interrupter()
    engine = os.path.dirname(trioplay.__file__)

    def trace(frame: FrameType, event: str, arg: object) -> None:
        caller = frame.f_back
        if (
            event == "call"
            and frame.f_code.co_name == "__aexit__"
            and caller is not None
            and caller.f_code.co_filename.startswith(engine)
        ):
            interrupter.moment(frame)

    def traced(db: Path) -> None:
        sys.settrace(trace)
        try:
            _small_cycle(db)
        finally:
            sys.settrace(None)

    _assert_interrupted_cleanly(interrupter.each_moment(tmp_path, traced))


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


_SPAWN_MOMENTS = """
import sys
from pathlib import Path
from tests.test_signals import _Interrupter, _small_cycle, _assert_interrupted_cleanly

interrupter = _Interrupter()

def trace(frame, event, arg):
    caller = frame.f_back
    if (
        event == "call"
        and frame.f_code.co_name == "_activate_cancel_status"
        and caller is not None
        and caller.f_code.co_name == "spawn_impl"
    ):
        interrupter.moment(frame)

def traced(db):
    sys.settrace(trace)
    try:
        _small_cycle(db)
    finally:
        sys.settrace(None)

_assert_interrupted_cleanly(interrupter.each_moment(Path(sys.argv[1]), traced))
print("clean")
"""


def test_ctrl_c_as_the_engine_starts_a_task_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    """Ctrl-C inside ``nursery.start_soon``, at each task the engine starts in a run.

    Trio's ``start_soon`` is not protected: a ``KeyboardInterrupt`` raised in
    it, after the task was registered and before it was scheduled, left a
    task that never ran, and ``trio.run`` waited for it for ever. So this
    runs in a process of its own, bounded.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SPAWN_MOMENTS, str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_default_signals,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"a Ctrl-C as a task started hung the run: {exc.stderr!r}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("clean"), done.stdout
