"""The ``trioplay`` command line (also ``python -m trioplay``).

Commands: ``demo``, ``run``, ``runs list``, ``runs show``, ``export``. Each
returns an exit code: 0 success, 1 a failed run (or an unexpected error), 2 a
usage or input problem (bad arguments, a missing file, a bad store URL,
:class:`~trioplay.PlayInputError`, :class:`~trioplay.PlayDefinitionError`),
130 when interrupted with Ctrl-C. Errors are one line, ``error: ...``, on
stderr; ``--debug`` adds the traceback.

Progress goes to stderr (see ``_progress``), summaries and tables to stdout,
and so do the log lines of ``trioplay.stall`` and of plays (``ctx.log``).
Loading a play file happens before Trio starts; everything that touches a
store runs inside one ``trio.run`` per command.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import inspect
import io
import json
import logging
import re
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._errors import PlayDefinitionError, PlayInputError, format_error
from .._runtime import DEFAULT_STORE_URL, Play, open_runtime, play_name
from .._tools import ToolRegistry
from ._progress import OutputFile, RunReporter, format_summary

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
    from types import ModuleType

    from .._records import RowStatus, SheetRow
    from .._store import Store

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEMO_STORE_URL = "sqlite:///.trioplay/demo.db"
"""The demo's own store, apart from the default one so that it never mixes with real runs."""
DEMO_OUT = "out/demo-leads.csv"
MAX_DEMO_ROWS = 100_000

Format = Literal["csv", "jsonl"]
StatusFilter = Literal["completed", "failed", "all"]

_EXPORT_PAGE = 1000
_EXTRA_COLUMNS = ("_status", "_error")

log = logging.getLogger("trioplay")


class UsageError(Exception):
    """The command cannot start as given: exit code 2, one line of explanation."""


# -- entry point --------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    session = _Session(debug=args.debug)
    with session.logging():
        try:
            code: int = args.command(args, session)
            return code
        except KeyboardInterrupt:
            _say("interrupted")
            return EXIT_INTERRUPTED
        except (UsageError, PlayInputError, PlayDefinitionError) as exc:
            session.report_error(exc, usage=True)
            return EXIT_USAGE
        except Exception as exc:
            session.report_error(exc, usage=False)
            return EXIT_FAILED


