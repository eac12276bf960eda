"""Store calls: the CPU time and wall time of one store call, by operation, SQLite and PostgreSQL.

What a durable call costs the store, one operation at a time, with no
engine around it: ``calls`` times (default 300), on a fresh store (a SQLite
file, a fresh schema of the test server), in one ``trio.run``:

- ``claim``: ``claim_many`` of ``keys`` (default 8) keys never seen, the
  usual batch of a first run with rows in flight waiting on latency;
- ``complete``: ``complete_many`` of those ``keys`` claims;
- ``sheet``: ``write_terminal_rows`` of ``keys`` rows;
- ``replay``: ``claim_many`` of ``keys`` completed keys (a rerun);
- ``select 1`` (PostgreSQL only): one ``SELECT 1`` through the store's own
  bridge (``PostgresStore._call``), the floor of every PostgreSQL call.

Reported per call: the client's CPU time (``time.process_time``, every
thread, so the SQLite and bridge worker threads count) and the wall time,
and for PostgreSQL the CPU time of the server's backends (read from
``/proc``). Checked: every claim of a new key is ``Claimed``, every
completion lands, every replayed key is ``Settled`` with the completed
result, the sheet holds every row.

``python -m benchmarks store-calls [--rows KEYS] [--rounds CALLS]``.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

from trioplay import Claimed, ClaimRequest, Completion, Settled, SheetRow
from trioplay.stores import open_store

from .workload import (
    drop_schemas,
    machine,
    postgres_backend_cpu,
    postgres_problem,
    postgres_url,
    save_results,
    stamp,
)

DEFAULT_KEYS = 8
DEFAULT_CALLS = 300
QUICK_CALLS = 20
OPERATIONS = ("claim", "complete", "sheet", "replay", "select 1")
TTL = 60.0


def _open(kind: str, tmp: Path) -> tuple[Any, str | None]:
    """A fresh store of ``kind`` and, for PostgreSQL, its schema (the application name)."""
    if kind == "sqlite":
        return open_store(f"sqlite:///{tmp / 'store-calls.db'}"), None
    schema = f"bench_calls_{uuid.uuid4().hex[:8]}"
    return open_store(postgres_url(schema, application_name=schema)), schema


async def _measure(kind: str, keys: int, calls: int, tmp: Path) -> dict[str, Any]:
    store, schema = _open(kind, tmp)
    await store.open()
    out: dict[str, Any] = {}
    try:
        batches = [[f"k{i:05d}-{j:03d}" for j in range(keys)] for i in range(calls)]
        leases: list[list[Claimed]] = []

        async def claim(batch: list[str]) -> list[Any]:
            requests = [ClaimRequest(key, "tool", "t", "run") for key in batch]
            return await store.claim_many(requests, owner="o", lease_ttl=TTL, now=time.time())

        async def op_claim(i: int) -> None:
            outcomes = await claim(batches[i])
            if not all(isinstance(o, Claimed) for o in outcomes):
                raise AssertionError(f"{kind}: a claim of new keys got {outcomes}")
            leases.append(outcomes)

        async def op_complete(i: int) -> None:
            done = [Completion(o.key, o.lease_id, '{"email": "x"}') for o in leases[i]]
            if not all(await store.complete_many(done, now=time.time())):
                raise AssertionError(f"{kind}: a completion of our own lease did not land")

        async def op_sheet(i: int) -> None:
            rows = [
                SheetRow(key, i * keys + j, "completed", '{"email": "x"}', None, 1)
                for j, key in enumerate(batches[i])
            ]
            await store.write_terminal_rows("run", "sheet", rows)

        async def op_replay(i: int) -> None:
            outcomes = await claim(batches[i])
            if not all(isinstance(o, Settled) for o in outcomes) or any(
                o.receipt.status != "completed" for o in outcomes
            ):
                raise AssertionError(f"{kind}: a replay got {outcomes}")

        async def op_select(i: int) -> None:
            await store._call("select 1", lambda conn: conn.execute("SELECT 1").fetchone())

        ops = {
            "claim": op_claim,
            "complete": op_complete,
            "sheet": op_sheet,
            "replay": op_replay,
            "select 1": op_select,
        }
        for name in OPERATIONS:
            if name == "select 1" and schema is None:
                continue
            server = postgres_backend_cpu(schema) if schema else None
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(calls):
                await ops[name](i)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            after = postgres_backend_cpu(schema) if schema else None
            out[name] = {
                "cpu_us": 1e6 * cpu / calls,
                "wall_ms": 1e3 * wall / calls,
                "server_cpu_us": (
                    1e6 * (after - server) / calls
                    if server is not None and after is not None
                    else None
                ),
            }
        counts = await store.count_rows("run", "sheet")
        if counts.get("completed") != keys * calls:
            raise AssertionError(f"{kind}: the sheet holds {counts}")
    finally:
        await store.aclose()
        if schema is not None:
            await trio.to_thread.run_sync(drop_schemas, [schema])
    return out


def run(
    *, keys: int = DEFAULT_KEYS, calls: int = DEFAULT_CALLS, save: bool = True
) -> dict[str, Any]:
    """Measure every operation on SQLite and (when the test server answers) PostgreSQL."""
    started = time.time()
    print(f"store-calls: {calls} calls of each operation, {keys} keys or rows per call")
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for kind in ("sqlite", "postgres"):
        if kind == "postgres" and (problem := postgres_problem()) is not None:
            print(f"store-calls: {problem}; skipping postgres")
            skipped[kind] = problem
            continue
        with tempfile.TemporaryDirectory(prefix="trioplay-store-calls-") as tmp:
            results[kind] = trio.run(_measure, kind, keys, calls, Path(tmp))
        for name, r in results[kind].items():
            server = r["server_cpu_us"]
            print(
                f"  {kind:8} {name:9} cpu {r['cpu_us']:7,.0f} µs/call  wall {r['wall_ms']:6.2f} ms"
                + (f"  server cpu {server:6,.0f} µs/call" if server is not None else "")
            )
    payload = {
        "benchmark": "store-calls",
        "started_at": stamp(started),
        "keys_per_call": keys,
        "calls": calls,
        "machine": machine(),
        "results": results,
        "skipped": skipped,
    }
    if save:
        print(f"saved {save_results('store-calls', payload)}")
    return payload
