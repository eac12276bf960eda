"""``python -m benchmarks [names...] [--rows N] [--quick]``: run the suite.

Without names it runs the default set (``throughput`` and ``memory``), which
is what ``make bench`` does; ``all`` runs every benchmark but ``compare``
(the throughput of an earlier commit against the working tree, see
:mod:`benchmarks.compare`) and ``instructions`` (machine instructions per
row, counted under valgrind, see :mod:`benchmarks.instructions`).
``sigint`` is no benchmark but a trial of the promise that Ctrl-C and
SIGTERM leave the store consistent (see :mod:`benchmarks.sigint_trials`),
and ``faults`` one of the promise that a process paused past its lease
never hangs, corrupts the sheet or misstates the run (see
:mod:`benchmarks.faults`), ``pgfaults`` one of riding out PostgreSQL faults
(see :mod:`benchmarks.pgfaults`); ``all`` leaves them out too, and ``plot``,
which draws no measurement of its own but ``docs/img/latency-scaling.svg``
from the newest saved ``latency`` and ``scaling-latency`` results (see
:mod:`benchmarks.plot`).
``--quick`` shrinks every benchmark to a few seconds (one round, a few
thousand rows) and saves nothing: it checks that the harness and the engine
still work, its numbers mean little.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from . import (
    compare,
    faults,
    fetch,
    instructions,
    latency,
    latency_waits,
    memory,
    peers,
    pgfaults,
    plot,
    scaling,
    scenarios,
    sigint_trials,
    store_calls,
    throughput,
    wait_kills,
    wait_race,
    wait_register,
)

QUICK_ROWS = 5_000
QUICK_MEMORY_ROWS = 2_000
QUICK_FETCH_REQUESTS = 1_000
QUICK_SCALING_ROWS = 2_000
QUICK_SCALING_LATENCY_ROWS = 512
QUICK_INSTRUCTION_ROWS = 500

Benchmark = Callable[[argparse.Namespace], Any]


def _throughput(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_ROWS if args.quick else throughput.DEFAULT_ROWS)
    rounds = args.rounds or (1 if args.quick else throughput.DEFAULT_ROUNDS)
    contenders = tuple(args.only.split(",")) if args.only else throughput.CONTENDERS
    return throughput.run(rows=rows, rounds=rounds, save=args.save, contenders=contenders)


def _compare(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_ROWS if args.quick else compare.DEFAULT_ROWS)
    rounds = args.rounds or (1 if args.quick else compare.DEFAULT_ROUNDS)
    contenders = tuple(args.only.split(",")) if args.only else compare.DEFAULT_CONTENDERS
    return compare.run(
        against=args.against, rows=rows, rounds=rounds, save=args.save, contenders=contenders
    )


def _fetch(args: argparse.Namespace) -> Any:
    requests = args.rows or (QUICK_FETCH_REQUESTS if args.quick else fetch.DEFAULT_REQUESTS)
    rounds = args.rounds or (1 if args.quick else fetch.DEFAULT_ROUNDS)
    return fetch.run(requests=requests, rounds=rounds, save=args.save)


def _memory(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_MEMORY_ROWS if args.quick else memory.DEFAULT_ROWS)
    return memory.run(["small"], rows=rows, quick=args.quick, save=args.save)


def _memory_1m(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_MEMORY_ROWS if args.quick else memory.DEFAULT_ROWS)
    return memory.run(["small", "small-10x"], rows=rows, quick=args.quick, save=args.save)


def _memory_large(args: argparse.Namespace) -> Any:
    return memory.run(["large"], rows=args.rows, quick=args.quick, save=args.save)


def _instructions(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_INSTRUCTION_ROWS if args.quick else instructions.DEFAULT_ROWS)
    contenders = tuple(args.only.split(",")) if args.only else instructions.DEFAULT_CONTENDERS
    return instructions.run(rows=rows, save=args.save, contenders=contenders)


def _scaling(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_SCALING_ROWS if args.quick else scaling.DEFAULT_ROWS)
    counts = scaling.QUICK_PROCESS_COUNTS if args.quick else scaling.PROCESS_COUNTS
    return scaling.run(rows, save=args.save, process_counts=counts)


def _scaling_latency(args: argparse.Namespace) -> Any:
    rows = args.rows or (QUICK_SCALING_LATENCY_ROWS if args.quick else scaling.LATENCY_ROWS)
    stores = ("postgres", "postgres-page-1s")
    counts = scaling.QUICK_PROCESS_COUNTS if args.quick else scaling.PROCESS_COUNTS
    return scaling.run(
        rows, save=args.save, latency=scaling.LATENCY, stores=stores, process_counts=counts
    )


def _latency(args: argparse.Namespace) -> Any:
    rounds = args.rounds or (1 if args.quick else latency.DEFAULT_ROUNDS)
    contenders = tuple(args.only.split(",")) if args.only else latency.CONTENDERS
    return latency.run(
        latencies=latency.LATENCIES[:1] if args.quick else latency.LATENCIES,
        rows=args.rows,
        rounds=rounds,
        contenders=contenders,
        in_flight=args.in_flight or latency.IN_FLIGHT,
        quick=args.quick,
        save=args.save,
    )


def _latency_waits(args: argparse.Namespace) -> Any:
    rows = args.rows or (latency_waits.QUICK_ROWS if args.quick else latency_waits.DEFAULT_ROWS)
    return latency_waits.run(rows, save=args.save)


def _peers(args: argparse.Namespace) -> Any:
    default = peers.QUICK_CONTENDERS if args.quick else peers.CONTENDERS
    return peers.run(
        rows=args.rows or (peers.QUICK_ROWS if args.quick else peers.DEFAULT_ROWS),
        latency_rows=peers.QUICK_LATENCY_ROWS if args.quick else peers.LATENCY_ROWS,
        rounds=args.rounds or (1 if args.quick else peers.DEFAULT_ROUNDS),
        contenders=tuple(args.only.split(",")) if args.only else default,
        quick=args.quick,
        save=args.save,
    )


def _store_calls(args: argparse.Namespace) -> Any:
    calls = args.rounds or (store_calls.QUICK_CALLS if args.quick else store_calls.DEFAULT_CALLS)
    return store_calls.run(keys=args.rows or store_calls.DEFAULT_KEYS, calls=calls, save=args.save)


def _scenarios(args: argparse.Namespace) -> Any:
    rounds = args.rounds or (1 if args.quick else scenarios.DEFAULT_ROUNDS)
    return scenarios.run(rounds=rounds, save=args.save)


def _plot(args: argparse.Namespace) -> Any:
    return plot.run()


def _sigint(args: argparse.Namespace) -> Any:
    trials = args.trials or (6 if args.quick else sigint_trials.DEFAULT_TRIALS)
    report = sigint_trials.run(
        trials,
        rows=args.rows or sigint_trials.DEFAULT_ROWS,
        seed=args.seed,
        signum=sigint_trials.parse_signal(args.signal),
        mode=args.mode,
    )
    return report


def _faults(args: argparse.Namespace) -> Any:
    trials = args.trials or (2 if args.quick else faults.DEFAULT_TRIALS)
    rows = args.rows or (1_000 if args.quick else faults.DEFAULT_ROWS)
    stores = tuple(args.stores.split(","))
    return faults.run(trials, rows=rows, seed=args.seed, stores=stores, save=args.save)


def _wait_race(args: argparse.Namespace) -> Any:
    slots = args.rows or (200 if args.quick else wait_race.DEFAULT_SLOTS)
    report = wait_race.run(slots)
    if report["lost"] or report["double"] or report["consumed"] != report["slots"]:
        raise SystemExit("wait_race: an event was lost or consumed twice")
    return report


def _wait_kills(args: argparse.Namespace) -> Any:
    trials = args.trials or (3 if args.quick else wait_kills.DEFAULT_TRIALS)
    slots = args.rows or wait_kills.DEFAULT_SLOTS
    report = wait_kills.run(trials, slots=slots, seed=args.seed)
    if any(report[kind]["problem_count"] for kind in ("sqlite", "postgres")):
        raise SystemExit("wait_kills: a trial left the store unsound")
    return report


def _wait_register(args: argparse.Namespace) -> Any:
    return wait_register.run(args.rows or (2_000 if args.quick else wait_register.DEFAULT_WAITS))


def _pgfaults(args: argparse.Namespace) -> Any:
    trials = args.trials or (1 if args.quick else pgfaults.DEFAULT_TRIALS)
    return pgfaults.run(trials, rows=args.rows or pgfaults.DEFAULT_ROWS)


BENCHMARKS: dict[str, tuple[Benchmark, str]] = {
    "throughput": (_throughput, "rows/s of trioplay (memory, sqlite) vs raw Trio"),
    "memory": (_memory, "peak RSS of a small-row map on SQLite (100k rows)"),
    "memory-1m": (_memory_1m, "peak RSS at 100k and at 10 x that (1M) rows, and their ratio"),
    "memory-large": (_memory_large, "peak RSS of 10,000 rows whose tool returns 1 MiB each"),
    "fetch": (_fetch, "requests/s of durable ctx.fetch (sqlite) vs plain httpx, local server"),
    "scaling": (_scaling, "rows/s of one run shared by 1, 2 and 4 processes (sqlite, postgres)"),
    "scaling-latency": (
        _scaling_latency,
        "the same with 100 ms tools, 64 rows in flight per process (postgres)",
    ),
    "latency": (_latency, "rows/s with 50 and 500 ms tools vs raw Trio's same sleeps"),
    "latency-waits": (
        _latency_waits,
        "the latency workload in virtual time, store calls of fixed latency: the waits alone",
    ),
    "peers": (
        _peers,
        "trioplay vs DBOS Transact (SQLite and PostgreSQL), and the thread vs trio-asyncio bridge",
    ),
    "store-calls": (
        _store_calls,
        "CPU and wall time of one store call by operation (sqlite, postgres)",
    ),
    "scenarios": (_scenarios, "wall time of each built-in scenario from the command line (< 2 s)"),
    "plot": (_plot, "docs/img/latency-scaling.svg from the newest latency and scaling-latency"),
    "compare": (_compare, "throughput of --against REV and of the working tree, interleaved"),
    "instructions": (_instructions, "instructions per row of the throughput contenders (valgrind)"),
    "sigint": (_sigint, "CLI runs interrupted by a signal at random points: is the store sound?"),
    "faults": (_faults, "one of two processes paused past its lease: no hang, no lost row?"),
    "wait_kills": (
        _wait_kills,
        "event delivery killed (SIGKILL) at random points, sqlite and postgres: is it sound?",
    ),
    "wait_register": (
        _wait_register,
        "10,000 waits registered a page at a time, polled, registered again: calls and time",
    ),
    "wait_race": (
        _wait_race,
        "two processes race wait registration against sending (postgres): none lost or doubled",
    ),
    "pgfaults": (
        _pgfaults,
        "PostgreSQL backends killed, connections cut for 3 and 8 s: ridden out within store_retry?",
    ),
}
NOT_IN_ALL = (
    "compare",
    "instructions",
    "sigint",
    "faults",
    "plot",
    "wait_kills",
    "wait_race",
    "pgfaults",
)
DEFAULT = ("throughput", "memory")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="trioplay benchmarks; see docs/benchmarks.md",
        epilog="benchmarks: "
        + "; ".join(f"{name}: {doc}" for name, (_, doc) in BENCHMARKS.items())
        + f". Default: {' '.join(DEFAULT)}; 'all' runs every one but {', '.join(NOT_IN_ALL)}.",
    )
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=None, help="row count (base count for memory)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the throughput race")
    parser.add_argument(
        "--only",
        metavar="A,B",
        help=f"throughput (or compare) contenders to run, of {','.join(throughput.CONTENDERS)}",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        default="HEAD",
        help="compare: the git revision to measure the working tree against (default: HEAD)",
    )
    parser.add_argument(
        "--in-flight", type=int, default=None, help="latency: rows in flight (default 256)"
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="sigint, faults: runs to interrupt (per store); pgfaults: of each fault",
    )
    parser.add_argument("--seed", type=int, default=0, help="sigint, faults: seed of the delays")
    parser.add_argument(
        "--stores",
        default="sqlite,postgres",
        help="faults: the stores to try, of sqlite,postgres (default both)",
    )
    parser.add_argument(
        "--signal", default="INT", help="sigint: the signal to send, INT or TERM (default INT)"
    )
    parser.add_argument(
        "--mode",
        choices=("cli", "library"),
        default="cli",
        help="sigint: interrupt `trioplay run` (default) or a library program under trio.run",
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds, nothing saved")
    parser.add_argument(
        "--no-save", dest="save", action="store_false", help="do not write benchmarks/results/"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.save = False
    names = args.names or list(DEFAULT)
    if names == ["all"]:
        names = [name for name in BENCHMARKS if name not in NOT_IN_ALL]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    code = 0
    for index, name in enumerate(names):
        if index:
            print()
        result = BENCHMARKS[name][0](args)
        if isinstance(result, sigint_trials.Report | faults.Report) and not result.clean:
            code = 1  # a trial broke a promise
    return code


if __name__ == "__main__":
    sys.exit(main())
