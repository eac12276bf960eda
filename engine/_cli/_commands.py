"""The commands: ``demo``, ``run``, ``export``, ``config``, ``timeline``.

Each handler takes the parsed arguments and the session and returns an exit
code; everything that touches a store runs inside one ``trio.run``.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._errors import PlayAborted, RunWaiting
from .._retry import recorded_failures
from .._store import FailureStore
from ._common import (
    EXIT_EXPORT_FAILED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PLAY_ABORTED,
    EXIT_USAGE,
    EXIT_WAITING,
    INPUT_ERRORS,
    UsageError,
    _say,
    describe_error,
)
from ._config import Config, Settings, format_config, start_folder
from ._export import (
    Exported,
    Format,
    StatusFilter,
    export_dataset,
    format_for,
    open_output,
)
from ._failures import FailureKind, bug_line, bug_notes, read_failures
from ._paths import STDOUT, Guarded, check_outputs, input_files, sqlite_files
from ._signals import cancel_on_signals
from ._stores import config_for, opened, store_for
from ._summary import summary_data
from ._waiting import waiting_lines, waits_data

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from .._runtime import Play
    from .._store import Store
    from .._tools import ToolRegistry
    from .._trace import Recorder
    from . import _Session
    from ._progress import OutputFile, RunOutcome, RunReporter
    from ._signals import TaskDump

# What only `run` and `demo` use (the runtime, the play file, the progress
# bar, the recordings) is imported in their functions, not above: `runs list`,
# `export` and the rest start without the engine's map, fetch and runtime
# (docs/cli.md, "What a command loads").


# -- configuration and stores ----------------------------------------------------


def _kept(config: Config) -> list[Guarded]:
    """The files of a command's configuration that no output may write over."""
    kept = sqlite_files(config.settings.store)
    if config.file is not None:
        kept.append(Guarded("the configuration file", str(config.file)))
    return kept


def _run_outputs(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`_RunSpec` fields of what ``run`` and ``demo`` write (``_add_run_outputs``)."""
    return {
        "out": args.out,
        "format": args.format,
        "status": args.status,
        "events": args.events,
        "trace": args.trace,
        "json": args.json,
    }


def _recordings(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The outputs of ``run`` and ``demo``, in the order they are checked."""
    return [("--events", args.events), ("--trace", args.trace), ("--out", args.out)]


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
    settings: Settings = attrs.field(factory=Settings)
    events: str | None = None  # --events FILE.jsonl
    trace: str | None = None  # --trace FILE.json
    kept: tuple[Guarded, ...] = ()  # what no output may write over (see _paths)
    json: bool = False  # --json: the summary as one JSON object
    play_ref: str | None = None  # FILE.py[:PLAY], recorded with the run for `resume RUN`
    dump: TaskDump | None = None  # run --dump-on: the task tree on a signal


@attrs.frozen
class _Finished:
    """How a run and its export went: the run's error, then the export's."""

    error: Exception | None
    sheets: dict[str, dict[str, int]]
    outputs: list[OutputFile]
    run_id: str | None = None
    export_error: Exception | None = None
    notes: tuple[str, ...] = ()  # lines after the summary: outputs that hold no row
    failures: dict[str, list[FailureKind]] = attrs.field(factory=dict)  # by dataset
    bugs: list[dict[str, Any]] = attrs.field(factory=list)  # see _failures.bug_notes


def _cmd_demo(args: argparse.Namespace, session: _Session) -> int:
    from . import _demo  # the demo imports the adapters; only load it when asked

    store = store_for(args.store)
    rows: int = _demo.BUNDLED_ROWS if args.rows is None else args.rows
    with _demo.bundled_csv() as leads:
        kept = [*sqlite_files(args.store), Guarded("the demo's leads", str(leads))]
    check_outputs(_recordings(args), kept)
    spec = _RunSpec(
        play=_demo.demo_leads,
        tools=_demo.tools(),
        input={"rows": rows},
        # Fixed, so that the demo resumes wherever it runs; the input names
        # the leads, not a file (see _demo.demo_leads).
        run_id=f"demo-{rows}",
        store=store,
        kept=tuple(kept),
        **_run_outputs(args),
    )
    return _execute(spec, session)


def _cmd_run(args: argparse.Namespace, session: _Session) -> int:
    from ._playfile import _importable_from, find_play, find_tools, load_play_module, split_play_ref

    path, name = split_play_ref(args.play)
    input = _parse_input(args.input, args.csv)
    config = config_for(args, start_folder(path))
    settings = config.settings
    store = store_for(settings.store)
    kept = [*_kept(config), Guarded("the play file", str(path)), *input_files(input, args.csv)]
    check_outputs(_recordings(args), kept)
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
            settings=settings,
            kept=tuple(kept),
            dump=_task_dump(args),
            **_run_outputs(args),
            play_ref=f"{path.resolve()}:{name}" if name else str(path.resolve()),
        )
        return _execute(spec, session)


