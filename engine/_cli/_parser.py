"""The argument parser: every command, its options and its help text.

Each command sets ``command`` to its handler in ``_commands``. A mistyped
command or choice gets a "did you mean" (:class:`_Parser`), a run id is
checked as it is parsed (:func:`check_run_id`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ._common import CONFIG_FILE, DEMO_OUT, DEMO_STORE_URL, MAX_DEMO_ROWS
from ._options import (
    Commands,
    add_dump_options,
    add_output_options,
    add_run_outputs,
    add_store_option,
    check_run_id,
)
from ._retry import add_retry_command
from ._scenario import add_scenario_commands
from ._waits import add_wait_commands

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

    from . import _Session
    from ._options import Command


def _later(name: str, handlers: Callable[[], ModuleType] | None = None) -> Command:
    """The handler ``name`` of ``handlers()`` (``_commands``), imported when its command runs.

    The parser imports no handler module: ``--help``, ``--version`` and a
    usage error then load none of what the commands need (Trio, the
    runtime, the stores; docs/cli.md, "What a command loads").
    """

    def command(args: argparse.Namespace, session: _Session) -> int:
        handler: Command = getattr((handlers or _commands)(), name)
        return handler(args, session)

    command.__name__ = command.__qualname__ = name
    return command


def _commands() -> ModuleType:
    from . import _commands

    return _commands


def _runs() -> ModuleType:
    from . import _runs  # runs list and show: no Trio, no engine room

    return _runs


_cmd_config = _later("_cmd_config")
_cmd_demo = _later("_cmd_demo")
_cmd_export = _later("_cmd_export")
_cmd_run = _later("_cmd_run")
_cmd_runs_list = _later("_cmd_runs_list", _runs)
_cmd_runs_show = _later("_cmd_runs_show", _runs)
_cmd_timeline = _later("_cmd_timeline")

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
        import difflib  # only for a mistyped choice

        near = difflib.get_close_matches(str(value), names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise argparse.ArgumentError(
            action, f"invalid choice: {value!r} ({hint}the choices are: {listed})"
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # only for --version

    try:
        return f"trioplay {version('trioplay')}"
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "trioplay (version unknown: not installed)"


class _ShowVersion(argparse.Action):
    """``--version``: argparse's ``version`` action, but the version is read when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(_version())
        parser.exit()


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
    parser.add_argument("--version", action=_ShowVersion, help="print the version and exit")
    commands = Commands(parser, common)

    demo = commands.add(
        "demo",
        _cmd_demo,
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

    run = commands.add(
        "run",
        _cmd_run,
        help="run a play from a Python file",
        description="Run a play from FILE.py durably; rerunning the same command resumes it.",
        epilog=_TOOLS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("play", metavar="FILE.py[:PLAY]", help="the play file, and which play")
    run.add_argument("--input", metavar="JSON", help="the play's input as JSON (default: {})")
    run.add_argument("--csv", metavar="FILE", help='set input["csv"] to FILE')
    add_store_option(run)
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
    add_dump_options(run)

    timeline = commands.add(
        "timeline",
        _cmd_timeline,
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

    runs = commands.group("runs", help="list runs, or show one")
    runs_list = runs.add("list", _cmd_runs_list, help="recent runs")
    add_store_option(runs_list)
    runs_list.add_argument(
        "--limit", metavar="N", type=_positive_int, default=50, help="at most N runs (default: 50)"
    )
    _add_json_option(runs_list, "print the runs as a JSON array")
    runs_show = runs.add("show", _cmd_runs_show, help="one run in detail")
    runs_show.add_argument("run_id", metavar="RUN", type=check_run_id)
    add_store_option(runs_show)
    _add_json_option(runs_show, "print the run as a JSON object")

    export = commands.add(
        "export",
        _cmd_export,
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
    add_store_option(export)
    add_output_options(export)
    add_retry_command(commands)

    config = commands.add(
        "config",
        _cmd_config,
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
    add_store_option(config)
    _add_run_settings(config)
    add_scenario_commands(commands)
    add_wait_commands(commands)
    return parser


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
    add_run_outputs(parser)
    _add_json_option(parser, "print the summary as one JSON object (docs/cli.md has its keys)")


def _add_json_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--json", action="store_true", help=help)


def _limit(text: str) -> tuple[str, object]:
    from ._config import parse_limit  # the configuration's converter: only when --limit is given

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
