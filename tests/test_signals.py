"""Ctrl-C in a library program: the store stays sound, the user's code stays interruptible.

The library test runs many interrupted cycles in a child process (a signal
raised in the pytest process itself would stop the session).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import trioplay

from .support import registry

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _default_signals() -> None:
    # The test may run as a background job, with SIGINT ignored: the child
    # should see the signal as a terminal's Ctrl-C delivers it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


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
