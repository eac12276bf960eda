"""Faults on real stores: what a run shows when its store stops answering.

PostgreSQL runs behind :class:`~tests.tcp_proxy.FaultyProxy` on 127.0.0.1,
which cuts, black-holes or delays the connection in the middle of a run.
For each fault the test checks the error the run fails with, how long it
took to get there, and that no row was reported committed that a fresh
connection does not find in the store.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.conninfo
import pytest
import trio

import trioplay
from trioplay.stores.postgres import PostgresStore

from .support import CountingTool, find_email, registry
from .tcp_proxy import FaultyProxy
from .test_postgres import DSN, _admin, _causes, drop_schema, new_schema_name, require_postgres

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROWS = 3000
FAULT_AT = 300  # rows committed when the fault starts

LIMITS = trioplay.Limits(
    writer_max_flush=0.02,
    progress_flush_interval=0.01,
    stall_log_interval=0.5,
    cleanup_timeout=0.5,
)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    require_postgres()
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schema(name)


@trioplay.play("faults")
async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
    rows = [{"domain": f"d{i}.example"} for i in range(ROWS)]
    return await ctx.dataset("s", rows).with_column("email", find_email).run(key="domain")


def _committed(schema: str) -> set[str]:
    """The keys of the rows the store holds as completed, read on a fresh connection."""
    rows = _admin(
        f'SELECT key FROM "{schema}".sheet_rows WHERE run_id = %s AND status = %s',
        ("r", "completed"),
    )
    return {key for (key,) in rows}


class Watch:
    """The run's events: rows reported committed, stall lines, and when the fault began."""

    def __init__(self) -> None:
        self.reported = 0
        self.stalls: list[dict[str, Any]] = []
        self.ready = trio.Event()
        self.fault_at = 0.0

    def on_event(self, event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            self.reported = max(self.reported, event.data["completed"])
            if self.reported >= FAULT_AT:
                self.ready.set()
        elif event.type == "map.stall":
            self.stalls.append(event.data)


async def _run_with_fault(
    store: PostgresStore, fault: Callable[[], None], watch: Watch
) -> BaseException | Any:
    """Run the play on ``store``; start ``fault`` once FAULT_AT rows have committed."""

    async def start_fault() -> None:
        await watch.ready.wait()
        fault()
        watch.fault_at = time.monotonic()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start_fault)
        try:
            async with trioplay.open_runtime(
                store=store,
                tools=registry(finder=CountingTool(delay=0.002)),
                limits=LIMITS,
                on_event=watch.on_event,
            ) as rt:
                result = await rt.run(play, {}, run_id="r")
        except trioplay.TrioplayError as exc:
            nursery.cancel_scope.cancel()
            return exc
        nursery.cancel_scope.cancel()
        return result


def _through(proxy: FaultyProxy, **params: str) -> str:
    return psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(proxy.port), **params)


def _proxy() -> FaultyProxy:
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    return FaultyProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))


# -- PostgreSQL: black-holed -----------------------------------------------------


@pytest.mark.postgres
@pytest.mark.deadline(30)
async def test_a_black_holed_postgres_fails_the_run_with_a_store_error(pg_schema: str) -> None:
    # libpq's own bounds, as short as they go: none of them notices a peer
    # whose kernel still acknowledges every byte.
    libpq = {
        "connect_timeout": "2",
        "keepalives_idle": "1",
        "keepalives_interval": "1",
        "keepalives_count": "1",
        "tcp_user_timeout": "1000",
        "options": "-c statement_timeout=1000",
    }
    proxy = _proxy()
    watch = Watch()
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        store = PostgresStore(_through(proxy, **libpq), schema=pg_schema)
        with trio.fail_after(15):
            outcome = await _run_with_fault(store, proxy.black_hole, watch)
        elapsed = time.monotonic() - watch.fault_at
        proxy.restore()
        nursery.cancel_scope.cancel()

    assert isinstance(outcome, trioplay.TrioplayError), outcome
    chain = [outcome, *_causes(outcome)]
    errors = [e for e in chain if isinstance(e, trioplay.StoreError)]
    assert errors, chain
    assert str(errors[0]).startswith(f"{store.url}: "), errors[0]
    assert "no answer" in str(errors[0]), errors[0]
    assert elapsed < 5.0
    committed = await trio.to_thread.run_sync(_committed, pg_schema)
    assert FAULT_AT <= watch.reported <= len(committed) < ROWS