_TOOLS_HELP = """\
How `trioplay run` finds things in FILE.py:

  the play   FILE.py:NAME picks the attribute NAME (or the play whose
             @trioplay.play name is NAME). Without :NAME, the one function
             decorated with @trioplay.play, else a function named `play`.
  its tools  a module-level `tools`: either a trioplay.ToolRegistry or a
             function `tools()` that returns one. No `tools`: no tools.
  its input  --input JSON (default {}); --csv PATH sets input["csv"].

The run id defaults to one derived from the play name and the input, so
running the same command again resumes the run: committed rows are skipped
and completed tool calls are replayed from their receipts, not paid twice.

example:
  trioplay run examples/enrich_leads.py --csv engine/_demo_data/leads.csv \\
      --out out/leads.csv
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each command sets ``command`` to its handler."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's default must not undo a --debug given before it.
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )

    parser = argparse.ArgumentParser(
        prog="trioplay",
        description="Run durable dataset-enrichment plays on Trio.",
        parents=[common],
    )
    parser.set_defaults(debug=False)
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
        "--store", default=DEMO_STORE_URL, help=f"store URL (default: {DEMO_STORE_URL})"
    )
    demo.add_argument(
        "--rows",
        type=_demo_rows,
        default=None,
        help="use N generated leads instead of the bundled file (the same first rows)",
    )
    demo.add_argument("--out", default=DEMO_OUT, help=f"output file (default: {DEMO_OUT})")
    _add_output_options(demo)
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
    run.add_argument(
        "--store", default=DEFAULT_STORE_URL, help=f"store URL (default: {DEFAULT_STORE_URL})"
    )
    run.add_argument("--run-id", help="the run id (default: derived from the play and input)")
    run.add_argument(
        "--out",
        help="export the datasets the run wrote: one dataset to FILE, several to "
        "FILE-stem.<dataset>.<ext>",
    )
    _add_output_options(run)
    run.set_defaults(command=_cmd_run)

    runs = commands.add_parser("runs", parents=[common], help="list runs, or show one")
    runs_commands = runs.add_subparsers(title="commands", metavar="COMMAND", required=True)
    runs_list = runs_commands.add_parser("list", parents=[common], help="recent runs")
    _add_store_option(runs_list)
    runs_list.add_argument("--limit", type=_positive_int, default=50, help="at most N runs")
    runs_list.set_defaults(command=_cmd_runs_list)
    runs_show = runs_commands.add_parser("show", parents=[common], help="one run in detail")
    runs_show.add_argument("run_id", metavar="RUN")
    _add_store_option(runs_show)
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
    export.add_argument("run_id", metavar="RUN")
    export.add_argument("dataset", metavar="DATASET")
    export.add_argument("--out", required=True, help="the file to write")
    _add_store_option(export)
    _add_output_options(export)
    export.set_defaults(command=_cmd_export)
    return parser


def _add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default=DEFAULT_STORE_URL, help=f"store URL (default: {DEFAULT_STORE_URL})"
    )


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


# -- session: logging and error reports ---------------------------------------


class _LogHandler(logging.Handler):
    """Log lines to stderr as it is now, or through ``sink`` (above a live progress bar)."""

    def __init__(self) -> None:
        super().__init__()
        self.sink: Callable[[str], None] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if self.sink is not None:
                self.sink(text)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:
            self.handleError(record)


@attrs.define
class _Session:
    """Per-invocation settings: ``--debug`` and where log lines go."""

    debug: bool
    handler: _LogHandler = attrs.field(factory=_LogHandler)

    @contextlib.contextmanager
    def logging(self) -> Iterator[None]:
        # Play logs (trioplay.play) are INFO, stall lines (trioplay.stall) WARNING.
        self.handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger = logging.getLogger("trioplay")
        level = logger.level
        logger.addHandler(self.handler)
        logger.setLevel(logging.DEBUG if self.debug else logging.INFO)
        try:
            yield
        finally:
            logger.removeHandler(self.handler)
            logger.setLevel(level)

    @contextlib.contextmanager
    def log_through(self, sink: Callable[[str], None]) -> Iterator[None]:
        self.handler.sink = sink
        try:
            yield
        finally:
            self.handler.sink = None

    def report_error(self, exc: BaseException, *, usage: bool) -> None:
        if self.debug:
            traceback.print_exception(exc, file=sys.stderr)
        _say(f"error: {describe_error(exc, usage=usage)}")
        if not usage and not self.debug:
            _say("(run with --debug for the traceback)")


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


# -- stores -------------------------------------------------------------------


def _store_for(url: str, *, must_exist: bool = False) -> Store:
    """The store for ``url``, not yet opened; :class:`UsageError` if the URL is bad.

    With ``must_exist``, a SQLite file that is not there is an error rather
    than a new empty database (reading commands should not create stores).
    """
    from trioplay.stores import open_store  # stores depend on the engine, not back

    try:
        store = open_store(url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if must_exist and url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path != ":memory:" and not Path(path).exists():
            hint = ""
            demo_path = DEMO_STORE_URL.removeprefix("sqlite:///")
            if url == DEFAULT_STORE_URL and Path(demo_path).exists():
                hint = (
                    f"; `trioplay demo` keeps its runs in {DEMO_STORE_URL}:"
                    f" add --store {DEMO_STORE_URL}"
                )
            raise UsageError(f"no store at {url} (the file {path} does not exist){hint}")
    return store


@contextlib.asynccontextmanager
async def _opened(store: Store) -> AsyncIterator[Store]:
    await store.open()
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


# -- demo and run -------------------------------------------------------------


@attrs.frozen
class _RunSpec:
    play: Play
    tools: ToolRegistry
    input: Any
    run_id: str | None
    store: Store
    out: str | None
    format: Format | None
    status: StatusFilter


@attrs.frozen
class _Finished:
    error: Exception | None
    sheets: dict[str, dict[str, int]]
    outputs: list[OutputFile]


def _cmd_demo(args: argparse.Namespace, session: _Session) -> int:
    from . import _demo  # the demo imports the adapters; only load it when asked

    store = _store_for(args.store)
    rows: int | None = args.rows
    with contextlib.ExitStack() as stack:
        if rows is None or rows == _demo.BUNDLED_ROWS:
            rows = _demo.BUNDLED_ROWS
            csv_path = stack.enter_context(_demo.bundled_csv())
        else:
            # Generated leads are the bundled ones extended (or cut short), so
            # `--rows 200` runs the first 200 rows of the bundled file.
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="trioplay-demo-"))
            csv_path = Path(folder) / f"leads-{rows}.csv"
            _demo.write_leads_csv(csv_path, rows)
        spec = _RunSpec(
            play=_demo.enrich_leads,
            tools=_demo.tools(),
            input={"csv": str(csv_path)},
            # Fixed, not derived from the input: the CSV's path depends on where
            # trioplay is installed, and the demo should resume wherever it runs.
            run_id=f"demo-{rows}",
            store=store,
            out=args.out,
            format=args.format,
            status=args.status,
        )
        return _execute(spec, session)


def _cmd_run(args: argparse.Namespace, session: _Session) -> int:
    path, name = split_play_ref(args.play)
    input = _parse_input(args.input, args.csv)
    store = _store_for(args.store)
    with _importable_from(path.parent):
        module = load_play_module(path)
        play = find_play(module, path, name)
        tools = find_tools(module, path)
        spec = _RunSpec(
            play=play,
            tools=tools,
            input=input,
            run_id=args.run_id,
            store=store,
            out=args.out,
            format=args.format,
            status=args.status,
        )
        return _execute(spec, session)


def _parse_input(text: str | None, csv_path: str | None) -> Any:
    input: Any = {}
    if text is not None:
        try:
            input = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--input is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            ) from None
    if csv_path is not None:
        if not isinstance(input, dict):
            raise UsageError(f"--csv needs --input to be a JSON object, got {text}")
        input["csv"] = csv_path
    return input


def _execute(spec: _RunSpec, session: _Session) -> int:
    reporter = RunReporter()
    try:
        with session.log_through(reporter.write_line):
            finished = trio.run(_run_and_export, spec, reporter)
    except KeyboardInterrupt:
        reporter.close()
        run_id = reporter.outcome.run_id
        if run_id is not None:
            _say(f"interrupted: run {run_id} stopped; the same command resumes it")
        else:
            _say("interrupted")
        return EXIT_INTERRUPTED
    finally:
        reporter.close()
    print(
        format_summary(
            reporter.outcome,
            list(reporter.maps.values()),
            sheets=finished.sheets,
            outputs=finished.outputs,
        )
    )
    sys.stdout.flush()
    if finished.error is not None:
        session.report_error(finished.error, usage=False)
        return EXIT_FAILED
    return EXIT_OK


async def _run_and_export(spec: _RunSpec, reporter: RunReporter) -> _Finished:
    async with open_runtime(store=spec.store, tools=spec.tools, on_event=reporter) as rt:
        error: Exception | None = None
        try:
            await rt.run(spec.play, spec.input, run_id=spec.run_id)
        except (PlayInputError, PlayDefinitionError):
            raise  # the command was wrong, not the run: exit 2, no summary
        except Exception as exc:
            error = exc
        run_id = reporter.outcome.run_id or spec.run_id
        if run_id is None:  # the run never started (the store refused it)
            if error is not None:
                raise error
            return _Finished(None, {}, [])
        datasets = await rt.store.list_datasets(run_id)
        sheets = {name: await rt.store.count_rows(run_id, name) for name in datasets}
        outputs: list[OutputFile] = []
        if error is None and spec.out is not None and datasets:
            for name, path in _output_paths(spec.out, datasets).items():
                fmt = spec.format or format_for(path)
                count = await export_dataset(
                    rt.store, run_id, name, path, fmt=fmt, status=spec.status
                )
                outputs.append(OutputFile(str(path), name, count))
        return _Finished(error, sheets, outputs)


def _output_paths(out: str, datasets: Sequence[str]) -> dict[str, Path]:
    path = Path(out)
    if len(datasets) == 1:
        return {datasets[0]: path}
    return {name: path.with_name(f"{path.stem}.{name}{path.suffix}") for name in datasets}


# -- loading a play file --------------------------------------------------------


def split_play_ref(ref: str) -> tuple[Path, str | None]:
    """``"file.py:name"`` -> ``(Path("file.py"), "name")``; ``"file.py"`` -> name ``None``."""
    head, sep, name = ref.rpartition(":")
    if sep and head and name and not re.search(r"[/\\]", name) and not Path(ref).exists():
        return Path(head), name
    return Path(ref), None


def load_play_module(path: Path) -> ModuleType:
    """Import ``path`` as a fresh module; :class:`UsageError` if it cannot be read."""
    if not path.exists():
        raise UsageError(f"play file not found: {path}")
    if not path.is_file():
        raise UsageError(f"play file is not a file: {path}")
    module_name = "_trioplay_play_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}: a play file is a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses, pickling and the like look here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise PlayDefinitionError(f"{path}: importing it failed: {format_error(exc)}") from exc
    return module


@contextlib.contextmanager
def _importable_from(folder: Path) -> Iterator[None]:
    """Let the play import modules beside it, as ``python FILE.py`` would."""
    entry = str(folder.resolve())
    if entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def _is_play_function(obj: object) -> bool:
    from .. import _runtime

    return callable(obj) and obj is not _runtime.play and not isinstance(obj, type)


def find_play(module: ModuleType, path: Path, name: str | None) -> Play:
    """The play ``name`` in ``module`` (see ``trioplay run --help``)."""
    decorated: dict[int, tuple[str, Any]] = {}
    for attr, obj in vars(module).items():
        if _is_play_function(obj) and getattr(obj, "__trioplay_name__", None) is not None:
            decorated.setdefault(id(obj), (attr, obj))
    plays = list(decorated.values())
    listing = ", ".join(_describe_play(attr, obj) for attr, obj in plays) or "none"
    chosen: Any = None
    if name is not None:
        chosen = getattr(module, name, None)
        if chosen is None:
            chosen = next(
                (obj for _, obj in plays if getattr(obj, "__trioplay_name__", None) == name),
                None,
            )
        if chosen is None:
            raise UsageError(f"{path} has no play {name!r}; plays in it: {listing}")
        label = f"{path}:{name}"
    elif len(plays) == 1:
        chosen = plays[0][1]
        label = f"{path}:{plays[0][0]}"
    elif len(plays) > 1:
        raise UsageError(f"{path} has several plays ({listing}); pick one with {path}:NAME")
    else:
        chosen = getattr(module, "play", None)
        if not _is_play_function(chosen):
            raise UsageError(
                f"{path} has no play: decorate an async function with @trioplay.play(...) "
                "or name it `play`"
            )
        label = f"{path}:play"
    if not _is_play_function(chosen) or not inspect.iscoroutinefunction(chosen):
        raise PlayDefinitionError(
            f"{label} is not a play: a play is an async function (ctx, input); "
            f"plays in {path}: {listing}"
        )
    play: Play = chosen
    return play


def _describe_play(attr: str, obj: Any) -> str:
    name = play_name(obj)
    return attr if name == attr else f"{attr} ({name})"


def find_tools(module: ModuleType, path: Path) -> ToolRegistry:
    """The module's ``tools``: a :class:`ToolRegistry` or a function returning one."""
    tools = getattr(module, "tools", None)
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, ToolRegistry):
        return tools
    if callable(tools):
        try:
            made = tools()
        except Exception as exc:
            raise PlayDefinitionError(f"{path}: tools() failed: {format_error(exc)}") from exc
        if isinstance(made, ToolRegistry):
            return made
        raise PlayDefinitionError(
            f"{path}: tools() must return a trioplay.ToolRegistry, got {type(made).__name__}"
        )
    raise PlayDefinitionError(
        f"{path}: `tools` must be a trioplay.ToolRegistry or a function returning one, "
        f"got {type(tools).__name__}"
    )


