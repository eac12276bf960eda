"""The PostgreSQL store: its Trio bridge, lost connections, and a cut network.

The server is the one named by ``TRIOPLAY_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test works in a schema
of its own, dropped afterwards, so tests never see each other's runs. When
the server cannot be reached the tests are skipped with the reason, except
under ``CI=true``, where they fail: CI must never pass without PostgreSQL.

:func:`scratch_store` is also the postgres factory of the shared contract
suite (``tests/test_store_contract.py``).
"""

from __future__ import annotations

import functools
import os
import queue
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import attrs
import psycopg
import pytest
import trio

import trioplay
from trioplay import ClaimRequest, Completion, SheetRow, StoreError
from trioplay.stores import open_store
from trioplay.stores._pg_bridge import Abandoned, Job, _running, commit_point, transaction
from trioplay.stores.postgres import SCHEMA_VERSION, PostgresStore

from .support import CountingTool, find_email, registry
from .tcp_proxy import FaultyProxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

DSN = os.environ.get("TRIOPLAY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
NOW = 1_000.0
TTL = 60.0

pytestmark = [pytest.mark.postgres, pytest.mark.deadline(30)]


# -- the server, and a schema per test -------------------------------------------


@functools.cache
def _unreachable() -> str | None:
    """Why the test server cannot be used, or None if it can."""
    try:
        with psycopg.connect(DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split())
    return None


def require_postgres() -> None:
    """Skip (fail under ``CI=true``) when the test server is unreachable."""
    reason = _unreachable()
    if reason is None:
        return
    where = PostgresStore.from_url(DSN).url
    message = (
        f"PostgreSQL at {where} is unreachable ({reason}); start it or point"
        " TRIOPLAY_TEST_POSTGRES at one"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: PostgreSQL tests must run)", pytrace=False)
    pytest.skip(f"SKIPPED POSTGRES TESTS: {message}")


def _admin(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def drop_schema(schema: str) -> None:
    """Drop a test's schema, on the thread that drops them all (:data:`DROPPER`)."""
    DROPPER.drop(schema)


class SchemaDropper:
    """Drops the tests' scratch schemas on a thread of its own, so that no test waits for it.

    A schema's ``DROP SCHEMA ... CASCADE`` (its tables and their files) took
    about a quarter of a PostgreSQL contract test's time; here it overlaps
    the tests that follow. Every caller drops a schema its test is done
    with (its store closed), under a unique name, so nothing waits for the
    drop. :meth:`finish`, at the session's end (conftest), waits for the
    last drops and names any that failed, which fails the session.
    """

    ATTEMPTS = 3
    LOCK_TIMEOUT = "30s"  # a schema some connection still holds fails its drop, not hangs

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.failed: list[str] = []

    def drop(self, schema: str) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._drop_each, name="drop-test-schemas", daemon=True
                )
                self._thread.start()
        self._queue.put(schema)

    def _drop_each(self) -> None:
        while (schema := self._queue.get()) is not None:
            for attempt in range(1, self.ATTEMPTS + 1):
                try:
                    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
                        conn.execute(f"SET lock_timeout = '{self.LOCK_TIMEOUT}'")
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                    break
                except psycopg.Error as exc:
                    if attempt == self.ATTEMPTS:
                        self.failed.append(f"{schema}: {type(exc).__name__}: {exc}")
                    else:
                        time.sleep(1.0)

    def finish(self, timeout: float) -> list[str]:
        """Wait (up to ``timeout`` seconds) for the drops asked for; the ones that failed."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
            if thread.is_alive():
                self.failed.append(f"the drops were still going after {timeout:g} s")
        return self.failed


DROPPER = SchemaDropper()


def new_schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


def with_schema(url: str, schema: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **params}.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


class ScratchPostgresStore(PostgresStore):
    """A store in a fresh schema that it drops when closed."""

    def __init__(self, conninfo: str = DSN, **options: Any) -> None:
        super().__init__(conninfo, schema=new_schema_name(), **options)

    async def aclose(self) -> None:
        await super().aclose()
        drop_schema(self.schema)


def scratch_store(_tmp_path: Path | None = None) -> PostgresStore:
    """An unopened store in a schema of its own (the contract suite's factory)."""
    require_postgres()
    return ScratchPostgresStore()


@pytest.fixture
def schema() -> Iterator[str]:
    require_postgres()
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture
async def store() -> AsyncIterator[PostgresStore]:
    opened = scratch_store()
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


def req(key: str, **options: Any) -> ClaimRequest:
    return ClaimRequest(key=key, operation="tool", name="finder", run_id="run-1", **options)


def row(key: str, position: int) -> SheetRow:
    return SheetRow(key, position, "completed", f'{{"k":"{key}"}}')


# -- watching the server from another connection ---------------------------------


def _active(pattern: str, *, waiting_on_lock: bool = False) -> list[int]:
    """Pids of other backends running a statement whose text matches ``pattern``."""
    lock = " AND wait_event_type = 'Lock'" if waiting_on_lock else ""
    rows = _admin(
        "SELECT pid FROM pg_stat_activity WHERE state = 'active'"
        f" AND pid <> pg_backend_pid() AND query LIKE %s{lock}",
        (pattern,),
    )
    return [pid for (pid,) in rows]


async def until_active(pattern: str, *, waiting_on_lock: bool = False) -> list[int]:
    """Poll (bounded) until a backend runs a matching statement; its pids."""
    with trio.fail_after(10):
        while True:
            pids = await trio.to_thread.run_sync(
                functools.partial(_active, pattern, waiting_on_lock=waiting_on_lock)
            )
            if pids:
                return pids
            await trio.sleep(0.01)


async def eventually(check: Callable[[], object], *, timeout: float = 5.0) -> None:
    """Poll the blocking ``check`` (in a thread) until it is true; fail after ``timeout``."""
    with trio.fail_after(timeout):
        while True:
            if await trio.to_thread.run_sync(check):
                return
            await trio.sleep(0.01)


async def until_gone(pattern: str) -> None:
    """Poll (bounded) until no backend runs a matching statement."""
    await eventually(lambda: not _active(pattern))


class HeldLock:
    """Another session that holds a lock in an open transaction until released."""

    def __init__(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self._sql, self._params = sql, params
        self._conn: psycopg.Connection[Any] | None = None

    def _take(self) -> None:
        self._conn = psycopg.connect(DSN, connect_timeout=5)
        self._conn.execute(self._sql, self._params)

    def _release(self) -> None:
        if self._conn is not None:
            self._conn.rollback()
            self._conn.close()

    async def __aenter__(self) -> HeldLock:
        await trio.to_thread.run_sync(self._take)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._release)


async def cancel_when(call: Callable[[], Any], ready: Callable[[], Any]) -> trio.CancelScope:
    """Run ``call`` in a cancel scope, cancel it once ``ready()`` returns, wait for its return.

    A call that is not cancelled on the server returns only when it ends: the
    calls given here never end on their own, so a test that passes returned
    because of its cancel, whatever the load on the machine.
    """
    scope = trio.CancelScope()

    async def run() -> None:
        with scope:
            await call()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await ready()
        scope.cancel()
    return scope


# -- cancellation reaches the server -----------------------------------------------


async def test_cancelling_a_sleeping_query_cancels_it_on_the_server(store: PostgresStore) -> None:
    marker = f"sleep-{uuid.uuid4().hex}"

    def sleep(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SELECT pg_sleep(3600) /* {marker} */")

    # No public call sleeps on the server, so this test hands the store a job
    # of its own through the one private entry point every call goes through.
    scope = await cancel_when(
        lambda: store._call("sleep", sleep), lambda: until_active(f"%{marker}%")
    )
    assert scope.cancelled_caught
    # Gone on the server: not a connection abandoned with its query running.
    await until_gone(f"%{marker}%")
    assert await store.get_run("run-1") is None  # and the store goes on working


async def test_a_job_that_ends_despite_the_cancel_hands_back_its_result(
    store: PostgresStore,
) -> None:
    began, let_go = threading.Event(), threading.Event()

    def busy_off_the_server(_conn: psycopg.Connection[Any]) -> str:
        began.set()
        let_go.wait(20)  # nothing runs on the server, so there is nothing to cancel
        return "done"

    got: list[str] = []

    async def cancel_while_busy(scope: trio.CancelScope) -> None:
        await trio.to_thread.run_sync(began.wait, 20)
        scope.cancel()  # reaches the waiting call at once: the job has begun
        let_go.set()

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:
            nursery.start_soon(cancel_while_busy, scope)
            got.append(await store._call("busy", busy_off_the_server))
            await trio.lowlevel.checkpoint()  # the cancellation is delivered here
            got.append("never")
    assert scope.cancelled_caught
    assert got == ["done"]


@pytest.mark.parametrize("operation", ["claim_many", "write_terminal_rows"])
async def test_cancelling_a_lock_wait_cancels_it_on_the_server(
    store: PostgresStore, operation: str
) -> None:
    s = f'"{store.schema}"'
    [first] = await store.claim_many([req("k")], owner="w1", lease_ttl=TTL, now=NOW)
    if operation == "claim_many":
        lock = HeldLock(f"SELECT 1 FROM {s}.receipts WHERE key = 'k' FOR UPDATE")

        async def call() -> Any:
            return await store.claim_many([req("k")], owner="w2", lease_ttl=TTL, now=NOW + TTL)
    else:
        lock = HeldLock(f"LOCK TABLE {s}.sheet_rows IN ACCESS EXCLUSIVE MODE")

        async def call() -> Any:
            await store.write_terminal_rows("run-1", "leads", [row("a", 0), row("b", 1)])

    pattern = f"%{s}.%"
    async with lock:
        # The lock is held until the call returns: it returned by its cancel.
        scope = await cancel_when(call, lambda: until_active(pattern, waiting_on_lock=True))
        assert scope.cancelled_caught
        await until_gone(pattern)
    # The cancelled call happened not at all, and the store goes on working.
    assert await store.count_rows("run-1", "leads") == {}
    [stored] = await store.get_many(["k"])
    assert stored is not None
    assert (stored.owner, stored.attempts, stored.lease_id) == ("w1", 1, first.lease_id)  # type: ignore[union-attr]
    await store.write_terminal_rows("run-1", "leads", [row("a", 0)])
    assert await store.count_rows("run-1", "leads") == {"completed": 1}


async def test_a_call_waiting_for_a_connection_is_cancelled_at_once(schema: str) -> None:
    store = PostgresStore(DSN, schema=schema, pool_size=1)
    await store.open()
    try:
        s = f'"{schema}"'
        async with HeldLock(f"LOCK TABLE {s}.sheet_rows IN ACCESS EXCLUSIVE MODE"):
            async with trio.open_nursery() as nursery:
                blocked = trio.CancelScope()

                async def write() -> None:
                    with blocked:
                        await store.write_terminal_rows("run-1", "leads", [row("a", 0)])

                nursery.start_soon(write)
                await until_active(f"%{s}.%", waiting_on_lock=True)
                # The only connection is busy: this call queues for it.
                with trio.move_on_after(0.05) as queued:
                    await store.claim_many([req("k")], owner="w1", lease_ttl=TTL, now=NOW)
                assert queued.cancelled_caught
                blocked.cancel()
        assert await store.get_many(["k"]) == [None]
    finally:
        await store.aclose()


# -- lost connections -------------------------------------------------------------


async def test_a_terminated_backend_fails_the_call_clearly_and_the_next_call_reconnects(
    store: PostgresStore,
) -> None:
    s = f'"{store.schema}"'
    failure: list[BaseException] = []

    async def write() -> None:
        try:
            await store.write_terminal_rows("run-1", "leads", [row("a", 0)])
        except StoreError as exc:
            failure.append(exc)

    async with HeldLock(f"LOCK TABLE {s}.sheet_rows IN ACCESS EXCLUSIVE MODE"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            [pid] = await until_active(f"%{s}.%", waiting_on_lock=True)
            await trio.to_thread.run_sync(_admin, "SELECT pg_terminate_backend(%s)", (pid,))
    [error] = failure
    assert str(error).startswith(f"{store.url}: write_terminal_rows: connection lost: ")
    assert "terminating connection" in str(error)
    assert isinstance(error.__cause__, psycopg.OperationalError)
    # The write did not happen, and the next calls work on a new connection.
    assert await store.count_rows("run-1", "leads") == {}
    await store.write_terminal_rows("run-1", "leads", [row("a", 0)])
    assert await store.count_rows("run-1", "leads") == {"completed": 1}


async def test_idle_connections_the_server_dropped_are_replaced_without_an_error(
    store: PostgresStore,
) -> None:
    s = f'"{store.schema}"'
    async with trio.open_nursery() as nursery:
        for _ in range(4):  # one call per pooled connection, so that all four connect
            nursery.start_soon(store.count_rows, "run-1", "leads")
    pids = [
        pid
        for (pid,) in await trio.to_thread.run_sync(
            _admin,
            "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE %s",
            (f"%{s}.%",),
        )
    ]
    assert len(pids) == 4
    await trio.to_thread.run_sync(
        _admin, "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,)
    )
    await eventually(
        lambda: not _admin("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))
    )
    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(store.write_terminal_rows, "run-1", "leads", [row(f"k{i}", i)])
    assert await store.count_rows("run-1", "leads") == {"completed": 8}


async def test_an_unreachable_server_is_a_clear_error_without_the_password(schema: str) -> None:
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresStore.from_url(
        f"postgresql://alice:s3cret-pw@127.0.0.1:{port}/nowhere?schema={schema}"
    )
    assert store.url == f"postgresql://alice@127.0.0.1:{port}/nowhere?schema={schema}"
    with pytest.raises(StoreError) as raised:
        await store.open()
    message = str(raised.value)
    assert message.startswith(f"{store.url}: open: cannot connect: ")
    assert "s3cret-pw" not in message
    with pytest.raises(StoreError, match="not open"):
        await store.get_run("run-1")


# -- schema, URL, lifecycle ----------------------------------------------------------


async def test_the_schema_comes_from_the_url_and_data_survives_reopening(schema: str) -> None:
    url = with_schema(DSN, schema, pool_size="2")
    first = open_store(url)
    assert isinstance(first, PostgresStore)
    assert first.schema == schema
    await first.open()
    try:
        await first.begin_attempt("run-1", "p", "{}", now=NOW)
        [claimed] = await first.claim_many([req("k")], owner="w1", lease_ttl=TTL, now=NOW)
        assert await first.complete_many([Completion("k", claimed.lease_id, "1")], now=NOW)  # type: ignore[union-attr]
        await first.write_terminal_rows("run-1", "leads", [row("a", 0)])
    finally:
        await first.aclose()
    tables = await trio.to_thread.run_sync(
        _admin, "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
    )
    assert [t for (t,) in tables] == [
        "events",
        "pages",
        "receipts",
        "runs",
        "schema_version",
        "sheet_rows",
        "waits",
    ]

    second = PostgresStore.from_url(url)
    await second.open()
    try:
        assert await second.get_run("run-1") is not None
        [found] = await second.get_many(["k"])
        assert found is not None
        assert found.result_json == "1"
        assert await second.read_rows("run-1", "leads") == [row("a", 0)]
    finally:
        await second.aclose()


async def test_stores_opening_one_new_schema_together_migrate_it_once(schema: str) -> None:
    stores = [PostgresStore(DSN, schema=schema) for _ in range(4)]
    try:
        async with trio.open_nursery() as nursery:
            for store in stores:
                nursery.start_soon(store.open)
        versions = await trio.to_thread.run_sync(
            _admin, f'SELECT version FROM "{schema}".schema_version'
        )
        assert versions == [(SCHEMA_VERSION,)]
        [claimed] = await stores[0].claim_many([req("k")], owner="w1", lease_ttl=TTL, now=NOW)
        [held] = await stores[1].claim_many([req("k")], owner="w2", lease_ttl=TTL, now=NOW)
        assert isinstance(held, trioplay.Held)
        assert held.receipt.lease_id == claimed.lease_id  # type: ignore[union-attr]
    finally:
        for store in stores:
            await store.aclose()


async def test_a_newer_schema_is_refused(schema: str) -> None:
    store = PostgresStore(DSN, schema=schema)
    await store.open()
    await store.aclose()
    await trio.to_thread.run_sync(
        _admin, f'UPDATE "{schema}".schema_version SET version = %s', (SCHEMA_VERSION + 1,)
    )
    with pytest.raises(
        StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than {SCHEMA_VERSION}"
    ) as raised:
        await store.open()
    assert str(raised.value).startswith(f"{store.url}: open: ")
    with pytest.raises(StoreError, match="not open"):
        await store.get_run("run-1")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://alice:pw@db.example:6543/prod?schema=s1&pool_size=2&sslmode=require",
            "postgresql://alice@db.example:6543/prod?schema=s1",
        ),
        ("postgres://db.example/prod", "postgresql://db.example/prod"),
        (
            "postgresql:///prod?host=/var/run/postgresql",
            "postgresql://%2Fvar%2Frun%2Fpostgresql/prod",
        ),
    ],
)
def test_url_never_shows_the_password(url: str, shown: str) -> None:
    assert PostgresStore.from_url(url).url == shown


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sqlite:///x.db", "PostgreSQL store URL"),
        ("postgresql://h/db?schema=bad-name", "schema name"),
        ("postgresql://h/db?pool_size=zero", "pool_size"),
        ("postgresql://h/db?pool_size=0", "pool_size"),
        ("postgresql://h/db?call_timeout=soon", "bad call_timeout 'soon'"),
        ("postgresql://h/db?call_timeout=0", "call_timeout must be finite seconds above 0"),
        ("postgresql://h/db?cancel_timeout=nan", "cancel_timeout must be finite seconds"),
        ("postgresql://h/db?statement_timeout=-1", "statement_timeout must be finite seconds"),
    ],
)
def test_bad_urls_are_refused(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PostgresStore.from_url(url)


# -- deadlines ---------------------------------------------------------------------


def _sleep_on_the_server(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_sleep(3600)")  # only the statement timeout ends it


@pytest.mark.parametrize("where", ["keyword", "connection string"])
async def test_statement_timeout_ends_a_long_statement_on_the_server(
    schema: str, where: str
) -> None:
    if where == "keyword":
        store = PostgresStore(DSN, schema=schema, statement_timeout=0.2)
    else:
        conninfo = psycopg.conninfo.make_conninfo(DSN, options="-c statement_timeout=200")
        store = PostgresStore(conninfo, schema=schema)
    await store.open()
    try:
        with pytest.raises(StoreError, match="statement timeout") as raised:
            await store._call("sleep", _sleep_on_the_server)
        assert str(raised.value).startswith(f"{store.url}: sleep: ")
        assert await store.get_run("run-1") is None  # the connection goes on working
    finally:
        await store.aclose()


async def test_call_timeout_from_the_url_abandons_a_call_that_does_not_answer(
    schema: str,
) -> None:
    # The schema is created first, with the default call_timeout: the short
    # one below bounds the slow job, not the migration (which, on a busy
    # machine, took longer than 0.3 s once schema version 2 came).
    migrated = open_store(with_schema(DSN, schema))
    await migrated.open()
    await migrated.aclose()
    store = open_store(with_schema(DSN, schema, call_timeout="0.3"))
    assert isinstance(store, PostgresStore)
    await store.open()

    # The job answers only once its caller has given up (the test lets it go
    # after the StoreError): a call that waited for it would never return.
    let_go, ended = threading.Event(), threading.Event()

    def slow(conn: psycopg.Connection[Any]) -> None:
        try:
            with transaction(conn):
                conn.execute(f'CREATE TABLE "{schema}".never (k text)')
                let_go.wait(20)  # past the deadline, before the commit: it must not commit
        finally:
            ended.set()

    try:
        try:
            with pytest.raises(StoreError) as raised:
                await store._call("slow", slow)
        finally:
            let_go.set()
        error = raised.value
        assert str(error).startswith(
            f"{store.url}: slow: no answer from the database within 0.3s (call_timeout),"
            " the connection was discarded (after 0.3"
        ), error
        assert (error.store, error.operation, error.outcome_unknown) == (store.url, "slow", False)
        assert error.elapsed is not None
        assert error.elapsed >= 0.3  # never before the deadline
        assert await store.get_run("run-1") is None  # a new connection serves the next call
        # The abandoned job reached its commit after its caller gave up: it rolled back.
        assert await trio.to_thread.run_sync(ended.wait, 20)
        assert _admin(f"SELECT to_regclass('\"{schema}\".never')") == [(None,)]
    finally:
        await store.aclose()


async def test_a_job_its_caller_gave_up_on_never_commits() -> None:
    job = Job(lambda conn: None, trio.lowlevel.current_trio_token())
    _running.job = job
    try:
        commit_point()
        assert job.commit == "sent"  # marked before its COMMIT is sent
        job.commit = None
        assert job.give_up() is None
        with pytest.raises(Abandoned):
            commit_point()  # too late: its COMMIT is never sent
        assert job.commit is None
    finally:
        _running.job = None


async def test_calls_before_open_and_after_close_fail(schema: str) -> None:
    store = PostgresStore(DSN, schema=schema)
    with pytest.raises(StoreError, match="not open"):
        await store.get_run("run-1")
    await store.open()
    with pytest.raises(StoreError, match="already open"):
        await store.open()
    await store.aclose()
    with pytest.raises(StoreError, match=r": list_runs: the store is not open"):
        await store.list_runs()


async def test_aclose_stops_every_thread_and_connection(schema: str) -> None:
    def workers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("trioplay-postgres")]

    before = len(workers())
    store = PostgresStore(DSN, schema=schema, pool_size=3)
    await store.open()
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(store.count_rows, "run-1", "leads")
    assert len(workers()) == before + 3
    await store.aclose()
    assert len(workers()) == before
    await eventually(
        lambda: (
            not _admin(
                "SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE %s",
                (f'%"{schema}".%',),
            )
        )
    )


# -- a network cut in the middle of a run ----------------------------------------------

ROWS = 3000


def _sheet_keys(schema: str) -> list[str]:
    rows = _admin(
        f'SELECT key FROM "{schema}".sheet_rows WHERE run_id = %s AND status = %s',
        ("r", "completed"),
    )
    return [key for (key,) in rows]


@pytest.mark.deadline(60)
async def test_a_cut_connection_fails_the_run_and_a_rerun_completes_it(schema: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    proxy = FaultyProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    tool = CountingTool(delay=0.005)
    reported: list[int] = []
    enough = trio.Event()

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            reported.append(event.data["completed"])
            if event.data["completed"] >= 500:
                enough.set()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"domain": f"d{i}.example"} for i in range(ROWS)]
        return await ctx.dataset("s", rows).with_column("email", find_email).run(key="domain")

    # Short leases for the cut attempt: it cannot release its own, so the
    # rerun waits for them to expire. The rerun's own leases are the default:
    # a 1 s lease can lapse on a loaded machine before its first heartbeat,
    # and a lapsed lease fails its row with LeaseLost.
    limits = trioplay.Limits(
        writer_max_flush=0.02,
        progress_flush_interval=0.01,
        lease_ttl=1.0,
        receipt_wait_delay=0.05,
        cleanup_timeout=0.5,
        store_retry=0,  # the cut lasts: no retry (riding one out is test_postgres_faults.py's)
    )
    rerun_limits = attrs.evolve(limits, lease_ttl=trioplay.Limits().lease_ttl)

    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        through_proxy = psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(proxy.port))
        store = PostgresStore(through_proxy, schema=schema)

        async def cut_mid_run() -> None:
            await enough.wait()
            proxy.cut()

        nursery.start_soon(cut_mid_run)
        with trio.fail_after(20), pytest.raises(trioplay.TrioplayError) as raised:
            async with trioplay.open_runtime(
                store=store, tools=registry(finder=tool), limits=limits, on_event=on_event
            ) as rt:
                await rt.run(play, {}, run_id="r")
        # The run fails with an error that names the store and what happened.
        chain = [raised.value, *_causes(raised.value)]
        assert any(
            str(e).startswith(f"{store.url}: ")
            and ("connection lost" in str(e) or "cannot connect" in str(e))
            for e in chain
        ), chain

        # No row was reported committed that is not in the database.
        in_database = len(await trio.to_thread.run_sync(_sheet_keys, schema))
        assert 500 <= max(reported) <= in_database < ROWS

        proxy.restore()
        async with trioplay.open_runtime(
            store=PostgresStore(through_proxy, schema=schema),
            tools=registry(finder=tool),
            limits=rerun_limits,
        ) as rt:
            with trio.fail_after(30):
                result = await rt.run(play, {}, run_id="r")
            run = await rt.store.get_run("r")
        nursery.cancel_scope.cancel()

    assert result.completed_count + result.skipped_count == ROWS
    assert result.skipped_count >= max(reported)
    assert run is not None
    assert (run.status, run.attempt) == ("completed", 2)
    keys = await trio.to_thread.run_sync(_sheet_keys, schema)
    assert sorted(keys) == sorted(f"d{i}.example" for i in range(ROWS))


