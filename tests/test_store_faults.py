"""Faults on real stores: what a run shows when its store stops answering.

PostgreSQL runs behind :class:`~tests.tcp_proxy.FaultyProxy` on 127.0.0.1,
which cuts, black-holes or delays the connection once the run has committed
``FAULT_AT`` rows. SQLite runs out of disk (a file-size limit in a
subprocess, see :mod:`tests.full_disk_run`) or finds its write lock held by
another process. For each fault the test checks the error the run fails
with, how long it took to get there, and that no row was reported committed
that a fresh connection does not find in the store. ``docs/durability.md``
("When the store stops answering") records the same table.

What the tests assert of time is what a busy machine cannot break: a
deadline was not cut short (lower bounds), and a run did not wait for a
timeout far longer than the test's own bound (``trio.fail_after``), which
fails a hang. The seconds each fault took are printed (``pytest -s``), not
asserted; that a cancel's cleanups share one ``cleanup_timeout`` is checked
on virtual time in ``tests/test_cancellation.py``.

Deadlines are short here (``call_timeout=1.5``, ``lock_timeout=0.5``,
``cleanup_timeout=0.5``) so the file stays well under a minute; the
defaults are 60 s, 5 s and 1 s.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg
import psycopg.conninfo
import pytest
import trio

import trioplay
from trioplay.stores import open_store
from trioplay.stores._pg_bridge import transaction
from trioplay.stores.postgres import PostgresStore
from trioplay.stores.sqlite import SqliteStore

from .support import CountingTool, find_email, registry
from .tcp_proxy import FaultyProxy
from .test_postgres import DSN, _admin, _causes, drop_schema, new_schema_name, require_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

ROWS = 3000
FAULT_AT = 300  # rows committed when the fault starts
CLEANUP = 0.5
CALL_TIMEOUT = 1.5
LOCK_TIMEOUT = 0.5

LIMITS = trioplay.Limits(
    writer_max_flush=0.02,
    progress_flush_interval=0.01,
    stall_log_interval=0.5,
    cleanup_timeout=CLEANUP,
    store_retry=0,  # each fault here lasts: what it shows, not how it is ridden out
)
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def pg_schema() -> Iterator[str]:
    require_postgres()
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schema(name)


def _play(rows: int) -> trioplay.Play:
    @trioplay.play("faults")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        source = [{"domain": f"d{i}.example"} for i in range(rows)]
        return await ctx.dataset("s", source).with_column("email", find_email).run(key="domain")

    return play


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


async def run_with_fault(
    store: trioplay.Store,
    fault: Callable[[], Awaitable[None]],
    watch: Watch,
    *,
    rows: int = ROWS,
    cancel_after: float | None = None,
) -> tuple[BaseException | Any, float]:
    """Run the play on ``store``; start ``fault`` once FAULT_AT rows have committed.

    Returns what the run returned or raised (``Cancelled`` when
    ``cancel_after`` seconds into the fault it was cancelled), and the
    seconds from the fault (or the cancel) until then.
    """
    outcome: BaseException | Any = None
    cancelled_at: float | None = None
    with trio.CancelScope() as run_scope:

        async def start_fault() -> None:
            nonlocal cancelled_at
            await watch.ready.wait()
            await fault()
            watch.fault_at = time.monotonic()
            if cancel_after is not None:
                await trio.sleep(cancel_after)
                cancelled_at = time.monotonic()
                run_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start_fault)
            try:
                async with trioplay.open_runtime(
                    store=store,
                    tools=registry(finder=CountingTool(delay=0.002)),
                    limits=LIMITS,
                    on_event=watch.on_event,
                ) as rt:
                    outcome = await rt.run(_play(rows), {}, run_id="r")
            except (trioplay.TrioplayError, trio.Cancelled) as exc:
                outcome = exc
                if isinstance(exc, trio.Cancelled) and cancelled_at is None:
                    raise
            nursery.cancel_scope.cancel()
    ended = time.monotonic()
    return outcome, ended - (cancelled_at if cancelled_at is not None else watch.fault_at)


def record(fault: str, shown: object, elapsed: float, reported: int | None, stored: int) -> None:
    """One row of docs/durability.md's table, printed (``pytest -s`` shows it)."""
    counts = f"reported {reported}, stored {stored}" if reported is not None else f"stored {stored}"
    print(f"\n| {fault} | {shown} | {elapsed:.2f} s | {counts} |")


