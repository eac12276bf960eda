"""Latency waits: what the durable writes on a row's path cost when CPU costs nothing.

The latency benchmark's workload (:mod:`benchmarks.latency`: two tool
columns whose tools sleep 50 ms, 256 rows in flight, group commit) run in
virtual time (``trio.testing.MockClock(autojump_threshold=0)``) on
``memory://``, with every ``claim_many``, ``complete_many`` and
``write_terminal_rows`` first sleeping a fixed virtual latency. Python's
CPU takes no virtual time, so the ratio to the bound (256 rows / 100 ms,
which raw Trio reaches exactly here) is what the waits alone cost: the
lane's and the settler's queues, each call's own claim and completion,
the writer. The same code gives the same count on any machine at any load,
which the wall-clock race cannot on a shared one.

Each case is named by its latencies in ms (claim / completion / sheet
write): ``none`` (0/0/0); ``sqlite-like`` (0.4/0.2/1, the SQLite store's
CPU per call at the workload's batch size, which it spends inline);
``3ms`` (3/3/10); ``postgres-like`` (6/5/10, PostgreSQL's commits
waiting for the WAL flush on this machine, see docs/benchmarks.md).

``python -m benchmarks latency-waits [--rows N]``; ``--quick``: 1,024 rows.
"""

from __future__ import annotations

import time
from typing import Any

import trio
import trio.testing

from trioplay.adapters.faults import SlowStore
from trioplay.adapters.simulated import Latency
from trioplay.stores import open_store

from . import throughput
from .latency import IN_FLIGHT, TimedStore, limits
from .workload import machine, save_results, stamp

LATENCY = 0.05
DEFAULT_ROWS = IN_FLIGHT * 20
QUICK_ROWS = IN_FLIGHT * 4
CASES = {  # name: (claim, completion, sheet write) in ms
    "none": (0.0, 0.0, 0.0),
    "sqlite-like": (0.4, 0.2, 1.0),
    "3ms": (3.0, 3.0, 10.0),
    "postgres-like": (6.0, 5.0, 10.0),
}


def slowed(delays_ms: tuple[float, ...]) -> TimedStore:
    """``memory://`` with each of :attr:`TimedStore.TIMED` first sleeping its delay, timed.

    The delays are the fault lab's :class:`~trioplay.adapters.faults.SlowStore`,
    one per operation; the calls and their items are counted by the latency
    benchmark's :class:`~benchmarks.latency.TimedStore`.
    """
    store: Any = open_store("memory://")
    for operation, delay in zip(TimedStore.TIMED, delays_ms, strict=True):
        store = SlowStore(store, Latency.fixed(delay / 1e3), operations={operation})
    return TimedStore(store)


def measure(n: int, delays_ms: tuple[float, ...]) -> dict[str, Any]:
    """One virtual-time run of ``n`` rows; its virtual seconds, ratio to the bound, store calls."""
    store = slowed(delays_ms)

    async def run() -> float:
        started = trio.current_time()
        out = await throughput.run_trioplay(
            n,
            store,  # type: ignore[arg-type]  # a proxy: every other method passes through
            latency=LATENCY,
            limits=limits(0.0),
        )
        throughput.check_engine_run("latency-waits", n, out)
        return trio.current_time() - started

    seconds = trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    bound = IN_FLIGHT / (2 * LATENCY)
    return {
        "virtual_seconds": seconds,
        "rows_per_s": n / seconds,
        "ratio_to_bound": n / seconds / bound,
        "store_calls": {
            op: {
                "calls": len(calls),
                "items_per_call": sum(k for _, k in calls) / len(calls) if calls else 0,
            }
            for op in TimedStore.TIMED
            for calls in [store.calls[op]]
        },
    }


def baseline(n: int) -> float:
    """Raw Trio's virtual seconds for the same rows (the bound, exactly)."""

    async def run() -> float:
        started = trio.current_time()
        await throughput.baseline_limiter(n, LATENCY, IN_FLIGHT)
        return trio.current_time() - started

    return trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


def run(rows: int = DEFAULT_ROWS, *, save: bool = True) -> dict[str, Any]:
    started = time.time()
    bound_seconds = rows / (IN_FLIGHT / (2 * LATENCY))
    trio_seconds = baseline(rows)
    print(
        f"latency-waits: {rows:,} rows, tools {LATENCY * 1e3:g} ms, {IN_FLIGHT} in flight,"
        f" virtual time; raw Trio {trio_seconds:.3f} s, the bound {bound_seconds:.3f} s"
    )
    results: dict[str, Any] = {}
    for name, delays in CASES.items():
        found = results[name] = measure(rows, delays) | {"latency_ms": delays}
        calls = "; ".join(
            f"{op} {s['calls']}x {s['items_per_call']:.0f}/call"
            for op, s in found["store_calls"].items()
        )
        print(
            f"  {name:<14} {'/'.join(f'{d:g}' for d in delays):>10} ms"
            f"  {found['virtual_seconds']:6.3f} s  {found['ratio_to_bound']:.3f} of the bound"
            f"  ({calls})"
        )
    payload = {
        "benchmark": "latency-waits",
        "started_at": stamp(started),
        "rows": rows,
        "latency_s": LATENCY,
        "in_flight": IN_FLIGHT,
        "trio_virtual_seconds": trio_seconds,
        "machine": machine(),
        "results": results,
    }
    if save:
        print(f"saved {save_results('latency-waits', payload)}")
    return payload