# -- runs list / show -------------------------------------------------------------


def _cmd_runs_list(args: argparse.Namespace, session: _Session) -> int:
    store = _store_for(args.store, must_exist=True)
    text = trio.run(_runs_table, store, args.limit)
    print(text)
    return EXIT_OK


async def _runs_table(store: Store, limit: int) -> str:
    async with _opened(store):
        runs = await store.list_runs(limit=limit)
        if not runs:
            return f"no runs in {store.url}"
        table = [("RUN ID", "PLAY", "STATUS", "ATTEMPT", "UPDATED", "ROWS")]
        for record in runs:
            rows = 0
            for dataset in await store.list_datasets(record.run_id):
                rows += sum((await store.count_rows(record.run_id, dataset)).values())
            table.append(
                (
                    record.run_id,
                    record.play,
                    record.status,
                    str(record.attempt),
                    _timestamp(record.updated_at),
                    f"{rows:,}",
                )
            )
    return _format_table(table, right=(3, 5))


def _format_table(table: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def _cmd_runs_show(args: argparse.Namespace, session: _Session) -> int:
    store = _store_for(args.store, must_exist=True)
    print(trio.run(_run_details, store, args.run_id))
    return EXIT_OK


async def _run_details(store: Store, run_id: str) -> str:
    async with _opened(store):
        record = await store.get_run(run_id)
        if record is None:
            raise UsageError(f"no run {run_id!r} in {store.url} (`trioplay runs list` lists them)")
        datasets = {
            name: await store.count_rows(run_id, name) for name in await store.list_datasets(run_id)
        }
        receipts = await store.count_receipts(run_id)
    lines = [
        f"run:      {record.run_id}",
        f"play:     {record.play}",
        f"status:   {record.status}",
        f"attempts: {record.attempt}",
        f"created:  {_timestamp(record.created_at)}",
        f"updated:  {_timestamp(record.updated_at)}",
        f"input:    {record.input_json}",
    ]
    if record.error:
        lines.append(f"error:    {record.error}")
    if record.stats_json:
        try:
            stats = json.loads(record.stats_json)
        except ValueError:
            stats = {}
        if isinstance(stats, dict) and stats:
            shown = ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in stats.items())
            lines.append(f"stats (last attempt): {shown}")
    lines.append("datasets:" if datasets else "datasets: none")
    for name, counts in datasets.items():
        completed, failed = counts.get("completed", 0), counts.get("failed", 0)
        lines.append(f"  {name}: {completed:,} completed, {failed:,} failed")
    if receipts:
        shown = ", ".join(f"{count:,} {status}" for status, count in sorted(receipts.items()))
        lines.append(f"receipts: {shown}")
    else:
        lines.append("receipts: none")
    return "\n".join(lines)


