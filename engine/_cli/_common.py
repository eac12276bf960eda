"""What every part of the command line shares: exit codes, the demo's
defaults, :class:`UsageError` and the one-line error report on stderr."""

from __future__ import annotations

import sys

from .._errors import (
    InvalidWait,
    PlayDefinitionError,
    PlayInputError,
    RunIdConflict,
    format_error,
)

EXIT_OK = 0
EXIT_FAILED = 1
"""The run failed (or something unexpected did)."""
EXIT_USAGE = 2
"""The command cannot run as given: arguments, configuration, play file or input."""
EXIT_EXPORT_FAILED = 3
"""The run completed, but writing ``--out`` failed: its rows are in the store."""
EXIT_WAITING = 4
"""The run is waiting for outside events: send them (``trioplay send-event``), then resume."""
EXIT_PLAY_ABORTED = 5
"""Play or tool code raised ``SystemExit``, ``KeyboardInterrupt`` or another
``BaseException`` (:class:`~trioplay.PlayAborted`): the run failed, whatever code it asked for."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT)."""
EXIT_TERMINATED = 143
"""SIGTERM."""

DEMO_STORE_URL = "sqlite:///.trioplay/demo.db"
"""The demo's own store, apart from the default one so that it never mixes with real runs."""
DEMO_OUT = "out/demo-leads.csv"
MAX_DEMO_ROWS = 100_000


class UsageError(Exception):
    """The command cannot start as given: exit code 2, one line of explanation."""


INPUT_ERRORS = (PlayInputError, PlayDefinitionError, RunIdConflict, InvalidWait)
"""The library's errors that mean the command was given the wrong play or input: exit code 2."""


def describe_error(exc: BaseException, *, usage: bool = False) -> str:
    """One line for ``exc``: its message (with the type unless it is a usage error)
    and the engine's notes on where it happened."""
    text = str(exc) if usage and str(exc) else format_error(exc)
    notes = [note.removeprefix("trioplay: ") for note in getattr(exc, "__notes__", ()) or ()]
    if notes:
        text += f" ({'; '.join(notes)})"
    return " ".join(text.split("\n"))


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
