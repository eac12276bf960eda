"""Exceptions from the play's own code that are not ``Exception``\\s: which ones abort a run.

Play, resolver and tool code runs inside the engine's tasks. What it raises
unwinds through the engine; an ``Exception`` is a failure the engine knows
how to record, but ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``
and other ``BaseException``\\s are taken everywhere for "the process is
stopping": left alone, ``sys.exit(0)`` in a resolver ended the command line
with exit code 0 and no summary, and a ``KeyboardInterrupt`` raised by play
code was reported as the user's Ctrl-C ("the same command resumes it").
:func:`aborted` turns each into a :class:`PlayAborted`, at the three places
where the play's code is called: the play itself (``_runtime``), a
resolver (``_map/_runner``) and a tool or step (``_receipts/_execute``).

Three ``BaseException``\\s are not the play's to raise and go through as they
are: the engine's own suspension (``RowSuspended``, a row or map waiting
for an outside event), Trio's ``Cancelled`` (a cancel scope above) and a ``KeyboardInterrupt``
raised by Trio's own SIGINT handling (a real Ctrl-C in a program that lets
Trio handle it, which may land in play code, as Trio does not protect it).
Trio raises that one in its own code (the signal handler, or the delivery
to the main task), so the innermost frame of its traceback is in Trio's
package; one that play code raised has its own frame there. An exception
group holding either goes through too.
"""

from __future__ import annotations

import os

import trio

from ._errors import PlayAborted, RowSuspended

_TRIO_PACKAGE = os.path.dirname(trio.__file__) + os.sep


def aborted(error: BaseException, where: str) -> PlayAborted | None:
    """The :class:`PlayAborted` that ``error``, raised by ``where``'s code, stands for.

    ``None`` when ``error`` is not the play's abort: an ``Exception``, a
    suspension on a wait, a Trio cancellation, a real Ctrl-C, or a group
    holding one of the last three
    (raise it again as it is).
    """
    if isinstance(error, Exception) or not _aborts(error):
        return None
    failure = PlayAborted(where, error)
    failure.__cause__ = error
    return failure


def _aborts(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_aborts(inner) for inner in error.exceptions)
    if isinstance(error, trio.Cancelled | RowSuspended):
        return False
    if isinstance(error, KeyboardInterrupt):
        return not raised_by_trio(error)
    return True


def raised_by_trio(error: BaseException) -> bool:
    """Whether ``error`` was raised by Trio's own code: the innermost frame of its traceback."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(_TRIO_PACKAGE)
