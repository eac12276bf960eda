"""Cooperative execution: one run shared by 1, 2 and 4 processes.

``python -m benchmarks scaling [--rows N]`` starts N worker processes (each
``python -m benchmarks.scaling --child STORE RUN_ID ROWS``) on one run of the
shared workload and times them from the first start to the last exit. It
does this on SQLite (one machine, a shared file) and on PostgreSQL (the
server named by ``TRIOPLAY_BENCH_POSTGRES``, default the local test
database, in a schema of its own that is dropped afterwards).

The single-process PostgreSQL figure is the foundation throughput benchmark
on PostgreSQL; the scaling ratio is rows/s with N processes over rows/s with
one. On this 2-core machine more than two processes cannot add CPU, so the
ratio mostly shows what coordination costs, not what more machines would give.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

import trioplay

from . import workload

DEFAULT_ROWS = 20_000
PROCESS_COUNTS = (1, 2, 4)
POSTGRES = os.environ.get("TRIOPLAY_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parents[1]


def child(store: str, run_id: str, rows: int) -> None:
    async def main() -> None:
        async with trioplay.open_runtime(store=store, tools=workload.registry()) as rt:
            output = await rt.run(workload.enrich_play, {"rows": rows}, run_id=run_id)
        print(json.dumps({"completed": output["completed"], "skipped": output["skipped"]}))

    trio.run(main)


def _postgres_url(schema: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(POSTGRES, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        print(f"scaling: PostgreSQL at {POSTGRES} is unreachable ({exc}); skipping it")
        return None
    separator = "&" if "?" in POSTGRES else "?"
    return f"{POSTGRES}{separator}schema={schema}"


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _one(store: str, processes: int, rows: int) -> dict[str, Any]:
    run_id = f"scaling-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "benchmarks.scaling", "--child", store, run_id, str(rows)]
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"a worker failed:\n{err}")
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    seconds = time.perf_counter() - started
    completed = sum(o["completed"] for o in outputs)
    if completed != rows:
        raise AssertionError(f"{processes} processes completed {completed} rows, expected {rows}")
    return {
        "processes": processes,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "per_process": [o["completed"] for o in outputs],
    }


def run(rows: int = DEFAULT_ROWS, *, save: bool = True) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="trioplay-scaling-") as tmp:
        stores: dict[str, str | None] = {"sqlite": None, "postgres": None}
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        try:
            for name in stores:
                results[name] = []
                for processes in PROCESS_COUNTS:
                    if name == "sqlite":
                        store = f"sqlite:///{tmp}/scaling-{processes}.db"
                    else:
                        url = _postgres_url(f"{schema}_{processes}")
                        if url is None:
                            break
                        store = url
                    result = _one(store, processes, rows)
                    results[name].append(result)
                    rate = result["rows_per_s"]
                    scaling = rate / results[name][0]["rows_per_s"]
                    print(
                        f"  {name:9s} {processes} process(es) {result['seconds']:7.2f} s "
                        f"{rate:9,.0f} rows/s  scaling {scaling:4.2f}x"
                        f"  rows per process {result['per_process']}"
                    )
        finally:
            for processes in PROCESS_COUNTS:
                try:
                    _drop_schema(f"{schema}_{processes}")
                except Exception as exc:
                    print(f"scaling: could not drop schema {schema}_{processes}: {exc}")
    payload = {
        "benchmark": "scaling",
        "rows": rows,
        "results": results,
        "machine": workload.machine(),
    }
    if save:
        print(f"saved {workload.save_results('scaling', payload)}")
    return payload


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        run(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROWS)
