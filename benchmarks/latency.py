"""Latency-bound: rows/s of a map whose tools wait, against raw Trio doing the same waits.

The throughput benchmark's play and rows (:mod:`benchmarks.workload`), but
each of the two tools first sleeps ``L`` seconds (``trio.sleep``; 50 ms and
500 ms), so a row takes ``2 L`` at the least. 256 rows are in flight and
the limits are wide enough that only the latency binds
(``max_concurrent_rows=256``, ``max_concurrent_external_calls=512``, so each
tool may hold 256 calls). The bound is raw Trio doing the same sleeps with
the same rows in flight, measured in the same run: ``trio`` is
``baseline-limiter`` of the throughput benchmark (one task per row, at most
256 at a time through a ``CapacityLimiter``) with the sleeping tools.

Contenders, for each latency, in rounds (the order rotates each round, so a
neighbour's burst of CPU does not always hit the same one; the best of each
counts):

- ``trio``: the bound;
- ``sqlite``, ``postgres``: trioplay, default lanes (group commit,
  ``tool_batch_window=0``), a fresh store each time (a new SQLite file; a
  new PostgreSQL schema of :data:`benchmarks.workload.POSTGRES`, all dropped
  at the end);
- ``sqlite-window``, ``postgres-window``: the same with the reference's
  fixed lane window, ``Limits(tool_batch_window=0.005)``, so the choice of
  group commit as the default is measured, not asserted.

A trioplay time counts opening the runtime and the store, the run and
closing them (``run_seconds``, also saved, is the run alone); each run is
checked as in the throughput benchmark (every row completed, in the sheet,
``provider_calls == 2 N``). The ratio is a contender's best rows/s over the
bound's best; the per-round ratios are printed too.

**Where the time goes.** After the timed rounds, one more run of each
trioplay contender (untimed, at most 4 waves of rows) records its events
(:mod:`trioplay._trace`) and times its store calls (a proxy around the
store), and prints the mean of each phase of a tool call, in ms, from the
resolver's call to its value (:data:`PHASES`): ``lane`` (``call.queued`` to
its ``claim_many`` being sent: the lane's wait, the hydration turn),
``claim`` (that store call), ``to_start`` (its answer to ``call.started``:
outcomes, governor, the owner's wake-up), ``tool`` (the sleep and the event
loop's lateness), ``settler`` (``call.finished`` to its ``complete_many``
being sent), ``complete`` (that store call), ``to_value`` (to
``call.settled``); per row, how much longer than ``2 L`` it took; and per
store operation, its count, mean time and items per call.

``python -m benchmarks latency [--rows N] [--rounds R] [--only A,B]``;
``--quick``: 50 ms only, 2 waves of rows, one round, nothing saved.
"""

from __future__ import annotations

import inspect
import os
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

import trioplay
from trioplay._trace import ListSink, Recorder
from trioplay._trace._records import (
    CallFinished,
    CallQueued,
    CallSettled,
    CallStarted,
    ReceiptClaimed,
    RowResolverStarted,
    RowTerminal,
)
from trioplay.stores import open_store

