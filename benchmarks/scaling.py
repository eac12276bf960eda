"""Cooperative execution: one run shared by 1, 2 and 4 processes.

``python -m benchmarks scaling [--rows N]`` starts N worker processes (each
``python -m benchmarks.scaling --child STORE RUN_ID ROWS LATENCY IN_FLIGHT``)
on one run of the shared workload and times them. It does this on SQLite
(one machine, a shared file) and on PostgreSQL (the server named by
``TRIOPLAY_BENCH_POSTGRES``, default the local test database, in a schema of
its own that is dropped afterwards).

Each worker imports, opens its runtime (and store), says ``ready`` and waits
for a ``go`` line on its stdin; the parent sends ``go`` to all once all are
ready. Two times are kept: ``seconds``, from the first start to the last
exit (process start-up inside, as users running N processes see it), and
``seconds_from_go``, from ``go`` to the last worker's end of its run (the
run alone: what N processes add, without N Python start-ups on 2 cores).
Each run is checked: the processes together completed every row, and called
each tool exactly once per row (``provider_calls`` summed over the
processes), so nothing was replayed from an earlier run's receipts.

Two variants:

- ``scaling``: the throughput workload (zero-latency tools, 20,000 rows), on
  SQLite and PostgreSQL. The single-process PostgreSQL figure is the
  throughput of PostgreSQL from one process. On this 2-core machine more
  than two processes cannot add CPU, so the ratio mostly shows what
  coordination costs, not what more machines would give.
- ``scaling-latency``: tools of 100 ms (``trio.sleep``), 64 rows in flight
  per process (``max_concurrent_rows=64``, global calls 128), 4,000 rows in
  pages of 250 (16 pages, so every process has whole pages to take), on
  PostgreSQL only: latency-bound, so every process adds rows in flight and
  the bound is N times one process (target: 4 processes at least 3.6 times
  one). Twice: ``postgres`` with the defaults, and ``postgres-page-1s``
  with ``page_wait_delay=1.0``, what the poll was before it had a setting of
  its own (``receipt_wait_delay``). A process that has run every page it
  could take waits for its peers' pages to be done before its run returns
  (the map's result counts every row), asking after each held page every
  ``page_wait_delay``; in a run of a few seconds a slow poll is a visible
  part of the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

import trioplay

from . import plot, workload

DEFAULT_ROWS = 20_000
PROCESS_COUNTS = (1, 2, 4)
QUICK_PROCESS_COUNTS = (1, 4)  # --quick: the ends; each worker is a Python start-up
ROOT = Path(__file__).resolve().parents[1]
LATENCY_ROWS = 4_000
LATENCY = 0.1
LATENCY_IN_FLIGHT = 64
LATENCY_TARGET = 3.6  # 4 processes against one, latency-bound
SLOW_PAGE_WAIT = 1.0  # postgres-page-1s: page_wait_delay as it was (receipt_wait_delay)


def latency_page_size(rows: int, in_flight: int) -> int:
    """Pages of the latency variant: 16 of them (at least ``in_flight`` rows each), so 1, 2
    and 4 processes each get whole pages, and a page is never all the work there is."""
    return max(in_flight, rows // 16)


def child(
    store: str, run_id: str, rows: int, latency: float, in_flight: int, wait_delay: float
) -> None:
    limits = None
    if latency:
        limits = trioplay.Limits(
            max_concurrent_rows=in_flight,
            max_concurrent_external_calls=2 * in_flight,
            page_size=latency_page_size(rows, in_flight),
            page_wait_delay=wait_delay or trioplay.Limits().page_wait_delay,
        )

    async def main() -> None:
        async with trioplay.open_runtime(
            store=store, tools=workload.registry(latency), limits=limits
        ) as rt:
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            started, cpu = time.time(), time.process_time()
            output = await rt.run(workload.enrich_play, {"rows": rows}, run_id=run_id)
            ended, cpu = time.time(), time.process_time() - cpu
            stats = rt.last_stats
        print(
            json.dumps(
                {
                    "completed": output["completed"],
                    "skipped": output["skipped"],
                    "started": started,
                    "ended": ended,
                    "cpu": cpu,
                    "provider_calls": stats.provider_calls if stats else None,
                }
            )
        )

    trio.run(main)


def _one(
    store: str, processes: int, rows: int, latency: float, in_flight: int, wait_delay: float
) -> dict[str, Any]:
    run_id = f"scaling-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "benchmarks.scaling", "--child", store, run_id, str(rows)]
    command += [str(latency), str(in_flight), str(wait_delay)]
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            raise RuntimeError(f"a worker did not start: {line!r}\n{proc.communicate()[1]}")
    go = time.time()
    busy, every = workload.machine_cpu_times()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"a worker failed:\n{err}")
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    busy_after, every_after = workload.machine_cpu_times()
    seconds = time.perf_counter() - started
    from_go = max(o["ended"] for o in outputs) - go
    completed = sum(o["completed"] for o in outputs)
    calls = sum(o["provider_calls"] for o in outputs)
    if completed != rows or calls != 2 * rows:
        raise AssertionError(
            f"{processes} processes completed {completed} rows with {calls} provider calls, "
            f"expected {rows} rows and {2 * rows} calls (each exactly once)"
        )
    return {
        "processes": processes,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "seconds_from_go": from_go,
        "rows_per_s_from_go": rows / from_go,
        "per_process": [o["completed"] for o in outputs],
        "per_process_seconds_from_go": [o["ended"] - go for o in outputs],
        "per_process_cpu_s": [o["cpu"] for o in outputs],
        # How much of the machine's cores were busy from go to the last exit
        # (every process: the workers, the server, anything else running).
        "machine_busy_share": (busy_after - busy) / max(every_after - every, 1e-9),
    }


def run(
    rows: int = DEFAULT_ROWS,
    *,
    save: bool = True,
    latency: float = 0.0,
    in_flight: int = LATENCY_IN_FLIGHT,
    stores: tuple[str, ...] = ("sqlite", "postgres"),
    process_counts: tuple[int, ...] = PROCESS_COUNTS,
) -> dict[str, Any]:
    """One variant (``latency`` 0: the throughput workload); print, return and save it."""
    name = "scaling-latency" if latency else "scaling"
    what = (
        f"tools of {latency * 1e3:g} ms, {in_flight} rows in flight per process"
        if latency
        else "zero-latency tools"
    )
    counts = ", ".join(map(str, process_counts[:-1])) + f" and {process_counts[-1]}"
    print(f"{name}: {rows:,} rows, {what}, {counts} processes sharing one run")
    results: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    schema = f"bench_scaling_{uuid.uuid4().hex[:8]}"
    schemas: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trioplay-scaling-") as tmp:
        try:
            for kind in stores:
                postgres = kind.startswith("postgres")
                if postgres and (problem := workload.postgres_problem()) is not None:
                    print(f"{name}: {problem}; skipping it")
                    skipped[kind] = problem
                    continue
                results[kind] = []
                for processes in process_counts:
                    if kind == "sqlite":
                        store = f"sqlite:///{tmp}/scaling-{processes}.db"
                    else:
                        schemas.append(f"{schema}_{kind.replace('-', '_')}_{processes}")
                        store = workload.postgres_url(schemas[-1])
                    wait_delay = SLOW_PAGE_WAIT if kind == "postgres-page-1s" else 0.0
                    result = _one(store, processes, rows, latency, in_flight, wait_delay)
                    results[kind].append(result)
                    first = results[kind][0]
                    result["scaling"] = result["rows_per_s"] / first["rows_per_s"]
                    result["scaling_from_go"] = (
                        result["rows_per_s_from_go"] / first["rows_per_s_from_go"]
                    )
                    print(
                        f"  {kind:13s} {processes} process(es) {result['seconds']:7.2f} s "
                        f"{result['rows_per_s']:7,.0f} rows/s x{result['scaling']:4.2f};"
                        f" from go {result['seconds_from_go']:6.2f} s"
                        f" {result['rows_per_s_from_go']:7,.0f} rows/s"
                        f" x{result['scaling_from_go']:4.2f};  rows per process"
                        f" {result['per_process']}, each done after"
                        f" {', '.join(f'{t:.2f}' for t in result['per_process_seconds_from_go'])} s"
                        f" using {', '.join(f'{t:.2f}' for t in result['per_process_cpu_s'])} s"
                        " CPU; the machine's cores"
                        f" {100 * result['machine_busy_share']:.0f}% busy"
                    )
        finally:
            if schemas:
                workload.drop_schemas(schemas)
    payload: dict[str, Any] = {
        "benchmark": name,
        "rows": rows,
        "latency_s": latency,
        "in_flight_per_process": in_flight if latency else None,
        "results": results,
        "skipped": skipped,
        "machine": workload.machine(),
    }
    if latency:
        payload["target"] = {"four_vs_one": LATENCY_TARGET}
        for kind, runs in results.items():
            four = runs[-1]
            payload["target"][kind] = {
                "met": four["scaling"] >= LATENCY_TARGET,
                "met_from_go": four["scaling_from_go"] >= LATENCY_TARGET,
            }
            print(
                f"target ({kind}): 4 processes >= {LATENCY_TARGET}x one: x{four['scaling']:.2f} "
                f"with start-up ({'met' if four['scaling'] >= LATENCY_TARGET else 'MISSED'}), "
                f"x{four['scaling_from_go']:.2f} from go "
                f"({'met' if four['scaling_from_go'] >= LATENCY_TARGET else 'MISSED'})"
            )
    if save:
        print(f"saved {workload.save_results(name, payload)}")
        if latency:
            plot.run()
    return payload


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "--child":
        store, run_id, rows, latency, in_flight, wait_delay = sys.argv[2:]
        child(store, run_id, int(rows), float(latency), int(in_flight), float(wait_delay))
    else:
        run(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROWS)