# -- export ---------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace, session: _Session) -> int:
    store = _store_for(args.store, must_exist=True)
    path = Path(args.out)
    fmt: Format = args.format or format_for(path)
    count = trio.run(_export_command, store, args.run_id, args.dataset, path, fmt, args.status)
    print(f"{path}: {count:,} rows of {args.dataset} (run {args.run_id})")
    return EXIT_OK


async def _export_command(
    store: Store, run_id: str, dataset: str, path: Path, fmt: Format, status: StatusFilter
) -> int:
    async with _opened(store):
        if await store.get_run(run_id) is None:
            raise UsageError(f"no run {run_id!r} in {store.url} (`trioplay runs list` lists them)")
        datasets = await store.list_datasets(run_id)
        if dataset not in datasets:
            known = ", ".join(datasets) or "none"
            raise UsageError(f"run {run_id!r} has no dataset {dataset!r}; its datasets: {known}")
        return await export_dataset(store, run_id, dataset, path, fmt=fmt, status=status)


def format_for(path: Path) -> Format:
    """``jsonl`` for ``.jsonl``/``.ndjson`` files, else ``csv``."""
    return "jsonl" if path.suffix.lower() in (".jsonl", ".ndjson") else "csv"


async def export_dataset(
    store: Store,
    run_id: str,
    dataset: str,
    path: Path,
    *,
    fmt: Format,
    status: StatusFilter = "completed",
) -> int:
    """Write one dataset sheet to ``path`` page by page; return the number of rows.

    Never holds more than one page of rows. CSV needs its header first, so it
    reads the sheet twice: once for the column names, once to write, and the
    second pass stops at the last row the first one saw. The file appears
    complete or not at all (written beside it, then renamed).
    """
    wanted: RowStatus | None = None if status == "all" else status
    last_position: int | None = None
    header: list[str] = []
    if fmt == "csv":
        columns: dict[str, None] = {}
        pages = _sheet_pages(store, run_id, dataset, wanted, None)
        async with contextlib.aclosing(pages):
            async for page in pages:
                for row in page:
                    columns.update(dict.fromkeys(_record(row, status)))
                last_position = page[-1].position
        if last_position is None:
            last_position = -1  # an empty sheet: a header-less empty file
        header = [name for name in columns if name not in _EXTRA_COLUMNS]
        header += [name for name in _EXTRA_COLUMNS if name in columns]
    target = trio.Path(path)
    await target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    count = 0
    try:
        async with await partial.open("w", encoding="utf-8", newline="") as file:
            if fmt == "csv" and header:
                await file.write(_csv_text([header]))
            pages = _sheet_pages(store, run_id, dataset, wanted, last_position)
            async with contextlib.aclosing(pages):
                async for page in pages:
                    records = [_record(row, status) for row in page]
                    await file.write(_page_text(records, fmt, header))
                    count += len(records)
        await partial.replace(target)
    except BaseException:
        with trio.CancelScope(shield=True):
            await partial.unlink(missing_ok=True)
        raise
    return count


async def _sheet_pages(
    store: Store,
    run_id: str,
    dataset: str,
    status: RowStatus | None,
    last_position: int | None,
) -> AsyncGenerator[list[SheetRow], None]:
    after = -1
    while True:
        page = await store.read_rows(
            run_id, dataset, status=status, after_position=after, limit=_EXPORT_PAGE
        )
        full = len(page) == _EXPORT_PAGE
        if last_position is not None:
            page = [row for row in page if row.position <= last_position]
        if page:
            yield page
        if not full or len(page) < _EXPORT_PAGE:
            return
        after = page[-1].position


def _record(row: SheetRow, status: StatusFilter) -> dict[str, Any]:
    data = json.loads(row.data_json)
    record: dict[str, Any] = data if isinstance(data, dict) else {"value": data}
    if status == "all":
        record["_status"] = row.status
    if row.error is not None:
        record["_error"] = row.error
    return record


def _page_text(records: Sequence[dict[str, Any]], fmt: Format, header: Sequence[str]) -> str:
    if fmt == "csv":
        return _csv_text([[_cell(record.get(name)) for name in header] for record in records])
    return "".join(
        json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n" for record in records
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _csv_text(rows: Sequence[Sequence[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()
