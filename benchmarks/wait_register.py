"""Group registration of waits (issue 22, acceptance 7): store calls and time.

``python -m benchmarks wait_register [--rows WAITS]`` (default 10,000)
registers WAITS waits (one per row, each in its own slot, the way rows of a
map suspend) in batches of a page (``Limits.page_size``, 1,000), then polls
them all in one call, then registers them all again (a rerun meets every
wait), on each store: memory, SQLite and PostgreSQL (when the server of
``TRIOPLAY_TEST_POSTGRES`` answers). It reports the store calls made and the
time each phase took. The point is the count: suspending 10,000 rows costs
one store call per page of rows, not one per row. ``tests/test_wait_register.py``
checks the counts on a short form. Last, the engine side (:func:`measure_map`):
a map of WAITS rows that all suspend, and the store calls that registered
them (the engine groups the rows that suspend together).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import trio

import trioplay
from trioplay import Store, WaitRequest
from trioplay.stores import open_store
from trioplay.stores.memory import MemoryStore

from .wait_race import DSN

DEFAULT_WAITS = 10_000
PAGE = 1_000
RUN = "register"


class Counting:
    """Counts the calls made to a store's wait operations."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls = 0

    async def register(self, requests: list[WaitRequest], now: float) -> Any:
        self.calls += 1
        return await self.store.register_waits(requests, now=now)

    async def poll(self, keys: list[str], now: float) -> Any:
        self.calls += 1
        return await self.store.poll_waits(keys, now=now)


def requests_for(waits: int) -> list[WaitRequest]:
    return [
        WaitRequest(
            f"w{i:06d}", RUN, "leads", f"row-{i}", "approval", f'"{i}"', 1e12, f"t{i}-{RUN}"
        )
        for i in range(waits)
    ]


async def measure(store: Store, waits: int) -> dict[str, Any]:
    """Register ``waits`` waits a page at a time, poll them, register them again."""
    await store.begin_attempt(RUN, "register", "{}", now=1_000.0)
    requests = requests_for(waits)
    counting = Counting(store)
    phases: dict[str, Any] = {}
    for phase in ("register", "poll", "rerun"):
        before, started = counting.calls, time.perf_counter()
        if phase == "poll":
            found = await counting.poll([r.wait_key for r in requests], 2_000.0)
            assert all(w is not None and w.status == "waiting" for w in found)
        else:
            for start in range(0, waits, PAGE):
                records = await counting.register(requests[start : start + PAGE], 2_000.0)
                assert all(r.status == "waiting" for r in records)
        seconds = time.perf_counter() - started
        phases[phase] = {
            "calls": counting.calls - before,
            "seconds": round(seconds, 3),
            "waits_per_s": round(waits / seconds) if seconds > 0 else None,
        }
    return phases


async def _one(url: str, waits: int) -> dict[str, Any]:
    store = open_store(url)
    await store.open()
    try:
        return await measure(store, waits)
    finally:
        await store.aclose()


def _postgres_reachable() -> bool:
    try:
        with psycopg.connect(DSN, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def run(waits: int = DEFAULT_WAITS, *, quiet: bool = False) -> dict[str, Any]:
    report: dict[str, Any] = {"waits": waits, "page": PAGE}
    with tempfile.TemporaryDirectory(prefix="trioplay-wait-register-") as folder:
        urls = {"memory": "memory://", "sqlite": f"sqlite:///{Path(folder) / 'w.db'}"}
        schema = f"register_{uuid.uuid4().hex[:12]}"
        if _postgres_reachable():
            urls["postgres"] = f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}"
        try:
            for kind, url in urls.items():
                report[kind] = trio.run(_one, url, waits)
        finally:
            if "postgres" in urls:
                with psycopg.connect(DSN, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    report["map"] = trio.run(measure_map, waits)
    if not quiet:
        engine = report["map"]
        print(
            f"wait_register map: {engine['suspended']:,} of {waits:,} rows suspended, "
            f"registered in {engine['register_calls']} store calls ({engine['seconds']}s)"
        )
        for kind in ("memory", "sqlite", "postgres"):
            if kind in report:
                line = ", ".join(
                    f"{phase} {p['calls']} calls {p['seconds']}s"
                    for phase, p in report[kind].items()
                )
                print(f"wait_register {kind}: {waits:,} waits, pages of {PAGE:,}: {line}")
    return report


class _CountingMemory(MemoryStore):
    """The memory store, counting ``register_waits`` calls (the engine's group registration)."""

    registrations = 0

    async def register_waits(self, requests: Any, *, now: float) -> Any:
        self.registrations += 1
        return await super().register_waits(requests, now=now)


async def measure_map(rows: int) -> dict[str, Any]:
    """A map of ``rows`` rows that all suspend on a wait: the store calls that registered them."""
    store = _CountingMemory()

    async def approve(row: Any, rc: trioplay.RowContext) -> Any:
        return await rc.wait_for_event("approval", key=row["id"], timeout=3600)

    @trioplay.play("suspend")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        data = [{"id": f"r{i}"} for i in range(rows)]
        sheet = ctx.dataset("leads", data).with_column("approved", approve)
        result = await sheet.run(key="id", on_waiting="return")
        return len(result.waiting)

    started = time.perf_counter()
    async with trioplay.open_runtime(store=store) as rt:
        try:
            await rt.run(play, {}, run_id="suspend")
        except trioplay.RunWaiting as waiting:
            suspended = len(waiting.waits)
    return {
        "rows": rows,
        "suspended": suspended,
        "register_calls": store.registrations,
        "seconds": round(time.perf_counter() - started, 3),
    }