from . import plot, throughput
from .workload import (
    chosen,
    drop_schemas,
    machine,
    postgres_problem,
    postgres_url,
    save_results,
    stamp,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

LATENCIES = (0.05, 0.5)
IN_FLIGHT = 256
WINDOW = 0.005  # the reference's lane window, Limits(tool_batch_window=0.005)
IDEAL_SECONDS = 4.0  # rows per latency: enough waves of IN_FLIGHT rows for this long at the bound
DEFAULT_ROUNDS = 3
QUICK_WAVES = 2
BREAKDOWN_WAVES = 4
CONTENDERS = ("trio", "sqlite", "sqlite-window", "postgres", "postgres-window")
TARGET_RATIO = 0.95


def limits(window: float, in_flight: int = IN_FLIGHT) -> trioplay.Limits:
    """Limits wide enough that only the tools' latency binds ``in_flight`` rows."""
    return trioplay.Limits(
        max_concurrent_rows=in_flight,
        max_concurrent_external_calls=2 * in_flight,
        tool_batch_window=window,
    )


def default_rows(latency: float, waves: int | None = None, in_flight: int = IN_FLIGHT) -> int:
    """Rows for about :data:`IDEAL_SECONDS` at the bound (whole waves of rows, at least 4)."""
    if waves is None:
        waves = max(4, round(IDEAL_SECONDS / (2 * latency)))
    return in_flight * waves


class Stores:
    """Fresh stores, one per measurement: SQLite files in a temporary directory, PostgreSQL
    schemas (dropped by :meth:`drop`)."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._prefix = f"bench_latency_{uuid.uuid4().hex[:8]}"
        self.schemas: list[str] = []
        self._count = 0

    def url(self, kind: str) -> str:
        self._count += 1
        if kind == "sqlite":
            return f"sqlite:///{self._tmp / f'run{self._count}.db'}"
        schema = f"{self._prefix}_{self._count}"
        self.schemas.append(schema)
        return postgres_url(schema)

    def drop(self) -> None:
        if self.schemas:
            drop_schemas(self.schemas)


def _kind(name: str) -> tuple[str, float]:
    """``(store kind, lane window)`` of a trioplay contender."""
    store, _, window = name.partition("-")
    return store, WINDOW if window else 0.0


def contender(
    name: str, n: int, latency: float, in_flight: int, stores: Stores
) -> Callable[[], Awaitable[dict[str, Any]]]:
    if name == "trio":
        return lambda: throughput.baseline_limiter(n, latency, in_flight)
    kind, window = _kind(name)
    url = stores.url(kind)
    return lambda: throughput.run_trioplay(
        n, url, latency=latency, limits=limits(window, in_flight)
    )


def measure(name: str, n: int, latency: float, in_flight: int, stores: Stores) -> dict[str, Any]:
    out = trio.run(contender(name, n, latency, in_flight, stores))
    if name == "trio":
        if out["completed"] != n or out["calls"] != 2 * n:
            raise AssertionError(f"trio: expected {n} rows and {2 * n} calls, got {out}")
    else:
        throughput.check_engine_run(name, n, out)
    return out


# -- where the time goes ----------------------------------------------------
class TimedStore:
    """A store that times its claims and completions: each call, and when each key was in one.

    Its clock is the one the typed events are stamped with,
    ``trio.current_time()`` (``Recorder.bind_clock``).
    """

    TIMED = ("claim_many", "complete_many", "write_terminal_rows")

    def __init__(self, store: trioplay.Store) -> None:
        self._store = store
        self.calls: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.keys: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name not in self.TIMED or not inspect.iscoroutinefunction(found):
            return found
        calls = self.calls[name]
        keys = self.keys[name]

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = trio.current_time()
            try:
                return await found(*args, **kwargs)
            finally:
                ended = trio.current_time()
                items = args[-1]  # the requests, completions or sheet rows
                calls.append((ended - started, len(items)))
                for item in items:
                    keys[item.key] = (started, ended)

        setattr(self, name, timed)
        return timed


def breakdown(
    name: str, latency: float, waves: int, in_flight: int, stores: Stores
) -> dict[str, Any]:
    """One recorded, untimed run: where a call's and a row's time goes (means, in ms)."""
    kind, window = _kind(name)
    n = default_rows(latency, waves, in_flight)
    store = TimedStore(open_store(stores.url(kind)))
    sink = ListSink()
    recorder = Recorder(sink)
    out = trio.run(
        lambda: throughput.run_trioplay(
            n,
            store,  # type: ignore[arg-type]  # a proxy: every other method passes through
            latency=latency,
            limits=limits(window, in_flight),
            recorder=recorder,
        )
    )
    throughput.check_engine_run(name, n, out)
    return summarize(sink.events, latency, store)


PHASES = (
    ("lane", "waiting for its claim to be sent (lane, hydration turn)"),
    ("claim", "the claim's store call"),
    ("to_start", "the claim's answer to the tool starting (outcomes, governor, wake-up)"),
    ("tool", "the tool (its sleep, and the event loop's lateness)"),
    ("settler", "waiting for its completion to be sent (the settler's write before)"),
    ("complete", "the completion's store call"),
    ("to_value", "the completion written to the resolver having its value"),
)


def summarize(events: list[Any], latency: float, store: TimedStore) -> dict[str, Any]:
    """Mean phases of every tool call and the mean row of a recorded run, in ms."""
    at: dict[type, dict[str, float]] = defaultdict(dict)
    rows: dict[str, list[float]] = defaultdict(list)
    for event in events:
        kind = type(event)
        if kind in (CallQueued, ReceiptClaimed, CallStarted, CallFinished, CallSettled):
            at[kind][event.call] = event.at
        elif kind in (RowResolverStarted, RowTerminal):
            rows[event.row].append(event.at)
    claims, completions = store.keys["claim_many"], store.keys["complete_many"]
    calls = [key for key in at[CallSettled] if key in claims and key in completions]
    spans: dict[str, list[float]] = defaultdict(list)
    for key in calls:
        claim, complete = claims[key], completions[key]
        marks = (
            at[CallQueued][key],
            claim[0],
            claim[1],
            at[CallStarted][key],
            at[CallFinished][key],
            complete[0],
            complete[1],
            at[CallSettled][key],
        )
        for (phase, _), start, end in zip(PHASES, marks, marks[1:], strict=False):
            spans[phase].append(end - start)
    for phase, values in spans.items():
        # Each phase ends where the next begins: a negative mean is two clocks mixed.
        if statistics.fmean(values) < 0:
            raise AssertionError(f"the {phase} phase of a call came out negative: check the clocks")
    row_times = [times[-1] - times[0] for times in rows.values() if len(times) == 2]
    return {
        "calls": len(calls),
        "per_call_ms": {phase: 1e3 * statistics.fmean(spans[phase]) for phase, _ in PHASES},
        "row_ms": 1e3 * statistics.fmean(row_times),
        "row_beyond_latency_ms": 1e3 * (statistics.fmean(row_times) - 2 * latency),
        "store": {
            op: {
                "calls": len(timings),
                "mean_ms": 1e3 * statistics.fmean(t for t, _ in timings),
                "items_per_call": statistics.fmean(k for _, k in timings),
            }
            for op, timings in store.calls.items()
            if timings
        },
    }


def _print_breakdown(name: str, b: dict[str, Any]) -> None:
    phases = "  ".join(f"{phase} {ms:.2f}" for phase, ms in b["per_call_ms"].items())
    store = "; ".join(
        f"{op} {s['calls']}x {s['mean_ms']:.2f} ms ({s['items_per_call']:.0f} per call)"
        for op, s in b["store"].items()
    )
    print(
        f"  {name:<16} per row {b['row_ms']:6.1f} ms (+{b['row_beyond_latency_ms']:.1f});"
        f" per tool call, ms: {phases}\n{'':19}store: {store}"
    )


# -- the race ---------------------------------------------------------------
def run(
    *,
    latencies: tuple[float, ...] = LATENCIES,
    rows: int | None = None,
    rounds: int = DEFAULT_ROUNDS,
    contenders: tuple[str, ...] = CONTENDERS,
    in_flight: int = IN_FLIGHT,
    quick: bool = False,
    save: bool = True,
) -> dict[str, Any]:
    names = chosen(contenders, CONTENDERS)
    skipped: dict[str, str] = {}
    if any(name.startswith("postgres") for name in names):
        problem = postgres_problem()
        if problem is not None:
            print(f"latency: {problem}; skipping the PostgreSQL contenders")
            skipped = {name: problem for name in names if name.startswith("postgres")}
            names = [name for name in names if name not in skipped]
    print(
        f"latency: 2 tool columns whose tools sleep, {in_flight} rows in flight, "
        f"best of {rounds} round(s), contenders {', '.join(names)}"
    )
    started = time.time()
    where = machine()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="trioplay-latency-") as tmp:
        stores = Stores(Path(tmp))
        try:
            for latency in latencies:
                results[f"{latency * 1e3:g}ms"] = _race(
                    latency,
                    rows or default_rows(latency, QUICK_WAVES if quick else None, in_flight),
                    in_flight,
                    rounds,
                    names,
                    stores,
                )
        finally:
            stores.drop()
    payload = {
        "benchmark": "latency",
        "started_at": stamp(started),
        "in_flight": in_flight,
        "window": WINDOW,
        "rounds": rounds,
        "machine": where | {"loadavg_after": list(os.getloadavg())},
        "skipped": skipped,
        "results": results,
        "target": {"ratio": TARGET_RATIO},
    }
    if save:
        default = in_flight == IN_FLIGHT
        name = "latency" if default else f"latency-inflight{in_flight}"
        print(f"saved {save_results(name, payload)}")
        if default:
            plot.run()
    return payload


def _race(
    latency: float,
    n: int,
    in_flight: int,
    rounds: int,
    names: list[str],
    stores: Stores,
) -> dict[str, Any]:
    bound = 2 * latency
    print(
        f"\n{latency * 1e3:g} ms tools: {n:,} rows ({n // in_flight} waves of {in_flight}); "
        f"at the bound {in_flight / bound:,.0f} rows/s"
    )
    seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    run_seconds: dict[str, list[float]] = {name: [] for name in names if name != "trio"}
    for round_no in range(rounds):
        order = names[round_no % len(names) :] + names[: round_no % len(names)]
        for name in order:
            out = measure(name, n, latency, in_flight, stores)
            seconds[name].append(out["elapsed"])
            cpu[name].append(out["cpu"])
            if name != "trio":
                run_seconds[name].append(out["run_seconds"])
            print(
                f"  round {round_no + 1} {name:<16}{out['elapsed']:8.3f} s"
                f"{n / out['elapsed']:>9,.0f} rows/s"
                f"  cpu {out['cpu'] / out['elapsed']:4.0%} of a core"
            )
    rate = {name: n / min(times) for name, times in seconds.items()}
    ratio = {name: rate[name] / rate["trio"] for name in names} if "trio" in rate else {}
    per_round = (
        {
            name: [seconds["trio"][i] / seconds[name][i] for i in range(rounds)]
            for name in names
            if name != "trio"
        }
        if "trio" in rate
        else {}
    )
    print(f"  {'contender':<16}{'rows/s':>9}{'x trio':>9}  rounds")
    for name in names:
        versus = f"{ratio[name]:8.3f}x" if ratio else f"{'-':>9}"
        rounds_text = ", ".join(f"{r:.3f}" for r in per_round.get(name, []))
        print(f"  {name:<16}{rate[name]:>9,.0f}{versus}  {rounds_text}")
    found: dict[str, Any] = {}
    waves = max(1, min(BREAKDOWN_WAVES, n // in_flight))
    print(f"  where the time goes ({waves} waves, recorded, untimed):")
    for name in names:
        if name != "trio":
            found[name] = breakdown(name, latency, waves, in_flight, stores)
            _print_breakdown(name, found[name])
    return {
        "latency_s": latency,
        "rows": n,
        "bound_rows_per_s": in_flight / bound,
        "seconds": seconds,
        "run_seconds": run_seconds,
        "cpu_seconds": cpu,
        "rows_per_s": rate,
        "ratio_vs_trio": ratio,
        "ratio_vs_trio_per_round": per_round,
        "breakdown": found,
    }
