"""What a task awaits: its await stack, trimmed to the frames a reader can act on.

Trio's :meth:`trio.lowlevel.Task.iter_await_frames` walks a suspended
task's coroutine chain: every frame from the task's function down to the
innermost ``await``. Most of them are Trio's own (``sleep``,
``checkpoint``, ``wait_task_rescheduled``) or the standard library's;
:func:`await_stack` keeps the others, the play's code and trioplay's, and
names each ``function (file:line)``, innermost last. A file of trioplay is
named from the package (``trioplay/adapters/simulated.py``), any other by
its base name: the same code gives the same text on any machine, so a
scenario's stall lines stay byte-identical. The engine's own frames
(``trioplay/_*``) go without their line: the function says which step of
the engine the row is in, and a stall line does not change with every edit
of the engine.

The stall line carries the stack of its oldest row's task
(``oldest_awaiting``); :func:`task_tree` writes every task of the process
with its stack (``trioplay run --dump-on SIGUSR1``).
"""

from __future__ import annotations

import os
import sysconfig
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from types import FrameType

_PACKAGE = os.path.dirname(os.path.abspath(__file__))  # trioplay's own directory
_TRIO = os.path.dirname(os.path.abspath(trio.__file__))
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
_SKIPPED = (_TRIO + os.sep, _STDLIB + os.sep)

STACK_LIMIT = 6
"""How many frames a stall line keeps (the innermost ones)."""


def _kept(frame: FrameType) -> bool:
    path = frame.f_code.co_filename
    if not os.path.isabs(path):
        return not path.startswith("<")  # <frozen ...>, <string>: no one's code
    if path.startswith(_PACKAGE + os.sep):
        return True
    return not path.startswith(_SKIPPED) and "site-packages" not in path


def _named(frame: FrameType, lineno: int) -> str:
    code = frame.f_code
    path = code.co_filename
    if path.startswith(_PACKAGE + os.sep):
        shown = "trioplay/" + os.path.relpath(path, _PACKAGE).replace(os.sep, "/")
        if shown.startswith("trioplay/_"):  # the engine: its function says enough
            return f"{code.co_qualname} ({shown})"
    else:
        shown = os.path.basename(path)
    return f"{code.co_qualname} ({shown}:{lineno})"


def await_stack(task: trio.lowlevel.Task, limit: int = STACK_LIMIT) -> list[str]:
    """The play's and trioplay's frames ``task`` is suspended in, innermost last."""
    frames = [_named(frame, line) for frame, line in task.iter_await_frames() if _kept(frame)]
    return frames[-limit:]


def task_tree(root: trio.lowlevel.Task | None = None) -> str:
    """Every task under ``root`` (default: the run's root task), indented, with its stack.

    The calling task is running, not suspended: it is listed without frames.
    """
    root = root or trio.lowlevel.current_root_task()
    assert root is not None
    me = trio.lowlevel.current_task()
    lines: list[str] = []

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        pad = "  " * depth
        lines.append(f"{pad}task {task.name}" + (" (this dump)" if task is me else ""))
        if task is not me:
            lines.extend(f"{pad}    at {frame}" for frame in await_stack(task, limit=1000))
        for nursery in task.child_nurseries:
            for child in sorted(nursery.child_tasks, key=lambda t: t.name):
                walk(child, depth + 1)

    walk(root, 0)
    return "\n".join(lines) + "\n"
