"""The ``trioplay`` command line (also ``python -m trioplay``).

Commands: ``demo``, ``run``, ``runs list``, ``runs show``, ``export``,
``config``, ``scenario list``, ``scenario run``, ``scenario sweep``; docs/cli.md describes
every one, and tests/test_cli_docs.py keeps it in step with ``--help``.
Each returns an exit code (``_common``): 0 success, 1 a failed run (or
an unexpected error, or a scenario whose expectations did not hold), 2 a
usage or input problem (bad arguments or configuration, a missing file, a bad store URL,
an output that would write over a file the command reads, or that cannot be written,
:class:`~trioplay.PlayInputError`, :class:`~trioplay.PlayDefinitionError`,
:class:`~trioplay.RunIdConflict`), 3 a completed run whose ``--out``
failed, 5 a run that failed because play or tool code raised ``SystemExit``,
``KeyboardInterrupt`` or another ``BaseException`` (:class:`~trioplay.PlayAborted`),
130 after Ctrl-C (SIGINT), 143 after SIGTERM: during ``run`` and
``demo`` either signal cancels the run, which ends as a cancelled run does,
and a second one exits at once (see ``_signals``). Errors are one line,
``error: ...``, on stderr; ``--debug`` adds the traceback.

Progress goes to stderr (see ``_progress``), summaries and tables to stdout,
and so do the log lines of ``trioplay.stall`` and of plays (``ctx.log``).
Loading a play file happens before Trio starts; everything that touches a
store runs inside one ``trio.run`` per command.

This module is one invocation: parse, set up logging, run the command, turn
what it raised into an exit code. The package sits on top of the library: it
imports ``trioplay.stores`` and ``trioplay.adapters`` freely (the rest of the
engine only lazily, where a store URL or a file reader needs one), and no
engine module outside it imports it, except ``__main__``, the other entry
point.

- ``_common``: exit codes, the demo's defaults, ``UsageError``, error lines
- ``_parser``: the argument parser
- ``_options``: what the commands' parsers share (``Commands``, the options of several)
- ``_config``: the configuration file and flags, structured with cattrs
- ``_commands``: the command handlers
- ``_playfile``: loading a play file, its play and its tools
- ``_export``: a dataset sheet to CSV or JSON Lines
- ``_paths``: the outputs of a command, checked before it starts
- ``_progress``: the progress bar or lines and the end-of-run summary
- ``_summary``: the end-of-run summary as JSON (``--json``)
- ``_signals``: Ctrl-C and SIGTERM as the cancellation of a run
- ``_demo``: the bundled ``enrich-leads`` play and its simulated tools
- ``_scenario``: ``scenario list``, ``run`` and ``sweep`` (virtual-time stall scenarios)
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from typing import TYPE_CHECKING

from .._errors import PlayAborted
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PLAY_ABORTED,
    EXIT_USAGE,
    INPUT_ERRORS,
    UsageError,
    _say,
    describe_error,
)
from ._parser import build_parser
from ._stall import STALL_LOGGER, stall_sentence

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    session = _Session(debug=getattr(args, "debug", False))
    with session.logging():
        try:
            code: int = args.command(args, session)
            return code
        except KeyboardInterrupt:
            _say("interrupted")
            return EXIT_INTERRUPTED
        except (UsageError, *INPUT_ERRORS) as exc:
            session.report_error(exc, usage=True)
            return EXIT_USAGE
        except PlayAborted as exc:  # before the run started: its play raised SystemExit, say
            session.report_error(exc, usage=False)
            return EXIT_PLAY_ABORTED
        except Exception as exc:
            session.report_error(exc, usage=False)
            return EXIT_FAILED


class _LogHandler(logging.Handler):
    """Log lines to stderr as it is now, or through ``sink`` (above a live progress bar).

    A warning that repeats (the same logger and message template: after a
    store failure, one per call that was in flight) is shown once; how many
    more there were is said by :meth:`say_repeats`. Stall lines
    (``trioplay.stall``) are periodic reports, each one news, and always
    shown, each as one sentence (:mod:`._stall`; ``--debug`` shows their
    JSON); with ``--debug`` every line is.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sink: Callable[[str], None] | None = None
        self.collapse = True
        self._repeats: dict[tuple[str, object], _Repeat] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if record.name == STALL_LOGGER:
                sentence = stall_sentence(record) if self.collapse else None
                text = f"{record.name}: {sentence}" if sentence is not None else text
            elif self.collapse and record.levelno >= logging.WARNING:
                key = (record.name, record.msg)
                seen = self._repeats.get(key)
                if seen is not None:
                    seen.more += 1
                    return
                self._repeats[key] = _Repeat(record.name, record.getMessage())
            self._write(text)
        except Exception:
            self.handleError(record)

    def say_repeats(self) -> None:
        """One line per repeated warning not shown; then start counting afresh."""
        repeats, self._repeats = self._repeats, {}
        for repeat in repeats.values():
            if repeat.more:
                first = repeat.message if len(repeat.message) <= 72 else repeat.message[:71] + "…"
                self._write(
                    f'{repeat.logger}: {repeat.more:,} more like "{first}" not shown '
                    "(--debug shows every one)"
                )

    def _write(self, text: str) -> None:
        if self.sink is not None:
            self.sink(text)
        else:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


# Plain classes, not attrs ones: this module is imported by every command,
# `--help` included, which need not load attrs (docs/cli.md).
class _Repeat:
    def __init__(self, logger: str, message: str) -> None:
        self.logger = logger
        self.message = message
        self.more = 0


class _Session:
    """Per-invocation settings: ``--debug`` and where log lines go."""

    def __init__(self, debug: bool) -> None:
        self.debug = debug
        self.handler = _LogHandler()

    @contextlib.contextmanager
    def logging(self) -> Iterator[None]:
        # Play logs (trioplay.play) are INFO, stall lines (trioplay.stall) WARNING.
        # psycopg's warnings (the PostgreSQL store's driver) take the same way,
        # so that they too print above a progress bar and are said once.
        self.handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self.handler.collapse = not self.debug
        logger = logging.getLogger("trioplay")
        level = logger.level
        logger.addHandler(self.handler)
        logger.setLevel(logging.DEBUG if self.debug else logging.INFO)
        driver = logging.getLogger("psycopg")
        driver.addHandler(self.handler)
        try:
            yield
        finally:
            self.handler.say_repeats()
            driver.removeHandler(self.handler)
            logger.removeHandler(self.handler)
            logger.setLevel(level)

    @contextlib.contextmanager
    def log_through(self, sink: Callable[[str], None]) -> Iterator[None]:
        self.handler.sink = sink
        try:
            yield
        finally:
            self.handler.say_repeats()  # before the summary, while the sink is live
            self.handler.sink = None

    def report_error(self, exc: BaseException, *, usage: bool) -> None:
        if self.debug:
            traceback.print_exception(exc, file=sys.stderr)
        _say(f"error: {describe_error(exc, usage=usage)}")
        if not usage and not self.debug:
            _say("(run with --debug for the traceback)")