def _task_dump(args: argparse.Namespace) -> TaskDump | None:
    from ._signals import TaskDump

    if args.dump_on is None:
        return None
    path = args.dump_to or f"trioplay-tasks-{os.getpid()}.txt"
    return TaskDump(args.dump_on, Path(path).absolute())


def _cmd_config(args: argparse.Namespace, session: _Session) -> int:
    print(format_config(config_for(args, start_folder(args.path))))
    return EXIT_OK


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
    from ._progress import RunReporter, format_summary

    reporter = RunReporter()
    try:
        with session.log_through(reporter.write_line):
            finished, interrupt = trio.run(
                cancel_on_signals,
                partial(_run_and_export, spec, reporter),
                reporter.write_line,
                spec.dump,
            )
    except KeyboardInterrupt:  # before the signal receiver opened, or after it closed
        reporter.close()
        _say(_interrupted(reporter.outcome, spec))
        return EXIT_INTERRUPTED
    finally:
        reporter.close()
    error = finished.error if finished is not None else None
    waiting = error if isinstance(error, RunWaiting) else None
    if waiting is not None:  # not an error: the run waits for events (exit 4)
        error = None
    usage = isinstance(error, INPUT_ERRORS)
    if error is not None:
        # The summary's error line says what the error line below says, notes
        # included (which row failed, the errors beside it): the run's own
        # record of its error (run.finished) has its type and message only.
        reporter.outcome.error = describe_error(error, usage=usage)
    # With --out - the rows are standard output, and the summary moves aside.
    summary = sys.stderr if spec.out == STDOUT else sys.stdout
    maps = list(reporter.maps.values())
    sheets = finished.sheets if finished is not None else {}
    outputs = finished.outputs if finished is not None else []
    notes = finished.notes if finished is not None else ()
    failures = finished.failures if finished is not None else {}
    bugs = finished.bugs if finished is not None else []
    if spec.json:
        data = summary_data(
            reporter.outcome,
            maps,
            sheets=sheets,
            outputs=outputs,
            notes=notes,
            failures=failures,
            bugs=bugs,
        )
        if waiting is not None:
            data["waiting"] = waits_data(waiting, spec.store.url)
        print(json.dumps(data, ensure_ascii=False), file=summary)
    else:
        text = format_summary(
            reporter.outcome, maps, sheets=sheets, outputs=outputs, failures=failures
        )
        print(text, file=summary)
        for bug in bugs:
            print(bug_line(bug), file=summary)
        for note in notes:
            print(note, file=summary)
    if waiting is not None and not spec.json:
        print("\n".join(waiting_lines(waiting, spec.store.url)), file=summary)
    summary.flush()
    if error is not None:
        session.report_error(error, usage=usage)
    if interrupt.received is not None:  # Ctrl-C or SIGTERM cancelled the run (see _signals)
        _say(_interrupted(reporter.outcome, spec))
        return interrupt.exit_code
    assert finished is not None  # not cancelled, so the body returned
    if error is not None:
        return _failed_code(error, usage=usage)
    if waiting is not None:
        return EXIT_WAITING
    if finished.export_error is not None:
        session.report_error(finished.export_error, usage=False)
        _say(
            f"the run completed and its rows are in the store: "
            f"trioplay export {finished.run_id} DATASET --out FILE --store {spec.store.url}"
        )
        return EXIT_EXPORT_FAILED
    return EXIT_OK


