"""Running a scenario: one run of its play, in virtual time, every event kept."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._errors import format_error
from .._map._report import handed_over_text
from .._plugins import open_store
from .._runtime import open_runtime
from .._trace import ChromeTraceSink, JsonlSink, ListSink, Recorder, replay
from .._trace._records import RunFinished
from .._trio_private import seeded_scheduler
from ._judge import judge
from ._result import ScenarioResult

if TYPE_CHECKING:
    from pathlib import Path

    from .._store import Store
    from ._model import Scenario

EPOCH = 1_800_000_000.0
"""The wall clock of a scenario at virtual time 0 (leases and stored times count from it)."""


def run_scenario(scenario: Scenario, *, seed: int = 0) -> ScenarioResult:
    """Run ``scenario`` once under ``MockClock(autojump_threshold=0)`` and judge it.

    Call it from synchronous code (it starts its own ``trio.run``). Virtual
    time starts at 0; the runtime's wall clock (lease expiry, stored
    timestamps) is :data:`EPOCH` plus virtual time, so nothing in the run
    depends on when or how fast it ran: the same scenario and seed give the
    same events.
    """
    began = time.perf_counter()
    ran: list[ScenarioResult] = []

    async def main() -> None:
        ran.append(await _run(scenario, seed))

    from trio.testing import MockClock  # here: trio.testing imports pytest, at any command

    # The same order of woken tasks every time (Trio internals, see _trio_private).
    with seeded_scheduler(0):
        trio.run(main, clock=MockClock(autojump_threshold=0))
    [done] = ran
    result = attrs.evolve(done, wall_seconds=time.perf_counter() - began)
    return attrs.evolve(result, problems=tuple(judge(result, scenario.expect)))


async def _run(scenario: Scenario, seed: int) -> ScenarioResult:
    """The run of ``scenario``, not yet judged (``wall_seconds`` is 0: the caller times it)."""
    setup = scenario.setup(seed)
    kept = ListSink()
    recorder = Recorder(kept)
    start = trio.current_time()
    run_id = f"scenario-{scenario.name}"
    status, error = "failed", None
    row_errors: dict[str, int] = {}
    stored: dict[str, int] = {}
    try:
        async with open_runtime(
            store=setup.store(open_store(setup.store_url)),
            tools=setup.tools,
            settings=setup,
            http_transport=setup.http_transport,
            recorder=recorder,
            wall_clock=lambda: EPOCH + trio.current_time(),
        ) as rt:
            with trio.move_on_after(setup.deadline):
                try:
                    await rt.run(setup.play, setup.input, run_id=run_id)
                    status = "completed"
                except Exception as exc:
                    error = format_error(exc)
            ended = trio.current_time()
            # What the failed rows failed with; a store still broken gets a minute.
            with trio.move_on_after(60):
                row_errors, stored = await _sheet(rt.store, run_id)
    except Exception as exc:
        error = format_error(exc)
        ended = trio.current_time()
    finally:
        recorder.close()
    events = tuple(kept.events)
    finished = [e for e in events if isinstance(e, RunFinished)]
    if finished:
        # The runtime's own word on how the run ended.
        status, error = finished[-1].status, finished[-1].error
    elif status != "completed" and error is None:
        status, error = "interrupted", "interrupted"
    return ScenarioResult(
        scenario=scenario.name,
        description=scenario.description,
        seed=seed,
        events=events,
        status=status,
        error=error,
        virtual_seconds=ended - start,
        wall_seconds=0.0,
        row_errors=row_errors,
        stored_rows=stored,
    )


async def _sheet(store: Store, run_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """The failed rows of the run counted by error type, and its stored rows by status."""
    counts: dict[str, int] = {}
    stored: dict[str, int] = {}
    for dataset in await store.list_datasets(run_id):
        for status, n in (await store.count_rows(run_id, dataset)).items():
            stored[status] = stored.get(status, 0) + n
        after = -1
        while rows := await store.read_rows(run_id, dataset, status="failed", after_position=after):
            for row in rows:
                kind = (row.error or "unknown").split(":", 1)[0]
                counts[kind] = counts.get(kind, 0) + 1
            after = rows[-1].position
    return dict(sorted(counts.items())), dict(sorted(stored.items()))


def write_outputs(result: ScenarioResult, out: Path) -> list[Path]:
    """Write the run's files into ``out``; return them.

    ``events.jsonl`` (the records, as ``--events`` writes them), ``trace.json``
    (Chrome trace-event JSON, as ``--trace`` writes it), ``timeline.svg`` (as
    ``trioplay timeline`` draws it), ``stalls.log`` (the stall lines) and
    ``summary.json``: all from the one list of records.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, sink in (("events.jsonl", JsonlSink), ("trace.json", ChromeTraceSink)):
        path = out / name
        with path.open("w", encoding="utf-8") as file:
            replay(result.events, sink(file))
        written.append(path)
    files: dict[str, str] = {
        "stalls.log": result.stall_log(),
        "summary.json": json.dumps(result.summary(), indent=2, sort_keys=True) + "\n",
    }
    if result.events:  # a runtime that did not open has nothing to draw
        from .._pictures import render_timeline

        files = {"timeline.svg": render_timeline(result.events), **files}
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def describe(result: ScenarioResult) -> list[str]:
    """A short summary of ``result`` for a terminal: what stalled, how long, why, the verdict."""
    summary: dict[str, Any] = result.summary()
    rows = summary["rows"]
    counted = ", ".join(f"{n:,} {k.replace('_', ' ')}" for k, n in rows.items()) or "no rows"
    lines = [
        f"scenario {result.scenario} (seed {result.seed}): the run ended {result.status} "
        f"after {_duration(result.virtual_seconds)} of virtual time "
        f"({result.wall_seconds:.2f} s wall); rows: {counted}",
    ]
    if result.error:
        lines.append(f"  error: {result.error}")
    if result.row_errors:
        failed = ", ".join(f"{n:,} {kind}" for kind, n in result.row_errors.items())
        lines.append(f"  failed rows: {failed}")
    handed, pages = result.handed_over()
    if handed:
        lines.append(f"  handed to another owner: {handed_over_text(handed, pages)}")
    if summary["stall_lines"]:
        waited = _duration(summary["longest_unsettled_ms"] / 1000)
        lines.append(
            f"  stalled: {summary['stall_lines']} stall lines from "
            f"{summary['first_stall_at']:g} s; the oldest item waited {waited}"
        )
        for cause in summary["causes"]:
            named = ", ".join(f"{k} {v}" for k, v in cause.items() if v is not None)
            lines.append(f"  named as the cause: {named}")
        if summary["max_loop_lag_ms"]:
            lines.append(f"  loop lag: up to {summary['max_loop_lag_ms']:,} ms")
    else:
        lines.append("  stalled: no stall line")
    if result.held:
        lines.append("  expectations: held")
    else:
        lines.append("  expectations: NOT held")
        lines += [f"    - {problem}" for problem in result.problems]
    return lines


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min {secs} s" if hours else f"{minutes} min {secs} s"
