"""The commands: ``demo``, ``run``, ``runs list``, ``runs show``, ``export``, ``config``,
``timeline``.

Each handler takes the parsed arguments and the session and returns an exit
code; everything that touches a store runs inside one ``trio.run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._errors import PlayAborted, RunWaiting
from .._json import canonical_json
from .._plugins import DEFAULT_STORE_URL, open_store
from .._retry import recorded_failures
from .._store import FailureStore
from ._common import (
    DEMO_STORE_URL,
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
from ._config import Config, Settings, format_config, load, start_folder
from ._export import (
    STDOUT,
    Exported,
    Format,
    StatusFilter,
    export_dataset,
    format_for,
    open_output,
)
from ._failures import FailureKind, bug_line, bug_notes, read_failures
from ._paths import Guarded, check_outputs, input_files, sqlite_files, store_problem
from ._signals import cancel_on_signals
from ._summary import summary_data
from ._tree import format_tree, run_tree
from ._waiting import event_line, utc, wait_line, waiting_lines, waits_data

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Sequence

    from .._records import RunLeases, RunRecord
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


def _config_for(args: argparse.Namespace, start: Path) -> Config:
    """The configuration found from ``start`` with this command's flags on top."""
    flags: list[tuple[str, Any, str]] = []
    if args.store is not None:
        flags.append(("store", args.store, "--store"))
    if getattr(args, "allow_networks", None) is not None:
        flags.append(("allow_networks", args.allow_networks, "--allow-network"))
    for name, value in getattr(args, "limits", None) or ():
        flags.append((f"limits.{name}", value, "--limit"))
    return load(start, config_file=args.config, flags=flags)


def _store_for(url: str, *, must_exist: bool = False) -> Store:
    """The store for ``url``, not yet opened; :class:`UsageError` if the URL is bad.

    With ``must_exist``, a SQLite file that is not there is an error rather
    than a new empty database (reading commands should not create stores).
    """
    if url.startswith("memory://"):
        if must_exist:
            raise UsageError(
                "memory:// holds nothing between commands: every command starts with an "
                "empty one (use sqlite:///FILE)"
            )
        _say(
            "warning: memory:// keeps nothing: the run's results go when this command ends "
            "and a rerun starts over (use sqlite:///FILE to keep them)"
        )
    try:
        store: Store = open_store(url)  # the registered stores, as open_runtime finds them
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if url.startswith("sqlite:///"):
        _check_sqlite_path(url, url.removeprefix("sqlite:///"))
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


def _check_sqlite_path(url: str, path: str) -> None:
    """Refuse a SQLite path that cannot hold a database before the run starts (exit 2)."""
    from trioplay.stores.sqlite import path_problem  # a postgresql:// URL need not load SQLite

    try:
        problem = path_problem(path) or store_problem(path)
    except OSError as exc:  # a name too long to look up, and the like
        problem = f"{exc.strerror}; name another path"
    if problem is not None:
        raise UsageError(f"store {url}: {problem}")


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

    store = _store_for(args.store)
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
    config = _config_for(args, start_folder(path))
    settings = config.settings
    store = _store_for(settings.store)
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
    print(format_config(_config_for(args, start_folder(args.path))))
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


# -- runs list / show -------------------------------------------------------------


def _cmd_runs_list(args: argparse.Namespace, session: _Session) -> int:
    settings = _config_for(args, Path.cwd()).settings
    store = _store_for(settings.store, must_exist=True)
    now = time.time()
    runs = trio.run(
        partial(_runs_listed, store, args.limit, lease_ttl=settings.limits.lease_ttl, now=now)
    )
    if args.json:
        print(json.dumps(runs, ensure_ascii=False, indent=2))
    elif not runs:
        print(f"no runs in {store.url}")
    else:
        table = [("RUN ID", "PLAY", "STATUS", "ATTEMPT", "UPDATED", "ROWS")]
        for run in runs:
            updated = _timestamp(run["updated_at"])
            status = run["status"]
            if run["probably_dead"]:
                beat = run["last_heartbeat"]
                status += f", probably dead: last heartbeat {_timestamp(beat)} ({_ago(beat, now)})"
            if run.get("next_deadline"):  # a waiting run: until when, at the soonest
                status += f" (until {utc(run['next_deadline_at'])})"
            row = (run["run_id"], run["play"], status, str(run["attempt"]), updated)
            table.append((*row, f"{run['rows']:,}"))
        print(_format_table(table, right=(3, 5)))
    return EXIT_OK