def _causes(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while (error := error.__cause__ or error.__context__) is not None and error not in seen:  # type: ignore[assignment]
        seen.append(error)
    return seen


async def test_a_dead_network_bounds_a_cancelled_call_by_cancel_timeout(schema: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    proxy = FaultyProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        through_proxy = psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(proxy.port))
        store = PostgresStore(through_proxy, schema=schema, pool_size=1, cancel_timeout=0.3)
        await store.open()
        try:
            proxy.black_hole()
            # The query never reaches the server, and neither can a cancel
            # request: the caller gets its cancellation once cancel_timeout
            # has passed (without it, never: the test's deadline would fail
            # it), and the stuck connection is abandoned.
            started = time.monotonic()
            with trio.move_on_after(0.2) as scope:
                await store.get_run("run-1")
            took = time.monotonic() - started
            assert scope.cancelled_caught
            assert took >= 0.2 + 0.3 - 0.05  # it did wait for the cancel's confirmation
            proxy.restore()
            assert await store.get_run("run-1") is None  # on a fresh connection
        finally:
            await store.aclose()
        nursery.cancel_scope.cancel()


async def test_claimed_receipts_read_back_exactly_what_the_claim_decided(
    store: PostgresStore,
) -> None:
    # Claims travel as one jsonb parameter (_pg_sql._json_rows): times keep
    # every bit of their float, text its every character, for new keys (one
    # INSERT) and for keys taken over from an expired lease (the upsert).
    now = 1764600000.1234567
    keys = ["ключ-😀", 'k"\\\t2']
    requests = [ClaimRequest(key, "tool", "naïve ✓", "run-é") for key in keys]
    for owner, at, ttl in (("o-ü", now, 0.3), ("o-2", now + 1 / 3, 30.1)):
        claims = await store.claim_many(requests, owner=owner, lease_ttl=ttl, now=at)
        receipts = await store.get_many(keys)
        for key, claim, receipt in zip(keys, claims, receipts, strict=True):
            assert isinstance(claim, trioplay.Claimed)
            assert receipt is not None
            assert (receipt.key, receipt.name, receipt.run_id) == (key, "naïve ✓", "run-é")
            assert (receipt.owner, receipt.lease_id) == (owner, claim.lease_id)
            assert receipt.lease_expires_at == claim.lease_expires_at == at + ttl
            assert receipt.updated_at == at
            assert (receipt.result_json, receipt.error_json) == (None, None)


async def test_receipts_leave_room_on_their_pages_for_their_completion(
    store: PostgresStore,
) -> None:
    # fillfactor 50: a completion is a HOT update on the claim's page.
    def reloptions(conn: Any) -> Any:
        found = conn.execute(
            "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = 'receipts'",
            (store.schema,),
        ).fetchone()
        return found[0] if found is not None else None

    assert await store._call("reloptions", reloptions) == ["fillfactor=50"]
