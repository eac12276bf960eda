"""Registration against sending, two processes on PostgreSQL (issue 22, acceptance 6).

``python -m benchmarks wait_race [--rows SLOTS]`` (default 5,000 slots): one
process registers a wait in each ``(run, name, key)`` slot while another
sends that slot's event, in lockstep (a barrier per slot), with the
interleaving that loses an event forced: the registrar, having read the
slot's buffered events (none yet), waits until the sender is about to take
its lock and then a few milliseconds more before it writes, so a sender not
held back by the lock reads the slot (no waiting wait yet) and buffers its
event in that gap. The slot lock (``pg_advisory_xact_lock`` on the slot's
hash, ``stores/_pg_jobs.py``) makes the sender wait for the registrar
instead. The report counts, over all slots: events consumed exactly once,
events left buffered beside a waiting wait of their slot (lost), waits
settled by no event or by an event not naming them (double). Passing: every
event consumed once, none lost, none double. ``tests/test_wait_race.py``
runs a short form. It needs the server of ``TRIOPLAY_TEST_POSTGRES``.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import psycopg
import trio

from trioplay import SendRequest, WaitRequest
from trioplay.stores.postgres import PostgresStore

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier, Event

DSN = os.environ.get("TRIOPLAY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DEFAULT_SLOTS = 5_000
RUN = "race"
PAUSE = 0.005
"""Seconds the registrar holds its write back once the sender is on its way."""
STEP_TIMEOUT = 10.0


def _registrar(schema: str, slots: int, barrier: Barrier, arrived: Event) -> None:
    from trioplay.stores import _pg_jobs

    def hook(point: str) -> None:
        if point == "register:read":
            arrived.wait(1.0)  # the sender is about to lock (or blocked on our lock)
            time.sleep(PAUSE)

    _pg_jobs.race_hook = hook

    async def main() -> None:
        store = PostgresStore(DSN, schema=schema)
        await store.open()
        try:
            for slot in range(slots):
                barrier.wait(STEP_TIMEOUT)
                request = WaitRequest(
                    f"w{slot}", RUN, "ds", f"r{slot}", "approval", str(slot), 1e12, f"t{slot}"
                )
                await store.register_waits([request], now=1_000.0)
                barrier.wait(STEP_TIMEOUT)
                arrived.clear()
        finally:
            await store.aclose()

    trio.run(main)


def _sender(schema: str, slots: int, barrier: Barrier, arrived: Event) -> None:
    from trioplay.stores import _pg_jobs

    def hook(point: str) -> None:
        if point == "send:lock":
            arrived.set()

    _pg_jobs.race_hook = hook

    async def main() -> None:
        store = PostgresStore(DSN, schema=schema)
        await store.open()
        try:
            for slot in range(slots):
                barrier.wait(STEP_TIMEOUT)
                request = SendRequest(RUN, "approval", str(slot), f'{{"slot":{slot}}}', f"e{slot}")
                await store.send_event(request, now=1_000.0)
                barrier.wait(STEP_TIMEOUT)
        finally:
            await store.aclose()

    trio.run(main)


async def _prepare(schema: str) -> None:
    store = PostgresStore(DSN, schema=schema)
    await store.open()
    try:
        await store.begin_attempt(RUN, "race", "{}", now=1_000.0)
    finally:
        await store.aclose()


async def _tally(schema: str) -> dict[str, Any]:
    store = PostgresStore(DSN, schema=schema)
    await store.open()
    try:
        waits = await store.list_waits(RUN)
        events = await store.list_events(RUN)
    finally:
        await store.aclose()
    by_event = {e.event_id: e for e in events}
    open_slots = {w.key_json for w in waits if w.status == "waiting"}
    lost = sum(1 for e in events if e.consumed_by is None and e.key_json in open_slots)
    consumed = sum(1 for e in events if e.consumed_by is not None)
    double = 0
    for wait in waits:
        if wait.status != "delivered":
            continue
        event = by_event.get(wait.event_id or "")
        if event is None or event.consumed_by != wait.wait_key:
            double += 1
    return {
        "slots": len(waits),
        "events": len(events),
        "consumed": consumed,
        "lost": lost,
        "double": double,
        "waiting": sum(1 for w in waits if w.status == "waiting"),
    }


def run(slots: int = DEFAULT_SLOTS, *, quiet: bool = False) -> dict[str, Any]:
    """Race ``slots`` registrations against their events; the tally, with ``seconds``."""
    schema = f"race_{uuid.uuid4().hex[:12]}"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    arrived = context.Event()
    try:
        trio.run(_prepare, schema)
        started = time.perf_counter()
        workers = [
            context.Process(target=target, args=(schema, slots, barrier, arrived))
            for target in (_registrar, _sender)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(STEP_TIMEOUT + slots)
        seconds = time.perf_counter() - started
        codes = [worker.exitcode for worker in workers]
        if codes != [0, 0]:
            raise RuntimeError(f"a racer failed: exit codes {codes}")
        report = trio.run(_tally, schema) | {"seconds": round(seconds, 2)}
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if not quiet:
        print(
            f"wait_race: {report['slots']} slots in {report['seconds']}s: "
            f"{report['consumed']} events consumed once, {report['lost']} lost "
            f"(buffered beside a waiting wait), {report['double']} double"
        )
    return report