def _failed_code(error: Exception, *, usage: bool) -> int:
    """The exit code of a failed run: a play that raised a ``BaseException`` has its own."""
    if usage:
        return EXIT_USAGE
    return EXIT_PLAY_ABORTED if isinstance(error, PlayAborted) else EXIT_FAILED


def _interrupted(outcome: RunOutcome, spec: _RunSpec) -> str:
    """The last line after Ctrl-C or SIGTERM: where the run stands, what to do next."""
    if outcome.run_id is None:
        return "interrupted before the run started"
    if outcome.status == "completed":
        then = " and writes --out" if spec.out is not None else ""
        return f"interrupted: run {outcome.run_id} had completed; the same command replays it{then}"
    return f"interrupted: run {outcome.run_id} stopped; the same command resumes it"


async def _run_and_export(spec: _RunSpec, reporter: RunReporter) -> _Finished:
    """Run, then count the sheets and export them.

    The first error is the one reported: when the run failed, a failure of
    the queries after it (the store may be gone by then) only leaves the
    sheet counts out of the summary.
    """
    from ._recording import open_recording

    async with open_recording(spec.events, spec.trace, reporter) as recorder:
        return await _run_recorded(spec, reporter, recorder)


async def _run_recorded(
    spec: _RunSpec, reporter: RunReporter, recorder: Recorder | None
) -> _Finished:
    from .._runtime import open_runtime
    from ._progress import OutputFile

    async with open_runtime(
        store=spec.store, tools=spec.tools, settings=spec.settings, recorder=recorder
    ) as rt:
        error: Exception | None = None
        try:
            await rt.run(spec.play, spec.input, run_id=spec.run_id, play_ref=spec.play_ref)
        except INPUT_ERRORS as exc:
            if not reporter.maps:
                raise  # wrong before any row ran: exit 2, no summary
            error = exc
        except Exception as exc:
            error = exc
        run_id = reporter.outcome.run_id or spec.run_id
        if run_id is None:  # the run never started (the store refused it)
            if error is not None:
                raise error
            return _Finished(None, {}, [])
        try:
            datasets = await rt.store.list_datasets(run_id)
            sheets = {name: await rt.store.count_rows(run_id, name) for name in datasets}
            failures = {
                name: await read_failures(rt.store, run_id, name)
                for name, counts in sheets.items()
                if counts.get("failed")
            }
            bugs = await _bugs(rt.store, run_id) if failures else []
            # A dataset with no row has no sheet to list, and is exported all the same.
            datasets += [name for name in reporter.maps if name not in datasets]
        except Exception:
            if error is None:
                raise
            return _Finished(error, {}, [], run_id)
        outputs: list[OutputFile] = []
        notes: list[str] = []
        if error is not None or spec.out is None or not datasets:
            return _Finished(error, sheets, outputs, run_id, failures=failures, bugs=bugs)
        try:
            paths = _output_paths(spec.out, datasets)
            if len(paths) > 1:  # names made from --out: checked as --out was
                check_outputs([("--out", path) for path in paths.values()], _outputs_kept(spec))
            for name, path in paths.items():
                fmt = spec.format or format_for(path)
                state = reporter.maps.get(name)
                exported = await export_dataset(
                    rt.store,
                    run_id,
                    name,
                    path,
                    fmt=fmt,
                    status=spec.status,
                    columns=state.columns if state is not None else (),
                )
                outputs.append(OutputFile(path, name, exported.rows))
                if not exported.rows:
                    empty = not any(sheets.get(name, {}).values())
                    notes.append(_no_rows(path, name, spec.status, exported, empty=empty))
        except Exception as exc:
            exc.add_note(f"trioplay: writing --out {spec.out} failed")
            return _Finished(None, sheets, outputs, run_id, export_error=exc, failures=failures)
        return _Finished(None, sheets, outputs, run_id, notes=tuple(notes), failures=failures)