async def _runs_listed(
    store: Store, limit: int, *, lease_ttl: float, now: float
) -> list[dict[str, Any]]:
    """The most recent runs, newest first, as ``runs list --json`` prints them."""
    listed = []
    async with _opened(store):
        records = await store.list_runs(limit=limit)
        running = [record.run_id for record in records if record.status == "running"]
        leases = await store.run_leases(running) if running else {}
        for record in records:
            rows = 0
            for dataset in await store.list_datasets(record.run_id):
                rows += sum((await store.count_rows(record.run_id, dataset)).values())
            dead, beat = _liveness(record, leases.get(record.run_id), lease_ttl, now)
            deadline = None
            if record.status == "waiting":
                waits = await store.list_waits(record.run_id)
                open_ = [wait.deadline for wait in waits if wait.status == "waiting"]
                deadline = min(open_, default=None)
            listed.append(
                {
                    "run_id": record.run_id,
                    "play": record.play,
                    "status": record.status,
                    "attempt": record.attempt,
                    "created_at": _iso(record.created_at),
                    "updated_at": _iso(record.updated_at),
                    "rows": rows,
                    "probably_dead": dead,
                    "last_heartbeat": None if beat is None else _iso(beat),
                    **_deadline(deadline),
                }
            )
    return listed


def _liveness(
    record: RunRecord, leases: RunLeases | None, lease_ttl: float, now: float
) -> tuple[bool, float | None]:
    """Is a ``running`` run probably dead, and when was its last heartbeat?

    A process that runs a run renews the leases of its receipts and pages
    every ``lease_ttl / 2``. A run none of whose leases is live, and whose
    last sign of life (its last heartbeat: the latest lease renewal, or the
    attempt's start if later) is older than ``lease_ttl``, has no process
    renewing anything: it probably died (killed, or its machine lost).
    """
    if record.status != "running":
        return False, None
    beat = record.updated_at
    if leases is not None and leases.renewed_at is not None:
        beat = max(beat, leases.renewed_at)
    live = leases is not None and leases.expires_at is not None and leases.expires_at > now
    return not live and beat + lease_ttl <= now, beat


