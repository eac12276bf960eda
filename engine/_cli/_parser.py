"""The argument parser: every command, its options and its help text.

Each command sets ``command`` to its handler in ``_commands``. A mistyped
command or choice gets a "did you mean" (:class:`_Parser`), a run id is
checked as it is parsed (:func:`check_run_id`).
"""

from __future__ import annotations

import argparse
import difflib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

from .._runtime import DEFAULT_STORE_URL
from ._commands import (
    _cmd_config,
    _cmd_demo,
    _cmd_export,
    _cmd_run,
    _cmd_runs_list,
    _cmd_runs_show,
    _cmd_timeline,
)
from ._common import DEMO_OUT, DEMO_STORE_URL, MAX_DEMO_ROWS
from ._config import CONFIG_FILE, parse_limit
from ._retry import add_retry_command
from ._scenario import add_scenario_commands
from ._waits import add_wait_commands

_TOOLS_HELP = """\
How `trioplay run` finds things in FILE.py:

  the play   FILE.py:NAME picks the attribute NAME (or the play whose
             @trioplay.play name is NAME). Without :NAME, the one function
             decorated with @trioplay.play, else a function named `play`.
  its tools  a module-level `tools`: either a trioplay.ToolRegistry or a
             function `tools()` that returns one. No `tools`: no tools.
  its input  --input JSON (default {}); --csv PATH sets input["csv"].
  settings   the nearest trioplay.toml or [tool.trioplay] in pyproject.toml,
             from FILE.py's folder up; flags replace its values.
             `trioplay config FILE.py` shows what a run would use.

The run id defaults to one derived from the play name and the input, so
running the same command again resumes the run: committed rows are skipped
and completed tool calls are replayed from their receipts, not paid twice.

example:
  trioplay run examples/enrich_leads.py --csv engine/_demo_data/leads.csv \\
      --out out/leads.csv
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose "invalid choice" says the nearest choice.

    Its sub-parsers are made of this class too (``add_subparsers`` takes the
    parent's class), so a mistyped verb of ``runs`` or ``scenario`` gets it.
    """

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(choice) for choice in choices]
        listed = ", ".join(repr(name) for name in names)
        near = difflib.get_close_matches(str(value), names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise argparse.ArgumentError(
            action, f"invalid choice: {value!r} ({hint}the choices are: {listed})"
        )


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


def _version() -> str:
    try:
        return f"trioplay {package_version('trioplay')}"
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "trioplay (version unknown: not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each command sets ``command`` to its handler."""
    common = _Parser(add_help=False)
    # SUPPRESS: a subcommand's default must not undo a --debug given before it.
    # The action is shared by every parser made from `common`, so no parser
    # may set_defaults(debug=...): that changes the default of all of them.
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )

    parser = _Parser(
        prog="trioplay",
        description="Run durable dataset-enrichment plays on Trio.",
        parents=[common],
    )
    parser.add_argument(
        "--version", action="version", version=_version(), help="print the version and exit"
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run the bundled example play (no network needed)",
        description=(
            "Run the bundled enrich-leads play over the bundled leads CSV on simulated "
            "providers, write the enriched rows and print a summary. Run it twice: the "
            "second run replays every call from its receipts."
        ),
    )
    demo.add_argument(
        "--store",
        metavar="URL",
        default=DEMO_STORE_URL,
        help=f"store URL (default: {DEMO_STORE_URL})",
    )
    demo.add_argument(
        "--rows",
        metavar="N",
        type=_demo_rows,
        default=None,
        help="use N generated leads instead of the bundled file (the same first rows)",
    )
    demo.add_argument(
        "--out", metavar="FILE", default=DEMO_OUT, help=f"output file (default: {DEMO_OUT})"
    )
    _add_run_outputs(demo)
    demo.set_defaults(command=_cmd_demo)

    run = commands.add_parser(
        "run",
        parents=[common],
        help="run a play from a Python file",
        description="Run a play from FILE.py durably; rerunning the same command resumes it.",
        epilog=_TOOLS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("play", metavar="FILE.py[:PLAY]", help="the play file, and which play")
    run.add_argument("--input", metavar="JSON", help="the play's input as JSON (default: {})")
    run.add_argument("--csv", metavar="FILE", help='set input["csv"] to FILE')
    _add_store_option(run)
    _add_run_settings(run)
    run.add_argument(
        "--run-id",
        metavar="RUN",
        type=check_run_id,
        help="the run id (default: derived from the play and input)",
    )
    run.add_argument(
        "--out",
        metavar="FILE",
        help="export the datasets the run wrote: one dataset to FILE (- for standard "
        "output), several to FILE-stem.<dataset>.<ext>",
    )
    _add_run_outputs(run)
    run.set_defaults(command=_cmd_run)

    timeline = commands.add_parser(
        "timeline",
        parents=[common],
        help="draw the timeline of a recorded run as SVG",
        description=(
            "Draw the events a run recorded (run --events FILE.jsonl) as one SVG picture: "
            "rows in flight by phase, commits per interval, provider concurrency and the "
            "stall lines, on one time axis."
        ),
    )
    timeline.add_argument("events", metavar="EVENTS.jsonl", help="the events of a run")
    timeline.add_argument(
        "--out",
        metavar="FILE.svg",
        help="the picture to write (- for standard output; default: EVENTS with .svg)",
    )
    timeline.set_defaults(command=_cmd_timeline)

    runs = commands.add_parser("runs", parents=[common], help="list runs, or show one")
    runs_commands = runs.add_subparsers(title="commands", metavar="COMMAND", required=True)
    runs_list = runs_commands.add_parser("list", parents=[common], help="recent runs")
    _add_store_option(runs_list)
    runs_list.add_argument(
        "--limit", metavar="N", type=_positive_int, default=50, help="at most N runs (default: 50)"
    )
    _add_json_option(runs_list, "print the runs as a JSON array")
    runs_list.set_defaults(command=_cmd_runs_list)
    runs_show = runs_commands.add_parser("show", parents=[common], help="one run in detail")
    runs_show.add_argument("run_id", metavar="RUN", type=check_run_id)
    _add_store_option(runs_show)
    _add_json_option(runs_show, "print the run as a JSON object")
    runs_show.set_defaults(command=_cmd_runs_show)

    export = commands.add_parser(
        "export",
        parents=[common],
        help="write a run's dataset to a CSV or JSON Lines file",
        description=(
            "Stream a dataset sheet to a file, in input order. CSV columns are every "
            "field any row has, in order of first appearance; nested values are written "
            "as JSON. Failed rows carry `_error`; with --status all, rows carry `_status`."
        ),
    )
    export.add_argument("run_id", metavar="RUN", type=check_run_id)
    export.add_argument("dataset", metavar="DATASET")
    export.add_argument(
        "--out", metavar="FILE", required=True, help="the file to write (- for standard output)"
    )
    _add_store_option(export)
    _add_output_options(export)
    export.set_defaults(command=_cmd_export)
    add_retry_command(commands, common, run_id=check_run_id, store_option=_add_store_option)

    config = commands.add_parser(
        "config",
        parents=[common],
        help="show the configuration a command would use, and where each value comes from",
        description=(
            f"Print the effective configuration as TOML: the nearest {CONFIG_FILE} or "
            "[tool.trioplay] in pyproject.toml, looked for from PATH (a play file or a "
            "folder; default: the current folder) upwards, with the flags on top. Each "
            "value is commented with where it came from."
        ),
    )
    config.add_argument(
        "path", metavar="PATH", nargs="?", help="a play file or a folder (default: .)"
    )
    _add_store_option(config)
    _add_run_settings(config)
    config.set_defaults(command=_cmd_config)
    add_scenario_commands(commands, common)
    add_wait_commands(
        commands,
        common,
        add_store=_add_store_option,
        run_id=check_run_id,
        add_outputs=_add_output_options,
        add_recording=_add_recording_options,
    )
    return parser


def _add_store_option(parser: argparse.ArgumentParser) -> None:
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


def _add_run_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-network",
        metavar="CIDR",
        action="append",
        dest="allow_networks",
        help="let fetch reach this non-public network, e.g. 127.0.0.0/8 (repeatable; "
        "replaces the configuration's allow_networks)",
    )
    parser.add_argument(
        "--limit",
        metavar="NAME=VALUE",
        action="append",
        dest="limits",
        type=_limit,
        help="set one trioplay.Limits field, e.g. page_size=500 (repeatable)",
    )


def _add_run_outputs(parser: argparse.ArgumentParser) -> None:
    """What ``run`` and ``demo`` write besides the store: rows, recordings, the summary."""
    _add_output_options(parser)
    _add_recording_options(parser)
    _add_json_option(parser, "print the summary as one JSON object (docs/cli.md has its keys)")


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


def _add_json_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--json", action="store_true", help=help)


def _add_output_options(parser: argparse.ArgumentParser) -> None:
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


def _limit(text: str) -> tuple[str, object]:
    try:
        return parse_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _demo_rows(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_DEMO_ROWS:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEMO_ROWS:,}, got {value:,}")
    return value
