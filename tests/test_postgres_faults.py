"""Issue 24, point 2, on a real PostgreSQL server: blips are ridden out, and said right.

The short form of ``python -m benchmarks pgfaults`` (one trial of each fault,
600 rows): backends terminated, connections cut and refused for a while as
a restart does (through a TCP proxy on 127.0.0.1, never restarting the
shared server), and an outage longer than ``store_retry``. Then what the
store says: a job that finished on its worker is never a timeout, even when
the event loop was blocked past its deadline; a connection that was made is
never said to have failed to connect.
"""

from __future__ import annotations

import time

import psycopg
import psycopg.conninfo
import pytest
import trio

import trioplay
from benchmarks import pgfaults
from trioplay.stores.postgres import PostgresStore

from .test_postgres import DSN, drop_schema, new_schema_name, require_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.deadline(120)]

ROWS = 600


@pytest.mark.parametrize(
    "fault",
    [
        pgfaults.Fault("kill", "kill", 0.0, 30.0, "completed"),
        pgfaults.Fault("restart-2s", "cut", 2.0, 30.0, "completed"),
        pgfaults.Fault("past-budget", "cut", 4.0, 1.0, "failed"),
    ],
    ids=lambda fault: fault.name,
)
async def test_a_postgresql_fault_is_ridden_out_within_the_budget(
    fault: pgfaults.Fault,
) -> None:
    require_postgres()
    result = await pgfaults.trial(fault, rows=ROWS)
    assert result.expected, result
    assert result.lost == 0, result
    assert result.paid_twice <= pgfaults.IN_FLIGHT, result
    if fault.expect == "completed":
        assert result.stored == ROWS, result
    else:
        assert result.error is not None
        assert "(store_retry=1s) and the store did not come back" in result.error


@pytest.fixture
def schema() -> object:
    require_postgres()
    name = new_schema_name()
    yield name
    drop_schema(name)


async def test_a_job_that_finished_during_a_loop_stall_is_not_a_timeout(schema: str) -> None:
    store = PostgresStore.from_url(f"{DSN}?schema={schema}&call_timeout=0.5")
    await store.open()
    try:
        results: list[object] = []

        async def read() -> None:
            results.append(await store.list_runs())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.sleep(0.05)  # the read is on its worker, done in a few ms
            time.sleep(1.0)  # noqa: ASYNC251 - a resolver blocking the loop past the deadline
        assert results == [[]]
    finally:
        await store.aclose()


async def test_a_connection_made_is_not_said_to_have_failed_to_connect(schema: str) -> None:
    # Read-only sessions: the connection opens, its first statement fails.
    conninfo = psycopg.conninfo.make_conninfo(DSN, options="-c default_transaction_read_only=on")
    store = PostgresStore(conninfo, schema=schema)
    with pytest.raises(trioplay.StoreError) as caught:
        await store.open()
    message = str(caught.value)
    assert "cannot connect" not in message
    assert ": open: connected, but setting the connection up failed: cannot execute" in message
