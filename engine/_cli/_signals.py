"""Ctrl-C and SIGTERM during ``run`` and ``demo``: a cancellation of the run, not an exception.

Left to Trio, Ctrl-C raises ``KeyboardInterrupt`` wherever the signal lands,
which may be halfway through the engine's bookkeeping; SIGTERM (what process
managers send) kills the process outright. Either can leave the run
``running``, its receipts leased, and results the providers were paid for
unrecorded. So while a command runs, both signals go to a Trio signal
receiver instead (``trio.open_signal_receiver``), and a watcher task turns
the first one into the cancellation of the command's cancel scope: the run
then ends exactly as when a cancel scope around ``rt.run`` is cancelled
(docs/durability.md, "Cancellation"), the summary is printed, and the
command exits 130 (SIGINT) or 143 (SIGTERM).

A second signal while that cleanup runs exits at once (``os._exit``), as a
kill would: the run stays ``running`` and its receipts leased; the next
attempt on this machine takes them over at once (docs/durability.md, "A
crash").

A signal the command was started with ignored (SIGINT, in a background job
of a non-interactive shell) stays ignored, as Python leaves SIGINT alone then.

``run --dump-on SIGUSR1`` adds a :class:`TaskDump`: each time that signal
comes, every task of the process and what it awaits
(:func:`trioplay._awaits.task_tree`) is written to a file, replaced whole
(written beside it, then renamed), and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from .._awaits import task_tree
from .._groups import open_nursery, start_soon
from ._common import EXIT_INTERRUPTED, EXIT_TERMINATED

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODES = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}


@attrs.define
class Interrupt:
    """The signal that stopped a command (``None`` while none has), and the scope it cancels."""

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    received: signal.Signals | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.received or signal.SIGINT, EXIT_INTERRUPTED)


@attrs.frozen
class TaskDump:
    """On ``signum``, write the process's task tree to ``path`` (``run --dump-on``)."""

    signum: signal.Signals
    path: Path

    async def run(self, say: Callable[[str], None]) -> None:
        with trio.open_signal_receiver(self.signum) as signals:
            async for _ in signals:
                partial = self.path.with_name(self.path.name + ".partial")
                partial.write_text(task_tree(), encoding="utf-8")
                os.replace(partial, self.path)
                say(f"{self.signum.name}: wrote the tasks and what they await to {self.path}")


async def cancel_on_signals(
    body: Callable[[], Awaitable[T]],
    say: Callable[[str], None],
    dump: TaskDump | None = None,
) -> tuple[T | None, Interrupt]:
    """Run ``body()``; the first SIGINT or SIGTERM cancels it, a second exits the process.

    Returns what ``body`` returned (``None`` if the signal cancelled it) and
    the :class:`Interrupt`, whose ``received`` says whether a signal came.
    ``say`` prints a line (above the progress bar, if one is drawn);
    ``dump``, if given, writes the task tree on its signal meanwhile.
    """
    interrupt = Interrupt()
    result: T | None = None
    with contextlib.ExitStack() as stack:
        async with open_nursery() as nursery:
            listened = _listened()
            if listened:  # none: not the main thread, or every signal ignored
                signals = stack.enter_context(trio.open_signal_receiver(*listened))
                start_soon(nursery, _watch, signals, interrupt, say)
            if dump is not None:
                start_soon(nursery, dump.run, say)
            with interrupt.scope:
                result = await body()
            nursery.cancel_scope.cancel()
    return result, interrupt


def _listened() -> list[signal.Signals]:
    if threading.current_thread() is not threading.main_thread():
        return []
    return [signum for signum in SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]


async def _watch(
    signals: AsyncIterator[int], interrupt: Interrupt, say: Callable[[str], None]
) -> None:
    async for number in signals:
        signum = signal.Signals(number)
        if interrupt.received is None:
            interrupt.received = signum
            interrupt.scope.cancel()
            say(f"{signum.name}: stopping the run (send it again to exit at once)")
            continue
        say(
            f"{signum.name} again: exiting at once, without cleanup; the run stays running "
            "and the next attempt on this machine takes over its leases"
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_CODES[signum])