async def check_stored(
    fault: str, shown: object, elapsed: float, reported: int, read: Callable[[], set[str]]
) -> None:
    """No row was reported committed that a fresh connection (``read``) does not find."""
    committed = await trio.to_thread.run_sync(read)
    record(fault, shown, elapsed, reported, len(committed))
    assert FAULT_AT <= reported <= len(committed) < ROWS


def store_error(outcome: object) -> trioplay.StoreError:
    """The store's own StoreError the run failed with (itself, or the cause of a latch).

    The deepest one: a ``ReceiptNotRecorded`` (a completion that could not be
    written) is a StoreError too, and carries the store's error as its cause.
    """
    assert isinstance(outcome, trioplay.TrioplayError), outcome
    errors = [e for e in (outcome, *_causes(outcome)) if isinstance(e, trioplay.StoreError)]
    assert errors, repr(outcome)
    return errors[-1]


# -- PostgreSQL behind the proxy -------------------------------------------------


@pytest.fixture
async def proxy(pg_schema: str, nursery: trio.Nursery) -> AsyncIterator[FaultyProxy]:
    """A FaultyProxy in front of the test server, serving until the test ends."""
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    proxy = FaultyProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    await nursery.start(proxy.serve)
    yield proxy
    proxy.restore()  # let the test's own cleanup through


def _through(proxy: FaultyProxy, **params: str) -> str:
    """The test server's connection string, through ``proxy``."""
    params.setdefault("connect_timeout", "2")
    return psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(proxy.port), **params)


def pg_committed(schema: str) -> set[str]:
    """The keys of the rows PostgreSQL holds as completed, read on a fresh connection."""
    rows = _admin(
        f'SELECT key FROM "{schema}".sheet_rows WHERE run_id = %s AND status = %s',
        ("r", "completed"),
    )
    return {key for (key,) in rows}


def _worker_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("trioplay-postgres")}