def _ago(moment: str, now: float) -> str:
    """``4m12s ago`` for an ISO time as :func:`_iso` wrote it."""
    seconds = max(0, int(now - datetime.fromisoformat(moment).timestamp()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m ago"
    return f"{minutes}m{seconds:02d}s ago" if minutes else f"{seconds}s ago"


def _deadline(deadline: float | None) -> dict[str, Any]:
    """A waiting run's next deadline, for ``runs list --json`` (and the table's epoch)."""
    if deadline is None:
        return {}
    return {"next_deadline": _iso(deadline), "next_deadline_at": deadline}


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


def _timestamp(moment: float | str) -> str:
    """Local time to the second, for tables; ``moment`` as stored, or as :func:`_iso` wrote it."""
    when = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    if isinstance(when, datetime):
        return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    return datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S")


def _iso(seconds: float) -> str:
    """ISO 8601 in UTC, for JSON: ``2026-11-29T13:05:30.123456+00:00``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _cmd_runs_show(args: argparse.Namespace, session: _Session) -> int:
    store = _store_for(_config_for(args, Path.cwd()).settings.store, must_exist=True)
    details = trio.run(_run_details, store, args.run_id)
    if args.json:
        print(json.dumps(details, ensure_ascii=False, indent=2))
    else:
        print(_format_details(details))
    return EXIT_OK


async def _run_details(store: Store, run_id: str) -> dict[str, Any]:
    """One run, as ``runs show --json`` prints it."""
    async with _opened(store):
        record = await store.get_run(run_id)
        if record is None:
            raise UsageError(f"no run {run_id!r} in {store.url} (`trioplay runs list` lists them)")
        datasets = {
            name: await store.count_rows(run_id, name) for name in await store.list_datasets(run_id)
        }
        receipts = await store.count_receipts(run_id)
        tree = await run_tree(store, record)
        waits = await store.list_waits(run_id)
        unclaimed = await store.list_events(run_id, unclaimed_only=True)
    try:
        stats = json.loads(record.stats_json) if record.stats_json else {}
    except ValueError:
        stats = {}
    return {
        "run_id": record.run_id,
        "play": record.play,
        "status": record.status,
        "attempts": record.attempt,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "input": json.loads(record.input_json),
        "error": record.error or None,
        "stats": stats if isinstance(stats, dict) else {},
        "datasets": {
            name: {"completed": counts.get("completed", 0), "failed": counts.get("failed", 0)}
            for name, counts in datasets.items()
        },
        "receipts": dict(sorted(receipts.items())),
        "parent_run_id": record.parent_run_id,
        "depth": record.depth,
        "tree": tree,
        "waits": [_wait_data(wait) for wait in waits],
        "unclaimed_events": [_event_data(event) for event in unclaimed],
    }


def _wait_data(wait: Any) -> dict[str, Any]:
    return {
        "name": wait.name,
        "key": json.loads(wait.key_json),
        "status": wait.status,
        "dataset": wait.dataset,
        "row": wait.row_key,
        "deadline": _iso(wait.deadline),
        "settled_at": _iso(wait.settled_at) if wait.settled_at is not None else None,
        "reason": wait.reason,
        "wait_key": wait.wait_key,
    }


def _event_data(event: Any) -> dict[str, Any]:
    return {
        "name": event.name,
        "key": json.loads(event.key_json),
        "event_id": event.event_id,
        "sent_at": _iso(event.sent_at),
        "reject": event.reject,
    }


def _format_details(details: dict[str, Any]) -> str:
    lines = [
        f"run:      {details['run_id']}",
        f"play:     {details['play']}",
        f"status:   {details['status']}",
        f"attempts: {details['attempts']}",
        f"created:  {_timestamp(details['created_at'])}",
        f"updated:  {_timestamp(details['updated_at'])}",
        f"input:    {canonical_json(details['input'])}",
    ]
    if details["error"]:
        lines.append(f"error:    {details['error']}")
    if details["stats"]:
        stats = details["stats"].items()
        shown = ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in stats)
        lines.append(f"stats (last attempt): {shown}")
    datasets = details["datasets"]
    lines.append("datasets:" if datasets else "datasets: none")
    for name, counts in datasets.items():
        lines.append(f"  {name}: {counts['completed']:,} completed, {counts['failed']:,} failed")
    waits = details["waits"]
    if waits:
        open_ = sum(1 for wait in waits if wait["status"] == "waiting")
        lines.append(f"waits: {len(waits):,} ({open_:,} open)")
        lines.extend(wait_line(wait) for wait in waits)
    unclaimed = details["unclaimed_events"]
    if unclaimed:
        lines.append(f"unclaimed events: {len(unclaimed):,}")
        lines.extend(event_line(event) for event in unclaimed)
    receipts = details["receipts"]
    if receipts:
        shown = ", ".join(f"{count:,} {status}" for status, count in receipts.items())
        lines.append(f"receipts: {shown}")
    else:
        lines.append("receipts: none")
    lines.extend(format_tree(details["tree"], details["run_id"]))
    return "\n".join(lines)


# -- export ---------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace, session: _Session) -> int:
    config = _config_for(args, Path.cwd())
    store = _store_for(config.settings.store, must_exist=True)
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
    async with _opened(store):
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