async def _bugs(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's recorded failures that are probably bugs, each with its retry command."""
    if not isinstance(store, FailureStore):
        return []
    return bug_notes(await recorded_failures(store, run_id), run_id, store.url)


def _no_rows(
    path: str, dataset: str, status: StatusFilter, exported: Exported, *, empty: bool = False
) -> str:
    """The line that says an output holds no row, and what it holds instead."""
    if empty:  # its sheet holds nothing: the input had no row
        return f"  {path}: {dataset} had no input rows, so {_holds(exported)}"
    rows = "rows" if status == "all" else f"{status} rows"
    return f"  {path}: {dataset} has no {rows}, so {_holds(exported)}"


def _holds(exported: Exported) -> str:
    return "it holds the CSV header only" if exported.columns else "it is empty"


def _outputs_kept(spec: _RunSpec) -> list[Guarded]:
    """What the files made from ``--out`` may not write over: ``spec.kept``, the recordings."""
    recorded = [("--events", spec.events), ("--trace", spec.trace)]
    return [*spec.kept, *(Guarded(f"the {flag} file", path) for flag, path in recorded if path)]


def _output_paths(out: str, datasets: Sequence[str]) -> dict[str, str]:
    if len(datasets) == 1:
        return {datasets[0]: out}
    if out == STDOUT:
        raise UsageError(
            f"--out - writes one dataset, and this run has {len(datasets)} "
            f"({', '.join(datasets)}): give a file name instead"
        )
    path = Path(out)
    return {name: str(path.with_name(f"{path.stem}.{name}{path.suffix}")) for name in datasets}


# -- export ---------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace, session: _Session) -> int:
    config = config_for(args, Path.cwd())
    store = store_for(config.settings.store, must_exist=True)
    path: str = args.out
    check_outputs([("--out", path)], _kept(config))
    fmt: Format = args.format or format_for(path)
    exported = trio.run(_export_command, store, args.run_id, args.dataset, path, fmt, args.status)
    where = "standard output" if path == STDOUT else path
    rows = "row" if exported.rows == 1 else "rows"
    line = f"{where}: {exported.rows:,} {rows} of {args.dataset} (run {args.run_id})"
    if not exported.rows:
        line += f"; {_holds(exported)}"
    # The rows may be standard output: the report goes to stderr then.
    print(line, file=sys.stderr if path == STDOUT else sys.stdout)
    return EXIT_OK


async def _export_command(
    store: Store, run_id: str, dataset: str, path: str, fmt: Format, status: StatusFilter
) -> Exported:
    async with opened(store):
        if await store.get_run(run_id) is None:
            raise UsageError(f"no run {run_id!r} in {store.url} (`trioplay runs list` lists them)")
        datasets = await store.list_datasets(run_id)
        if dataset not in datasets:
            known = ", ".join(datasets) or "none"
            raise UsageError(f"run {run_id!r} has no dataset {dataset!r}; its datasets: {known}")
        return await export_dataset(store, run_id, dataset, path, fmt=fmt, status=status)


# -- timeline -------------------------------------------------------------------


def _cmd_timeline(args: argparse.Namespace, session: _Session) -> int:
    from .._pictures import render_timeline
    from .._trace import read_events

    source: str = args.events
    out: str = args.out or str(Path(source).with_suffix(".svg"))
    check_outputs([("--out", out)], [Guarded("the events file", source)])
    try:
        events = list(read_events(source))
        svg = render_timeline(events)
    except FileNotFoundError:
        raise UsageError(f"{source}: no such file") from None
    except ValueError as exc:
        raise UsageError(f"{source}: not a recorded run's events ({exc})") from None
    trio.run(_write_text, out, svg)
    where = "standard output" if out == STDOUT else out
    print(f"{where}: the timeline of {len(events):,} events", file=sys.stderr)
    return EXIT_OK


async def _write_text(path: str, text: str) -> None:
    async with open_output(path) as file:
        await file.write(text)