def _as_fault(action: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def fault() -> None:
        action()
        await trio.lowlevel.checkpoint()

    return fault


@pytest.mark.postgres
@pytest.mark.deadline(30)
async def test_a_cut_postgres_fails_the_run_with_a_store_error_at_once(
    pg_schema: str, proxy: FaultyProxy
) -> None:
    watch = Watch()
    store = PostgresStore(_through(proxy), schema=pg_schema, call_timeout=CALL_TIMEOUT)
    with trio.fail_after(15):
        outcome, elapsed = await run_with_fault(store, _as_fault(proxy.cut), watch)

    error = store_error(outcome)
    assert str(error).startswith(f"{store.url}: "), error
    assert "connection lost" in str(error) or "cannot connect" in str(error), error
    assert error.operation is not None
    assert error.elapsed is not None
    await check_stored(
        "PostgreSQL cut", error, elapsed, watch.reported, partial(pg_committed, pg_schema)
    )


@pytest.mark.postgres
@pytest.mark.deadline(30)
async def test_a_black_holed_postgres_fails_the_run_with_a_store_error(
    pg_schema: str, proxy: FaultyProxy
) -> None:
    # libpq's own bounds, as short as they go, do not notice a peer whose
    # kernel still acknowledges every byte: only call_timeout does.
    libpq = {
        "keepalives_idle": "1",
        "keepalives_interval": "1",
        "keepalives_count": "1",
        "tcp_user_timeout": "1000",
    }
    watch = Watch()
    threads = _worker_threads()
    store = PostgresStore(
        _through(proxy, **libpq), schema=pg_schema, call_timeout=CALL_TIMEOUT, statement_timeout=1
    )
    with trio.fail_after(15):
        outcome, elapsed = await run_with_fault(store, _as_fault(proxy.black_hole), watch)
    # Every connection of the store is discarded: severed sockets end their
    # threads, and those still connecting end at connect_timeout.
    with trio.fail_after(5):
        while True:
            if not _worker_threads() - threads:
                break
            await trio.sleep(0.05)

    error = store_error(outcome)
    assert str(error).startswith(f"{store.url}: "), error
    assert "no answer from the database within 1.5s (call_timeout)" in str(error), error
    assert error.store == store.url
    assert error.operation is not None
    assert error.elapsed is not None
    assert error.elapsed >= CALL_TIMEOUT
    # While it waited, the stall line named the store.
    store_lines = [stall for stall in watch.stalls if stall["oldest_phase"] == "store"]
    assert store_lines, watch.stalls
    assert store_lines[0]["store_active"] >= 1
    assert store_lines[0]["oldest_store_operation"] is not None
    await check_stored(
        "PostgreSQL black-holed", error, elapsed, watch.reported, partial(pg_committed, pg_schema)
    )


@pytest.mark.postgres
@pytest.mark.deadline(30)
@pytest.mark.parametrize("pool_size", [4, 8])
async def test_cancelling_a_run_on_a_black_holed_postgres_returns_within_cleanup_timeout(
    pg_schema: str, proxy: FaultyProxy, pool_size: int
) -> None:
    # With 8 connections, some are idle and open when the run is cancelled:
    # the writer's last flush, which begins once its cancelled write gave up
    # (cancel_timeout), runs on one and, at its deadline, waits cancel_timeout
    # for its own cancel. When each cleanup counted its own cleanup_timeout,
    # that came to 0.25 + 0.5 + 0.25 s (seen failing 4 times in 8 at 1.04 to
    # 1.10 s); with 4, the flush mostly found a connection still to be opened,
    # dropped at once.
    watch = Watch()
    # A long call deadline: the cancel comes first, and the run returns
    # within the test's bound, long before a call could time out.
    store = PostgresStore(_through(proxy), schema=pg_schema, call_timeout=30, pool_size=pool_size)
    with trio.fail_after(15):
        outcome, elapsed = await run_with_fault(
            store, _as_fault(proxy.black_hole), watch, cancel_after=0.3
        )

    assert isinstance(outcome, trio.Cancelled), outcome
    proxy.restore()
    await check_stored(
        f"PostgreSQL black-holed, cancel ({pool_size} connections)",
        "Cancelled",
        elapsed,
        watch.reported,
        partial(pg_committed, pg_schema),
    )


@pytest.mark.postgres
@pytest.mark.deadline(20)
@pytest.mark.parametrize("fault", ["black_hole", "cut"])
@pytest.mark.parametrize("when", ["before its commit", "at its commit"])
async def test_a_write_whose_commit_got_no_answer_says_its_outcome_is_unknown(
    pg_schema: str, proxy: FaultyProxy, fault: str, when: str
) -> None:
    store = PostgresStore(_through(proxy), schema=pg_schema, call_timeout=CALL_TIMEOUT)
    await store.open()
    token = trio.lowlevel.current_trio_token()

    def strike() -> None:
        trio.from_thread.run_sync(getattr(proxy, fault), trio_token=token)

    def write(conn: psycopg.Connection[Any]) -> None:
        with transaction(conn):
            if when == "before its commit":
                strike()
            conn.execute(f'CREATE TABLE "{pg_schema}".maybe (k text)')
            if when == "at its commit":
                strike()

    try:
        with pytest.raises(trioplay.StoreError) as raised:
            await store._call("write", write)
    finally:
        proxy.restore()
        await store.aclose()

    error = raised.value
    unknown = "the COMMIT was sent but never confirmed, so whether it took effect is unknown"
    assert str(error).startswith(f"{store.url}: write: "), error
    if fault == "black_hole":
        assert "no answer from the database within 1.5s (call_timeout)" in str(error), error
    else:
        assert "connection lost" in str(error), error
    assert error.outcome_unknown == (when == "at its commit")
    assert (unknown in str(error)) == error.outcome_unknown, error


DELAYED_ROWS = 600


@pytest.mark.postgres
@pytest.mark.deadline(60)
async def test_a_postgres_200ms_away_completes_the_run_correctly_only_slower(
    pg_schema: str, proxy: FaultyProxy
) -> None:
    watch = Watch()

    async def delay() -> None:
        proxy.delay(0.2)
        await trio.lowlevel.checkpoint()

    # The default deadlines: 200 ms each way must not trip any of them.
    conninfo = psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(proxy.port))
    store = PostgresStore(conninfo, schema=pg_schema)
    with trio.fail_after(50):
        outcome, elapsed = await run_with_fault(store, delay, watch, rows=DELAYED_ROWS)

    assert isinstance(outcome, trioplay.MapResult), outcome
    assert outcome.completed_count == DELAYED_ROWS
    assert elapsed > 1.0  # it was slower: every round trip took 0.4 s
    committed = await trio.to_thread.run_sync(pg_committed, pg_schema)
    record("PostgreSQL 200 ms delay", "none", elapsed, watch.reported, len(committed))
    assert committed == {f"d{i}.example" for i in range(DELAYED_ROWS)}


