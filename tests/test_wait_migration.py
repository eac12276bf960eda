"""Schema version 2 (issue 22): a database made by version 1 migrates in place;
a wait's deadline survives a restart of the process unchanged.

The migration tests build a version-1 database from the statements kept in
``tests/schema_v1.py`` (what trioplay wrote before waits), fills it the way
a run did, opens it with today's store and checks that the run, its receipts
and its sheet read back unchanged, that runs gained their lineage columns,
and that waits and events work on the migrated database.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from trioplay import SendRequest, Store, WaitRequest
from trioplay.stores.postgres import PostgresStore
from trioplay.stores.sqlite import SCHEMA_VERSION, SqliteStore

from .schema_v1 import POSTGRES_V1, SQLITE_V1
from .test_postgres import DSN, drop_schema, new_schema_name, require_postgres

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.deadline(30)

RUN_V1 = ("run-1", "enrich", '{"n":1}', "waiting", 2, 10.0, 20.0, None, None, None)
RECEIPT_V1 = ("k1", "tool", "finder", "completed", "run-1", "l1", None, "w", 1, '{"v":1}', None)
ROW_V1 = ("run-1", "leads", "a", 0, "completed", '{"k":"a"}', None, 2)


async def check_migrated(store: Store) -> None:
    run = await store.get_run("run-1")
    assert run is not None
    assert (run.play, run.input_json, run.status, run.attempt, run.created_at) == (
        "enrich",
        '{"n":1}',
        "waiting",
        2,
        10.0,
    )
    # A run made before lineage is its own root, at depth 0, with no parent or play ref.
    assert (run.parent_run_id, run.root_run_id, run.depth, run.play_ref) == (
        None,
        "run-1",
        0,
        None,
    )
    [receipt] = await store.get_many(["k1"])
    assert receipt is not None
    assert (receipt.status, receipt.result_json) == ("completed", '{"v":1}')
    [row] = await store.read_rows("run-1", "leads")
    assert (row.key, row.data_json, row.attempt) == ("a", '{"k":"a"}', 2)
    # Waits and events work on the migrated database.
    request = WaitRequest("w1", "run-1", "leads", "a", "approval", '"a"', 100.0, "tok")
    [wait] = await store.register_waits([request], now=30.0)
    assert wait.status == "waiting"
    sent = SendRequest("run-1", "approval", '"a"', '{"ok":true}', "e1")
    assert (await store.send_event(sent, now=31.0)).wait_key == "w1"
    # The next attempt of the migrated run keeps its lineage and takes a play ref.
    again = await store.begin_attempt(
        "run-1", "enrich", '{"n":1}', now=40.0, play_ref="p.py:enrich"
    )
    assert (again.attempt, again.root_run_id, again.play_ref) == (3, "run-1", "p.py:enrich")


async def test_sqlite_migrates_a_version_1_database(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        for statement in SQLITE_V1[0]:
            conn.execute(statement)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        conn.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", RUN_V1)
        conn.execute(
            "INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1.0, 2.0, 2.0)",
            RECEIPT_V1,
        )
        conn.execute("INSERT INTO sheet_rows VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ROW_V1)
    conn.close()
    store = SqliteStore(path)
    await store.open()
    try:
        await check_migrated(store)
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()


@pytest.mark.postgres
async def test_postgres_migrates_a_version_1_schema() -> None:
    require_postgres()
    schema = new_schema_name()
    s = f'"{schema}"'
    try:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {s}")
            for statement in POSTGRES_V1[0]:
                conn.execute(statement.format(s=s))
            conn.execute(f"CREATE TABLE {s}.schema_version (version integer NOT NULL)")
            conn.execute(f"INSERT INTO {s}.schema_version VALUES (1)")
            run: Any = list(RUN_V1)
            run[2] = run[2].encode()
            conn.execute(
                f"INSERT INTO {s}.runs (run_id, play, input_json, status, attempt, created_at,"
                " updated_at, output_json, error, stats_json)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                run,
            )
            receipt: Any = list(RECEIPT_V1)
            receipt[9] = receipt[9].encode()
            conn.execute(
                f"INSERT INTO {s}.receipts VALUES"
                " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1.0, 2.0, 2.0)",
                receipt,
            )
            row: Any = list(ROW_V1)
            row[5] = row[5].encode()
            conn.execute(f"INSERT INTO {s}.sheet_rows VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", row)
        store = PostgresStore(DSN, schema=schema)
        await store.open()
        try:
            await check_migrated(store)
        finally:
            await store.aclose()
    finally:
        drop_schema(schema)


async def test_a_deadline_survives_a_restart_and_is_not_extended(tmp_path: Path) -> None:
    # Acceptance 4, the store's part: register with a 1 h timeout, the process
    # ends, a rerun 30 min later computes a new deadline: the stored one stays,
    # and at 61 min the wait times out.
    path = tmp_path / "restart.db"
    start = 1_000_000.0
    first = SqliteStore(path)
    await first.open()
    await first.begin_attempt("run-1", "enrich", "{}", now=start)
    request = WaitRequest("w1", "run-1", "leads", "a", "approval", '"a"', start + 3600, "tok")
    [registered] = await first.register_waits([request], now=start)
    await first.aclose()

    second = SqliteStore(path)
    await second.open()
    try:
        rerun = WaitRequest("w1", "run-1", "leads", "a", "approval", '"a"', start + 5400, "new")
        [again] = await second.register_waits([rerun], now=start + 1800)
        assert again == registered
        assert (again.deadline, again.token) == (start + 3600, "tok")
        [at_60] = await second.poll_waits(["w1"], now=start + 3600)
        assert at_60 is not None
        assert at_60.status == "waiting"
        [at_61] = await second.poll_waits(["w1"], now=start + 3660)
        assert at_61 is not None
        assert (at_61.status, at_61.settled_at) == ("timed_out", start + 3660)
    finally:
        await second.aclose()
