"""``trioplay run --dump-on SIGUSR1``: the live task tree of a running run (issue 26, acceptance 5).

The run is a real ``trioplay`` process whose one tool waits for a file the
test writes; the test signals it, reads the dump while the run goes on,
then lets it finish.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trioplay._awaits import await_stack, task_tree

from .support import TRIOPLAY
from .test_signals import TIMEOUT, wait_for

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

GATED_PLAY = """
import pathlib, trio, trioplay
tools = trioplay.ToolRegistry()

@tools.tool("gated")
async def gated(input, call):
    pathlib.Path({started!r}).touch()
    while not pathlib.Path({go!r}).exists():
        await trio.sleep(0.02)  # gated.py:9
    return {{"ok": True}}

async def resolve(row, rc):
    return await rc.tool("gated", row)

@trioplay.play("gated")
async def play(ctx, input):
    await ctx.dataset("d", [{{"i": 1}}]).with_column("x", resolve).run()
"""


def test_a_signal_writes_the_task_tree_and_the_run_goes_on(tmp_path: Path) -> None:
    play = tmp_path / "gated.py"
    play.write_text(GATED_PLAY.format(started=str(tmp_path / "started"), go=str(tmp_path / "go")))
    dump = tmp_path / "tasks.txt"
    dumping = ["--dump-on", "SIGUSR1", "--dump-to", str(dump)]
    proc = subprocess.Popen(
        [str(TRIOPLAY), "run", str(play), "--store", "memory://", *dumping],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(tmp_path / "started", proc)
        proc.send_signal(signal.SIGUSR1)
        wait_for(dump, proc)
        text = dump.read_text()
        assert proc.poll() is None  # the run goes on
        # The row's task, down to the tool's own await, its line named.
        assert "    at resolve (gated.py:13)" in text, text
        assert "    at gated (gated.py:9)" in text, text
        assert "at Executor.run_owned (trioplay/_receipts/_execute.py)" in text
        assert text.startswith("task <init>") or text.startswith("task ")
        assert "(this dump)" in text
        (tmp_path / "go").touch()
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "1 completed" in out + err, out + err
    assert f"SIGUSR1: wrote the tasks and what they await to {dump}" in err


def test_a_stop_signal_is_refused_as_the_dump_signal(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(TRIOPLAY), "run", "x.py", "--dump-on", "TERM"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2
    assert "SIGTERM stops the run; use SIGUSR1 or SIGUSR2" in done.stderr


async def test_the_stack_keeps_the_callers_frames_and_drops_trios() -> None:
    async def waits_here(ready: trio.Event) -> None:
        ready.set()
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ready = trio.Event()
            nursery.start_soon(waits_here, ready, name="the-waiter")
            await ready.wait()
            await trio.lowlevel.checkpoint()
            [child] = nursery.child_tasks
            stack = await_stack(child)
            assert len(stack) == 1
            assert stack[0].startswith(
                "test_the_stack_keeps_the_callers_frames_and_drops_trios.<locals>.waits_here "
                "(test_task_dump.py:"
            )
            tree = task_tree()
            assert "task the-waiter\n" in tree
            assert f"    at {stack[0]}\n" in tree
            nursery.cancel_scope.cancel()
