"""Throughput: rows per second of a two-tool-column map, against raw Trio.

Four contenders run the same ``N`` rows through the same two resolvers and
the same two zero-latency tool functions (see :mod:`benchmarks.workload`):

- ``baseline-chunks``: raw Trio, no durability; one nursery per chunk of 256
  rows, every row of a chunk a task.
- ``baseline-limiter``: raw Trio, no durability; one task per row in one
  nursery, at most 256 at a time through a ``trio.CapacityLimiter(256)``.
- ``floor-sqlite``: raw Trio and raw SQLite doing only what every durable
  tool call and row needs (:mod:`benchmarks.floor`): the best a durable
  engine of trioplay's design can do here. ``floor-trio``: the same
  without the database (its Trio and Python part alone). ``floor-store``:
  the SQLite store's own statements for the same rows in a plain loop, no
  Trio and no engine (the store's part alone).
- ``memory``: trioplay on ``memory://``.
- ``sqlite``: trioplay on ``sqlite:///`` (a fresh file in a temporary
  directory each time).
- ``memory-events``, ``sqlite-events`` (only when named, as in
  ``instructions --only memory-events``): the same, recording every event
  to a JSON Lines file as ``trioplay run --events FILE`` does.

The baseline is the faster of the two raw-Trio variants in each run; both are
printed. The contenders run in rounds, in that order, each in its own
``trio.run``, with a garbage collection before each; the best time of each
over the rounds counts, so a neighbour's burst of CPU on a shared machine
hurts one sample, not the result. Every run is checked: ``completed_count
== N``, no failed or skipped row, the sheet holds ``N`` completed rows, the
preview rows are right, and on a fresh store ``last_stats.provider_calls ==
2 * N``.

Besides wall time, each run reports the process's CPU time (all threads, the
SQLite worker included), steadier than wall time when neighbours share the
machine, and the time the cyclic garbage collector took. One more untimed
run of each contender (2,000 rows) counts Trio tasks spawned and task steps
per row, through a ``trio.abc.Instrument``: the scheduling work the engine
does per row, which no amount of machine noise changes.

The time of a trioplay run covers opening the runtime (and the store), the
run, and closing them; not the sheet count that checks it afterwards.

``python -m benchmarks throughput --only sqlite --rows 20000 --rounds 1
--no-save`` runs one contender alone, for a profiler.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

import trioplay
from trioplay._trace import JsonlSink, Recorder

from .floor import floor_sqlite, floor_store
from .workload import (
    COLUMNS,
    DATASET,
    DirectTools,
    check_output,
    chosen,
    drop_schemas,
    enrich_play,
    machine,
    postgres_backend_cpu,
    postgres_problem,
    postgres_url,
    registry,
    save_results,
    source_rows,
    stamp,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

CHUNK = 256
DEFAULT_ROWS = 100_000
DEFAULT_ROUNDS = 3
CONTENDERS = (
    "baseline-chunks",
    "baseline-limiter",
    "floor-trio",
    "floor-sqlite",
    "floor-store",
    "memory",
    "sqlite",
)
TRACED = ("memory-events", "sqlite-events")
"""``memory`` and ``sqlite`` recording every event to a JSON Lines file, as ``--events``
does; run only when named (``--only``), not in the default race."""
POSTGRES_CONTENDERS = ("postgres",)
"""trioplay on PostgreSQL (:data:`benchmarks.workload.POSTGRES`, a fresh schema each time,
dropped after), run only when named: ``--only postgres``. Its CPU per row counts this
process only; the server's backends' CPU is read from ``/proc`` and shown beside it."""
KNOWN = CONTENDERS + TRACED + POSTGRES_CONTENDERS
ENGINE = ("memory", "sqlite", *TRACED, *POSTGRES_CONTENDERS)  # the contenders running trioplay
CALLS_PER_ROW = 2  # the durable calls of a row: its two tool columns
STEP_ROWS = 2_000
TARGET_ROWS_PER_S = 10_000
TARGET_RATIO = 0.25


class _Stopwatch:
    """Wall time and this process's CPU time (every thread: the SQLite worker too).

    CPU time per row is steadier than wall time when neighbours share the
    machine: it counts what the run cost, not what it waited for.
    """

    def __init__(self) -> None:
        self._wall = -time.perf_counter()
        self._cpu = -time.process_time()

    def pause(self) -> None:
        self._wall += time.perf_counter()
        self._cpu += time.process_time()

    def resume(self) -> None:
        self._wall -= time.perf_counter()
        self._cpu -= time.process_time()

    def read(self) -> dict[str, float]:
        self.pause()
        return {"elapsed": self._wall, "cpu": self._cpu}


# -- baseline ---------------------------------------------------------------
async def _baseline_row(data: dict[str, Any], tools: DirectTools, done: list[int]) -> None:
    row = dict(data)
    for name, resolver in COLUMNS:
        row[name] = await resolver(row, tools)
    done[0] += 1


async def baseline_chunks(n: int) -> dict[str, Any]:
    """A nursery per chunk of 256 rows."""
    clock = _Stopwatch()
    tools = DirectTools(registry())
    done = [0]
    rows = source_rows(n)
    while chunk := list(itertools.islice(rows, CHUNK)):
        async with trio.open_nursery() as nursery:
            for data in chunk:
                nursery.start_soon(_baseline_row, data, tools, done)
    return clock.read() | {"completed": done[0], "calls": tools.calls}


async def baseline_limiter(n: int, latency: float = 0.0, in_flight: int = CHUNK) -> dict[str, Any]:
    """One task per row, at most 256 (``in_flight``) running, through a CapacityLimiter.

    ``latency``: each tool first sleeps that long (the latency benchmark's raw Trio).
    """
    clock = _Stopwatch()
    tools = DirectTools(registry(latency))
    done = [0]
    limiter = trio.CapacityLimiter(in_flight)

    async def row_task(data: dict[str, Any], token: object) -> None:
        try:
            await _baseline_row(data, tools, done)
        finally:
            limiter.release_on_behalf_of(token)

    async with trio.open_nursery() as nursery:
        for data in source_rows(n):
            token = object()
            await limiter.acquire_on_behalf_of(token)
            nursery.start_soon(row_task, data, token)
    return clock.read() | {"completed": done[0], "calls": tools.calls}


# -- trioplay ---------------------------------------------------------------
async def run_trioplay(
    n: int,
    store: str | trioplay.Store,
    events: Path | None = None,
    *,
    latency: float = 0.0,
    limits: trioplay.Limits | None = None,
    recorder: Recorder | None = None,
    server_cpu: Callable[[], float | None] | None = None,
) -> dict[str, Any]:
    """One fresh run of the benchmark play; returns its output and stats.

    The time counts opening the store, the run and closing the store, not the
    sheet count that checks the run afterwards (``run_seconds``: the run
    alone). ``events``: record every event to that JSON Lines file, as
    ``trioplay run --events`` does (the time counts writing it); ``recorder``:
    record them there instead. ``latency``: each tool first sleeps that long.
    ``server_cpu``: read (untimed) before the store closes, as ``server_cpu``.
    """
    clock = _Stopwatch()
    with contextlib.ExitStack() as files:
        if events is not None:
            recorder = Recorder(JsonlSink(files.enter_context(events.open("w", encoding="utf-8"))))
        async with trioplay.open_runtime(
            store=store, tools=registry(latency), limits=limits, recorder=recorder
        ) as rt:
            run_started = time.perf_counter()
            output = await rt.run(enrich_play, {"rows": n}, run_id=f"bench-{n}")
            run_seconds = time.perf_counter() - run_started
            stats = rt.last_stats
            clock.pause()
            counts = await rt.store.count_rows(f"bench-{n}", DATASET)
            served = await trio.to_thread.run_sync(server_cpu) if server_cpu else None
            clock.resume()
        if recorder is not None:
            recorder.close()
    return {
        **clock.read(),
        "run_seconds": run_seconds,
        "server_cpu": served,
        **output,
        "provider_calls": stats.provider_calls if stats else None,
        "replayed": stats.replayed if stats else None,
        "sheet": counts,
        "events": _count_lines(events) if events is not None else None,
    }


def _count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as file:
        return sum(1 for _ in file)


class _GcClock:
    """Adds up the time the cyclic garbage collector runs (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections += 1

    def __enter__(self) -> _GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self)


class _StepCounter(trio.abc.Instrument):
    """Counts tasks spawned and task steps (one step: a task runs until it yields)."""

    def __init__(self) -> None:
        self.spawned = 0
        self.steps = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


def _contender(name: str, n: int, tmp: Path, tag: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    if name == "baseline-chunks":
        return lambda: baseline_chunks(n)
    if name == "baseline-limiter":
        return lambda: baseline_limiter(n)
    if name == "floor-trio":
        return lambda: timed_floor(floor_sqlite, n, None)
    if name == "floor-sqlite":
        return lambda: timed_floor(floor_sqlite, n, tmp / f"{tag}-floor.db")
    if name == "floor-store":
        return lambda: timed_floor(floor_store, n, tmp / f"{tag}-floor-store.db")
    if name == "postgres":
        return lambda: run_postgres(n)
    url = "memory://" if name.startswith("memory") else f"sqlite:///{tmp / f'{tag}.db'}"
    events = tmp / f"{tag}-events.jsonl" if name in TRACED else None
    return lambda: run_trioplay(n, url, events)


async def run_postgres(n: int, **options: Any) -> dict[str, Any]:
    """:func:`run_trioplay` on a fresh PostgreSQL schema (dropped after), with the CPU
    time of the server's backends that served it (``server_cpu``, seconds)."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        return await run_trioplay(
            n,
            postgres_url(name, application_name=name),
            server_cpu=lambda: postgres_backend_cpu(name),
            **options,
        )
    finally:
        await trio.to_thread.run_sync(drop_schemas, [name])


async def timed_floor(
    floor: Callable[[int, Any], Awaitable[dict[str, Any]]], n: int, path: Path | None
) -> dict[str, Any]:
    """A floor contender (see :mod:`benchmarks.floor`), timed like the others."""
    clock = _Stopwatch()
    out = await floor(n, path)
    return clock.read() | out


def check_engine_run(name: str, n: int, out: dict[str, Any]) -> None:
    """Raise ``AssertionError`` unless a trioplay run (:func:`run_trioplay`) did all its work."""
    check_output(out, n, out["provider_calls"])
    if out["sheet"].get("completed") != n:
        raise AssertionError(f"{name}: the sheet holds {out['sheet']}, expected {n} completed")


def _check(name: str, n: int, out: dict[str, Any]) -> None:
    if name not in ENGINE:
        if out["completed"] != n or out["calls"] != 2 * n:
            raise AssertionError(f"{name}: expected {n} rows and {2 * n} calls, got {out}")
        return
    check_engine_run(name, n, out)
    # At least one event per row and per call for every row (admitted ... committed).
    if name in TRACED and out["events"] < 5 * n + 2 * 2 * n:
        raise AssertionError(f"{name}: only {out['events']} events recorded for {n} rows")


def measure(name: str, n: int, tmp: Path, tag: str) -> dict[str, Any]:
    """Time one contender once, in a ``trio.run`` of its own, and check its work.

    The result has ``elapsed`` (seconds) and ``gc_seconds``, the part of it
    the cyclic garbage collector took.
    """
    fn = _contender(name, n, tmp, tag)
    gc.collect()
    with _GcClock() as gc_clock:
        out = trio.run(fn)
    _check(name, n, out)
    return out | {"gc_seconds": gc_clock.seconds, "gc_collections": gc_clock.collections}


def count_steps(name: str, n: int, tmp: Path) -> dict[str, float]:
    """Tasks spawned and task steps per row of one untimed run (Trio's scheduling work)."""
    counter = _StepCounter()
    out = trio.run(_contender(name, n, tmp, f"steps-{name}"), instruments=[counter])
    _check(name, n, out)
    return {"tasks_per_row": counter.spawned / n, "steps_per_row": counter.steps / n}


def run(
    rows: int = DEFAULT_ROWS,
    rounds: int = DEFAULT_ROUNDS,
    save: bool = True,
    contenders: tuple[str, ...] = CONTENDERS,
) -> dict[str, Any]:
    """Run the throughput benchmark, print a table, and return (and save) the results.

    ``contenders`` picks some of :data:`KNOWN` (say ``("sqlite",)`` to
    profile one); ratios are printed only when a baseline ran.
    """
    names = chosen(contenders, KNOWN)
    if "postgres" in names and (problem := postgres_problem()) is not None:
        print(f"throughput: {problem}; skipping the postgres contender")
        names.remove("postgres")
    print(f"throughput: {rows:,} rows, 2 zero-latency tool columns, best of {rounds} round(s)")
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc_seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in names}
    server_cpu: dict[str, list[float]] = {}
    stats: dict[str, dict[str, Any]] = {}
    started = time.time()
    where = machine()  # before the runs: the code measured is the code at start
    with tempfile.TemporaryDirectory(prefix="trioplay-bench-") as tmp:
        for round_no in range(1, rounds + 1):
            for name in names:
                out = measure(name, rows, Path(tmp), f"round{round_no}")
                elapsed = out["elapsed"]
                samples[name].append(elapsed)
                gc_seconds[name].append(out["gc_seconds"])
                cpu_seconds[name].append(out["cpu"])
                if out.get("server_cpu") is not None:
                    server_cpu.setdefault(name, []).append(out["server_cpu"])
                if name in ENGINE:
                    stats[name] = {
                        "provider_calls": out["provider_calls"],
                        "replayed": out["replayed"],
                        "sheet": out["sheet"],
                    }
                print(
                    f"  round {round_no} {name:<17}{elapsed:8.3f} s{rows / elapsed:>10,.0f} rows/s"
                    f"  cpu {out['cpu']:7.3f} s  gc {out['gc_seconds']:6.3f} s"
                )
        step_rows = min(rows, STEP_ROWS)
        steps = {name: count_steps(name, step_rows, Path(tmp)) for name in names}
    best = {name: min(times) for name, times in samples.items()}
    cpu_per_row = {name: 1e6 * min(times) / rows for name, times in cpu_seconds.items()}
    rate = {name: rows / t for name, t in best.items()}
    baselines = [name for name in names if name.startswith("baseline")]
    baseline_name = max(baselines, key=lambda name: rate[name]) if baselines else None
    ratio: dict[str, float] = {}
    round_ratios: dict[str, list[float]] = {}
    if baseline_name is not None:
        ratio = {name: rate[name] / rate[baseline_name] for name in names}
        round_ratios = {
            name: [samples[baseline_name][i] / samples[name][i] for i in range(rounds)]
            for name in names
            if not name.startswith("baseline")
        }

    print()
    print(
        f"{'contender':<18}{'best s':>9}{'rows/s':>12}{'vs baseline':>13}"
        f"{'cpu us/row':>12}{'tasks/row':>11}{'steps/row':>11}"
    )
    for name in names:
        mark = "  <- baseline" if name == baseline_name else ""
        versus = f"{ratio[name]:>12.3f}x" if ratio else f"{'-':>13}"
        print(
            f"{name:<18}{best[name]:>9.3f}{rate[name]:>12,.0f}{versus}{cpu_per_row[name]:>12.1f}"
            f"{steps[name]['tasks_per_row']:>11.2f}{steps[name]['steps_per_row']:>11.2f}{mark}"
        )
    print(
        f"(cpu us/row: least process CPU time per row over the rounds, all threads; "
        f"tasks/row, steps/row: Trio tasks spawned and task steps per row, "
        f"counted in one more untimed run of {step_rows:,} rows)"
    )
    cpu_per_call = {name: cpu_per_row[name] / CALLS_PER_ROW for name in names if name in ENGINE}
    server_per_call = {
        name: 1e6 * min(values) / rows / CALLS_PER_ROW for name, values in server_cpu.items()
    }
    if cpu_per_call:
        print(
            f"CPU µs per durable call (CPU per row / {CALLS_PER_ROW} calls per row, the row's "
            "own work included): "
            + ", ".join(
                f"{name} {us:.1f}"
                + (
                    f" (+ {server_per_call[name]:.1f} in the server)"
                    if name in server_per_call
                    else ""
                )
                for name, us in cpu_per_call.items()
            )
        )
    for name, s in stats.items():
        print(
            f"{name}: last_stats.provider_calls={s['provider_calls']:,} "
            f"(2 x rows = {2 * rows:,}), replayed={s['replayed']}, sheet={s['sheet']}"
        )
    target: dict[str, Any] = {"rows_per_s": TARGET_ROWS_PER_S, "ratio": TARGET_RATIO}
    if "sqlite" in rate and ratio:
        target["met"] = rate["sqlite"] >= TARGET_ROWS_PER_S and ratio["sqlite"] >= TARGET_RATIO
        print(
            f"target (issue 2): sqlite >= {TARGET_ROWS_PER_S:,} rows/s and >= {TARGET_RATIO} x "
            f"baseline: {'met' if target['met'] else 'MISSED'} "
            f"({rate['sqlite']:,.0f} rows/s, {ratio['sqlite']:.3f} x)"
        )
    for name in ("floor-trio", "floor-sqlite", "floor-store"):
        if name in rate and ratio:
            print(
                f"{name} (a lower bound of the cost, see benchmarks/floor.py): "
                f"{rate[name]:,.0f} rows/s, {ratio[name]:.3f} x baseline"
            )
    results = {
        "benchmark": "throughput",
        "started_at": stamp(started),
        "rows": rows,
        "rounds": rounds,
        "machine": where | {"loadavg_after": list(os.getloadavg())},
        "baseline": baseline_name,
        "seconds": samples,
        "cpu_seconds": cpu_seconds,
        "cpu_us_per_row": cpu_per_row,
        "cpu_us_per_call": cpu_per_call,
        "server_cpu_seconds": server_cpu,
        "server_cpu_us_per_call": server_per_call,
        "gc_seconds": gc_seconds,
        "scheduling": {"rows": step_rows, "per_contender": steps},
        "best_seconds": best,
        "rows_per_s": rate,
        "ratio_vs_baseline": ratio,
        "ratio_vs_baseline_per_round": round_ratios,
        "last_stats": stats,
        "target": target,
    }
    if save:
        print(f"saved {save_results('throughput', results)}")
    return results