# -- Ctrl-C on the command line, PostgreSQL black-holed ----------------------------

CLI_PLAY = """
import trio
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("finder")
async def finder(input, call):
    if int(input["domain"][1:].split(".")[0]) >= 1000:
        await trio.sleep_forever()  # the run cannot end before the interrupt
    await trio.sleep(0.002)
    return {"email": "info@" + input["domain"]}


@trioplay.play("faults")
async def play(ctx, input):
    rows = [{"domain": f"d{i}.example"} for i in range(3000)]

    async def email(row, rc):
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    result = await ctx.dataset("s", rows).with_column("email", email).run(key="domain")
    return {"completed": result.completed_count}
"""


@pytest.mark.postgres
@pytest.mark.deadline(40)
async def test_ctrl_c_on_a_black_holed_postgres_exits_within_cleanup_timeout(
    pg_schema: str, proxy: FaultyProxy, nursery: trio.Nursery, tmp_path: Path
) -> None:
    play = tmp_path / "play.py"
    play.write_text(CLI_PLAY)
    parts = urlsplit(DSN)
    user = f"{parts.username}@" if parts.username else ""
    url = parts._replace(
        netloc=f"{user}127.0.0.1:{proxy.port}", query=f"schema={pg_schema}&call_timeout=30"
    ).geturl()
    command = [sys.executable, "-m", "trioplay", "run", str(play), "--store", url]
    command += ["--run-id", "r", "--limit", f"cleanup_timeout={CLEANUP}"]
    process = await trio.lowlevel.open_process(
        command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stderr = bytearray()
    said_interrupted = trio.Event()

    async def read_stderr() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            stderr.extend(chunk)
            if b"interrupted" in stderr:
                said_interrupted.set()

    nursery.start_soon(read_stderr)
    try:
        with trio.fail_after(20):
            while True:
                if await trio.to_thread.run_sync(_pg_count, pg_schema) >= FAULT_AT:
                    break
                await trio.sleep(0.05)
        proxy.black_hole()
        await trio.sleep(0.3)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        with trio.fail_after(10):
            await said_interrupted.wait()
            # What the user sees: the command says so and gives the prompt back.
            elapsed = time.monotonic() - interrupted
            code = await process.wait()
            exited = time.monotonic() - interrupted
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    proxy.restore()

    text = stderr.decode(errors="replace")
    committed = await trio.to_thread.run_sync(pg_committed, pg_schema)
    record("PostgreSQL black-holed, Ctrl-C (CLI)", code, elapsed, None, len(committed))
    # It exited by the interrupt, within the test's 10 s: long before its
    # calls' 30 s deadline (the seconds it took are printed above).
    assert code == 130, (elapsed, exited, text)


def _pg_count(schema: str) -> int:
    try:
        return len(pg_committed(schema))
    except psycopg.errors.UndefinedTable:
        return 0


# -- SQLite: a full disk, and a lock held by another process ------------------------


def sqlite_committed(path: Path) -> set[str]:
    """The keys of the rows SQLite holds as completed, read on a fresh connection."""
    with sqlite3.connect(path, timeout=5) as conn:
        rows = conn.execute(
            "SELECT key FROM sheet_rows WHERE run_id = ? AND status = ?", ("r", "completed")
        ).fetchall()
    return {key for (key,) in rows}


@pytest.mark.deadline(40)
async def test_a_full_disk_fails_the_run_with_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "faults.db"
    completed = await trio.run_process(
        [sys.executable, "-m", "tests.full_disk_run", str(db), str(ROWS), str(FAULT_AT)],
        cwd=REPO,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    stderr = completed.stderr.decode(errors="replace")
    assert completed.returncode == 0, stderr
    report = json.loads(completed.stdout.decode().strip().splitlines()[-1])
    assert report["type"] in ("StoreError", "PersistenceLatchTripped"), report
    assert report["store_error"].startswith(f"sqlite:///{db}: "), report
    # The write past the limit fails with EFBIG, which SQLite reports as an
    # I/O error, told apart from a full disk (test_fault_messages.py has that one).
    assert (
        "disk I/O error; the operating system refused a read or write of the file:"
        " a file-size limit (ulimit -f)"
    ) in report["store_error"], report
    shown, took, reported = report["store_error"], report["elapsed"], report["reported"]
    await check_stored("SQLite full disk", shown, took, reported, partial(sqlite_committed, db))


HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


class LockHolder:
    """Another process that takes the database's write lock and holds it for 20 s."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.process: trio.Process | None = None

    async def take(self) -> None:
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-c", HOLD_LOCK, str(self.path), "20"], stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        said = b""
        while b"\n" not in said:
            chunk = await self.process.stdout.receive_some()
            assert chunk, "the lock holder ended before taking the lock"
            said += chunk
        assert said.strip() == b"locked", said

    async def release(self) -> None:
        if self.process is not None:
            with trio.CancelScope(shield=True):
                self.process.kill()
                await self.process.wait()
                assert self.process.stdout is not None
                await self.process.stdout.aclose()


@pytest.mark.deadline(30)
async def test_a_write_lock_held_by_another_process_fails_the_run_after_lock_timeout(
    tmp_path: Path,
) -> None:
    db = tmp_path / "faults.db"
    holder = LockHolder(db)
    watch = Watch()
    store = open_store(f"sqlite:///{db}?lock_timeout={LOCK_TIMEOUT}")
    try:
        with trio.fail_after(15):
            outcome, elapsed = await run_with_fault(store, holder.take, watch)
    finally:
        await holder.release()

    error = store_error(outcome)
    assert str(error).startswith(f"{store.url}: "), error
    assert "the database is locked by another connection: waited" in str(error), error
    assert "(lock_timeout=0.5s)" in str(error), error
    # The call waited for the lock that long, after the jobs queued before it
    # on the store's one thread had waited too.
    waited = re.search(r"waited (\d+\.\d+)s", str(error))
    assert waited is not None
    assert float(waited[1]) >= LOCK_TIMEOUT
    assert error.elapsed is not None
    assert error.elapsed >= LOCK_TIMEOUT
    await check_stored(
        "SQLite lock held", error, elapsed, watch.reported, partial(sqlite_committed, db)
    )


@pytest.mark.deadline(30)
async def test_cancelling_a_run_waiting_for_a_held_sqlite_lock_returns_within_cleanup_timeout(
    tmp_path: Path,
) -> None:
    db = tmp_path / "faults.db"
    holder = LockHolder(db)
    watch = Watch()
    # A lock_timeout past the test's bound: the cancel must not wait for it.
    store = SqliteStore(db, lock_timeout=60)
    try:
        with trio.fail_after(15):
            outcome, elapsed = await run_with_fault(store, holder.take, watch, cancel_after=0.3)
    finally:
        await holder.release()

    assert isinstance(outcome, trio.Cancelled), outcome
    await check_stored(
        "SQLite lock held, cancel",
        "Cancelled",
        elapsed,
        watch.reported,
        partial(sqlite_committed, db),
    )
