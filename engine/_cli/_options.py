"""What the commands' parsers share: how a command is added, and the options of several.

``_parser`` and the modules that register commands of their own (``_retry``,
``_scenario``, ``_waits``) import these; like the parser, this module
imports no handler and nothing heavy (docs/cli.md, "What a command loads").
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .._plugins import DEFAULT_STORE_URL
from ._common import CONFIG_FILE

if TYPE_CHECKING:
    import signal
    from collections.abc import Callable

    from . import _Session

    Command = Callable[[argparse.Namespace, _Session], int]


class Commands:
    """The commands of a parser: each one gets the common options (``--debug``) and a handler."""

    def __init__(self, parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
        self.common = common
        self._parsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def add(self, name: str, command: Command, **settings: Any) -> argparse.ArgumentParser:
        """The parser of the command ``name``, which runs ``command``.

        ``settings`` are ``add_parser``'s (``help``, ``description``, ...).
        """
        parser = self._add_parser(name, settings)
        parser.set_defaults(command=command)
        return parser

    def group(self, name: str, **settings: Any) -> Commands:
        """A command made of commands of its own (``runs list``, ``scenario run``)."""
        return Commands(self._add_parser(name, settings), self.common)

    def _add_parser(self, name: str, settings: dict[str, Any]) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._parsers.add_parser(
            name, parents=[self.common], **settings
        )
        return parser


def check_run_id(text: str) -> str:
    """A run id as the command line accepts it: not empty, no control character, no ``/``.

    The run id names the run in the store and in file names people make of
    it (``trioplay export RUN ...``), and is shown on terminals.
    """
    if not text:
        raise argparse.ArgumentTypeError("a run id must not be empty")
    if "/" in text:
        raise argparse.ArgumentTypeError(f"a run id must not contain '/', got {text!r}")
    control = next((char for char in text if ord(char) < 32 or 127 <= ord(char) < 160), None)
    if control is not None:
        raise argparse.ArgumentTypeError(
            f"a run id must not contain control characters, such as {control!r}, got {text!r}"
        )
    return text


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL (default: the configuration's store, else {DEFAULT_STORE_URL})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"read this configuration file instead of the nearest {CONFIG_FILE} or pyproject.toml",
    )


def _dump_signal(text: str) -> signal.Signals:
    import signal

    name = text.upper() if text.upper().startswith("SIG") else "SIG" + text.upper()
    found = signal.Signals.__members__.get(name)
    if found is None:
        raise argparse.ArgumentTypeError(f"no signal {text!r} (SIGUSR1, say)")
    if found in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        raise argparse.ArgumentTypeError(f"{found.name} stops the run; use SIGUSR1 or SIGUSR2")
    return found


def add_dump_options(parser: argparse.ArgumentParser) -> None:
    """The live task dump of a running run (``run``, ``resume``)."""
    parser.add_argument(
        "--dump-on",
        metavar="SIGNAL",
        type=_dump_signal,
        help="on this signal (SIGUSR1), write every task and what it awaits to --dump-to; "
        "the run goes on",
    )
    parser.add_argument(
        "--dump-to",
        metavar="FILE",
        help="where --dump-on writes (default: trioplay-tasks-PID.txt)",
    )


def add_run_outputs(parser: argparse.ArgumentParser) -> None:
    """What a run writes besides the store: its rows' format and status, its recordings.

    ``run``, ``demo`` and ``resume`` take them (and ``--out``, each with its own help).
    """
    add_output_options(parser)
    _add_recording_options(parser)


def _add_recording_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events",
        metavar="FILE.jsonl",
        help="record the run's events to FILE, one JSON object a line (docs/events.md)",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE.json",
        help="write a Chrome trace of the run to FILE (opens in Perfetto, chrome://tracing)",
    )


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("csv", "jsonl"),
        help="output format (default: from the file name, else csv)",
    )
    parser.add_argument(
        "--status",
        choices=("completed", "failed", "all"),
        default="completed",
        help="which rows to write (default: completed)",
    )
