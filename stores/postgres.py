"""``postgresql://...``: the store that lets several processes share one run.

PostgreSQL is the coordination engine for cooperative execution (DESIGN §5):
receipts and dataset pages are leased in it, and fenced writes make a
zombie's late write a no-op. The decisions themselves are the pure functions
of :mod:`trioplay.stores.memory` (``decide_claims``, ``decide_page``), applied
here to rows locked with ``SELECT ... FOR UPDATE``, so every store answers the
same way.

The Trio bridge
---------------
psycopg's async connection runs on asyncio only. Two bridges were weighed:

- trio-asyncio: the user's whole program would have to run inside
  ``trio_asyncio.open_loop()`` (a library must not ask that of its callers),
  every call would cross two event loops, and turning a Trio cancellation into
  a server-side cancel would go through asyncio task cancellation and
  psycopg's reaction to it, which is hard to bound.
- psycopg's synchronous API with one dedicated thread per connection (chosen).
  No asyncio loop anywhere, a connection is only ever touched by its own
  thread, and cancellation is explicit: the Trio side asks the server to
  cancel (libpq's cancel protocol, ``Connection.cancel_safe``, the one
  connection method psycopg documents as safe from another thread) and waits,
  shielded and bounded, for the thread to come back.

A store holds a small pool of such *workers* (``pool_size``, default 4). A call
takes an idle worker (callers queue in FIFO order when all are busy), hands it
one *job* — a function of the connection, one transaction — and sleeps until
the worker hands the outcome back through the Trio token. Cancellation:

- while waiting for a worker, or while the job is still queued on it: nothing
  happened, the call raises ``Cancelled`` at once;
- while the job runs: the server is asked to cancel it and the caller waits up
  to ``cancel_timeout`` (default 1 s) for the worker. A cancelled statement
  rolls its transaction back, so the call happened not at all; if the job
  finished before the cancel reached it, it happened whole and its result is
  returned (the caller's cancellation is then delivered at its next
  checkpoint, as for any Trio operation whose abort came too late). A worker
  whose job was cancelled closes its connection, so that a cancel signal
  arriving late can never hit the next job; a worker that does not come back
  within the bound (a dead network) is abandoned and replaced.

A connection that breaks (the server restarted, a backend was terminated, the
network dropped) fails the call that was using it with a ``StoreError`` saying
``connection lost``; the worker opens a new connection for its next job. An
idle connection is checked before each job (a readable socket on an idle
connection means the server has hung up), so a restart costs no failed call
when the pool was idle. A write whose connection broke before the server
confirmed its ``COMMIT`` is reported as failed, never as done.

Lookups are by key, and PostgreSQL plans them well only with fresh table
statistics; a run fills its tables faster than autovacuum analyzes them, so
the store runs ``ANALYZE`` on a table each time its own inserts have doubled
it (see ``_Growth``).

Payload columns (JSON text the engine hands over) are stored as ``bytea``
holding UTF-8: PostgreSQL ``text`` cannot hold the NUL character, and stores
must hand payloads back exactly as given.
"""

from __future__ import annotations

import enum
import hashlib
import os
import queue
import re
import select
import threading
from functools import partial
from itertools import count
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import attrs
import outcome
import psycopg
import psycopg.conninfo
import psycopg.errors
import trio

from trioplay import (
    ClaimOutcome,
    ClaimRequest,
    Completion,
    Failure,
    Lease,
    PageClaim,
    PageLease,
    Receipt,
    RunRecord,
    SheetEntry,
    SheetRow,
    StoreError,
)

from ._rules import PageRecord, decide_claims, decide_page

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from psycopg.rows import TupleRow

    from trioplay._records import RowStatus, RunStatus

    _Conn = psycopg.Connection[TupleRow]

T = TypeVar("T")

SCHEMA_VERSION = 1
DEFAULT_SCHEMA = "trioplay"
DEFAULT_POOL_SIZE = 4

# A claim that loses a race for a new key (another process inserted it after
# our snapshot), or a deadlock between two batches, is retried whole.
_RACE_ATTEMPTS = 5
# See _Growth: a table this store fills is analyzed once it has grown by this
# many rows, then each time it has doubled.
_ANALYZE_MIN_ROWS = 1000
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Connection defaults, used unless the URL (or libpq's environment) says otherwise.
_CONNECT_DEFAULTS = {
    "connect_timeout": ("10", "PGCONNECT_TIMEOUT"),
    "application_name": ("trioplay", "PGAPPNAME"),
    # Notice a peer that vanished (no FIN, no RST) in about a minute, not hours.
    "keepalives_idle": ("30", None),
    "keepalives_interval": ("10", None),
    "keepalives_count": ("3", None),
}

# Each migration is a list of statements; "{s}" is the quoted schema name.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE {s}.runs (
            run_id text COLLATE "C" PRIMARY KEY,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            play text NOT NULL,
            input_json bytea NOT NULL,
            status text NOT NULL,
            attempt integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            output_json bytea,
            error bytea,
            stats_json bytea
        )""",
        "CREATE INDEX runs_by_update ON {s}.runs (updated_at DESC, seq DESC)",
        """CREATE TABLE {s}.receipts (
            key text COLLATE "C" PRIMARY KEY,
            operation text NOT NULL,
            name text NOT NULL,
            status text NOT NULL,
            run_id text COLLATE "C",
            lease_id text,
            lease_expires_at double precision,
            owner text,
            attempts integer NOT NULL,
            result_json bytea,
            error_json bytea,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            completed_at double precision
        )""",
        # Only run_id: an index on status would be rewritten by every completion.
        "CREATE INDEX receipts_by_run ON {s}.receipts (run_id)",
        """CREATE TABLE {s}.sheet_rows (
            run_id text COLLATE "C" NOT NULL,
            dataset text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            position bigint NOT NULL,
            status text NOT NULL,
            data_json bytea NOT NULL,
            error bytea,
            attempt integer NOT NULL,
            PRIMARY KEY (run_id, dataset, key)
        )""",
        "CREATE INDEX sheet_rows_by_position ON {s}.sheet_rows (run_id, dataset, position)",
        """CREATE TABLE {s}.pages (
            run_id text COLLATE "C" NOT NULL,
            dataset text COLLATE "C" NOT NULL,
            page_offset bigint NOT NULL,
            status text NOT NULL,
            lease_id text,
            lease_expires_at double precision,
            owner text,
            attempt integer NOT NULL,
            failed integer NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (run_id, dataset, page_offset)
        )""",
    ),
)

_RUN_COLUMNS = (
    "run_id, play, input_json, status, attempt, created_at, updated_at,"
    " output_json, error, stats_json"
)
_RECEIPT_COLUMNS = (
    "key, operation, name, status, run_id, lease_id, lease_expires_at, owner, attempts,"
    " result_json, error_json, created_at, updated_at, completed_at"
)
_RECEIPT_TYPES = (
    "text, text, text, text, text, text, float8, text, int4, bytea, bytea, float8, float8, float8"
)
_PAGE_COLUMNS = "status, lease_id, lease_expires_at, owner, attempt, failed, updated_at"
# Rows of a sheet batch are copied into this per-connection table, then upserted.
_INCOMING = "trioplay_incoming_rows"


def _arrays(types: str) -> str:
    return ", ".join(f"%b::{t.strip()}[]" for t in types.split(","))


class _Sql:
    """Every statement of the store, written once for one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        s = self.s = '"' + schema + '"'
        self.migrations = [[stmt.format(s=s) for stmt in batch] for batch in _MIGRATIONS]

        self.begin_attempt = f"""
            INSERT INTO {s}.runs AS r
                (run_id, play, input_json, status, attempt, created_at, updated_at)
            VALUES (%s, %s, %s, 'running', 1, %s, %s)
            ON CONFLICT (run_id) DO UPDATE SET
                play = excluded.play, input_json = excluded.input_json, status = 'running',
                attempt = r.attempt + 1, updated_at = excluded.updated_at,
                output_json = NULL, error = NULL, stats_json = NULL
            RETURNING {_RUN_COLUMNS}
        """
        self.finish_attempt = f"""
            UPDATE {s}.runs SET status = %s, updated_at = %s, output_json = %s, error = %s,
                stats_json = %s
            WHERE run_id = %s
        """
        self.get_run = f"SELECT {_RUN_COLUMNS} FROM {s}.runs WHERE run_id = %s"
        self.list_runs = (
            f"SELECT {_RUN_COLUMNS} FROM {s}.runs ORDER BY updated_at DESC, seq DESC LIMIT %s"
        )

        self.get_receipts = (
            f"SELECT {_RECEIPT_COLUMNS} FROM {s}.receipts WHERE key = ANY(%b::text[])"
        )
        # In key order, so that two claimers lock overlapping keys in one order.
        self.lock_receipts = self.get_receipts + " ORDER BY key FOR UPDATE"
        # Keys we locked are updated; a key we saw absent but that another
        # transaction inserted since is left alone and not returned: the claim
        # is then retried on a fresh snapshot.
        updates = ", ".join(f"{c} = excluded.{c}" for c in _RECEIPT_COLUMNS.split(", ")[1:])
        self.upsert_claimed = f"""
            INSERT INTO {s}.receipts AS r ({_RECEIPT_COLUMNS})
            SELECT * FROM unnest({_arrays(_RECEIPT_TYPES)})
            ON CONFLICT (key) DO UPDATE SET {updates}
            WHERE r.key = ANY(%b::text[])
            RETURNING r.key
        """
        fenced = f"""
            UPDATE {s}.receipts AS r SET {{}}
            FROM unnest(%b::text[], %b::text[]{{}}) WITH ORDINALITY AS u(key, lease_id{{}}, i)
            WHERE r.key = u.key AND r.lease_id = u.lease_id AND r.status = 'running'
            RETURNING u.i
        """
        self.heartbeat = fenced.format("lease_expires_at = %s, updated_at = %s", "", "")
        self.complete = fenced.format(
            "status = 'completed', lease_expires_at = NULL, result_json = u.payload,"
            " error_json = NULL, updated_at = %s, completed_at = %s",
            ", %b::bytea[]",
            ", payload",
        )
        self.fail = fenced.format(
            "status = 'failed', lease_expires_at = NULL, result_json = NULL,"
            " error_json = u.payload, updated_at = %s, completed_at = %s",
            ", %b::bytea[]",
            ", payload",
        )
        self.release = fenced.format(
            "status = 'pending', lease_id = NULL, lease_expires_at = NULL, owner = NULL,"
            " updated_at = %s",
            "",
            "",
        )
        self.count_receipts = (
            f"SELECT status, count(*) FROM {s}.receipts WHERE run_id = %s GROUP BY status"
        )

        self.copy_rows = (
            f"COPY {_INCOMING} (key, position, status, data_json, error, attempt)"
            " FROM STDIN (FORMAT BINARY)"
        )
        self.upsert_rows = f"""
            INSERT INTO {s}.sheet_rows
                (run_id, dataset, key, position, status, data_json, error, attempt)
            SELECT %s, %s, key, position, status, data_json, error, attempt FROM {_INCOMING}
            ON CONFLICT (run_id, dataset, key) DO UPDATE SET
                position = excluded.position, status = excluded.status,
                data_json = excluded.data_json, error = excluded.error,
                attempt = excluded.attempt
        """
        self.sheet_status = f"""
            SELECT key, status, attempt FROM {s}.sheet_rows
            WHERE run_id = %s AND dataset = %s AND key = ANY(%b::text[])
        """
        read_rows = f"""
            SELECT key, position, status, data_json, error, attempt FROM {s}.sheet_rows
            WHERE run_id = %s AND dataset = %s AND position > %s{{}}
            ORDER BY position LIMIT %s
        """
        self.read_rows = read_rows.format("")
        self.read_rows_by_status = read_rows.format(" AND status = %s")
        self.count_rows = (
            f"SELECT status, count(*) FROM {s}.sheet_rows"
            " WHERE run_id = %s AND dataset = %s GROUP BY status"
        )
        self.list_datasets = (
            f"SELECT DISTINCT dataset FROM {s}.sheet_rows WHERE run_id = %s ORDER BY dataset"
        )

        self.new_page = f"""
            INSERT INTO {s}.pages
                (run_id, dataset, page_offset, status, attempt, failed, updated_at)
            VALUES (%s, %s, %s, 'pending', 0, 0, %s)
            ON CONFLICT DO NOTHING
        """
        self.lock_page = f"""
            SELECT {_PAGE_COLUMNS} FROM {s}.pages
            WHERE run_id = %s AND dataset = %s AND page_offset = %s FOR UPDATE
        """
        self.claim_page = f"""
            UPDATE {s}.pages SET status = %s, lease_id = %s, lease_expires_at = %s,
                owner = %s, attempt = %s, failed = %s, updated_at = %s
            WHERE run_id = %s AND dataset = %s AND page_offset = %s
        """
        page_fenced = f"""
            UPDATE {s}.pages AS p SET {{}}
            FROM unnest(%b::text[], %b::text[], %b::int8[], %b::text[])
                WITH ORDINALITY AS u(run_id, dataset, page_offset, lease_id, i)
            WHERE p.run_id = u.run_id AND p.dataset = u.dataset
                AND p.page_offset = u.page_offset AND p.lease_id = u.lease_id
                AND p.status = 'running'
            RETURNING u.i
        """
        self.heartbeat_pages = page_fenced.format("lease_expires_at = %s, updated_at = %s")
        self.finish_page = page_fenced.format(
            "status = 'done', lease_expires_at = NULL, attempt = %s, failed = %s, updated_at = %s"
        )
        self.release_page = page_fenced.format(
            "status = 'pending', lease_id = NULL, lease_expires_at = NULL, owner = NULL,"
            " updated_at = %s"
        )


class PostgresStore:
    """A :class:`trioplay.Store` in a PostgreSQL schema, shared by any number of processes.

    Build it with :meth:`from_url` (``postgresql://user:secret@host:5432/db``,
    optionally ``?schema=name`` and ``?pool_size=N``; every other parameter
    goes to libpq) or from a libpq connection string. :meth:`open` creates
    the schema (default ``trioplay``) and its tables, or migrates them, under
    an advisory lock so that processes starting together do not race, and
    refuses with :class:`trioplay.StoreError` a schema written by a newer
    trioplay. A role that may not create anything can use a schema migrated
    beforehand.

    Every call is one job on one of ``pool_size`` connections, each owned by
    its own thread; every batch call is one transaction. See the module
    docstring for what cancellation does (in short: a call blocked on the
    server is cancelled on the server and returns within ``cancel_timeout``)
    and for what a lost connection does (a ``StoreError`` naming the
    operation; the next call reconnects). Errors name the store by
    :attr:`url`, which never shows the password.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_size: int = DEFAULT_POOL_SIZE,
        cancel_timeout: float = 1.0,
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(
                f"bad PostgreSQL schema name {schema!r}: use letters, digits and _"
                " (at most 63, not starting with a digit)"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        if not cancel_timeout > 0:
            raise ValueError(f"cancel_timeout must be positive, got {cancel_timeout}")
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            # The message of libpq names the fault, never the password.
            raise ValueError(f"bad PostgreSQL connection string: {exc}") from None
        for name, (value, env) in _CONNECT_DEFAULTS.items():
            if name not in params and (env is None or env not in os.environ):
                params[name] = value
        self._params: dict[str, Any] = params
        self._sql = _Sql(schema)
        self._schema = schema
        self._pool_size = pool_size
        self._cancel_timeout = cancel_timeout
        self._url = _display_url(params, schema)
        self._growth = _Growth()
        self._pool: _Pool | None = None

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """The store for ``url``; raises ``ValueError`` if it is not a PostgreSQL URL."""
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError("bad PostgreSQL store URL: use postgresql://user@host:port/db")
        options: dict[str, Any] = {}
        rest: list[tuple[str, str]] = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name == "schema":
                options["schema"] = value
            elif name == "pool_size":
                try:
                    options["pool_size"] = int(value)
                except ValueError:
                    raise ValueError(f"bad pool_size {value!r} in a PostgreSQL URL") from None
            else:
                rest.append((name, value))
        # Rebuilt by hand: urlunsplit drops the "//" of an empty host (a local socket).
        query = urlencode(rest)
        conninfo = f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
        return cls(conninfo, **options)

    @property
    def url(self) -> str:
        return self._url

    @property
    def schema(self) -> str:
        return self._schema

    async def open(self) -> None:
        if self._pool is not None:
            raise StoreError(f"{self.url}: open: the store is already open")
        self._pool = _Pool(self._pool_size, self._new_worker)
        try:
            await self._call("open", partial(_migrate, self._sql, self._growth, self.url))
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with trio.CancelScope(shield=True):
                await pool.aclose(timeout=max(5.0, self._cancel_timeout))

    def _new_worker(self) -> _Worker:
        return _Worker(self._connect, f"trioplay-postgres {self.url}")

    def _connect(self) -> _Conn:
        conn = psycopg.Connection.connect(**self._params, autocommit=True)
        try:
            conn.execute(
                f'CREATE TEMP TABLE {_INCOMING} (key text COLLATE "C", position bigint,'
                " status text, data_json bytea, error bytea, attempt integer)"
                " ON COMMIT DELETE ROWS"
            )
        except BaseException:
            conn.close()
            raise
        return conn

    async def _call(self, operation: str, work: Callable[[_Conn], T]) -> T:
        """Run ``work`` on a pooled connection; see the module docstring for cancellation."""
        await trio.lowlevel.checkpoint_if_cancelled()
        pool = self._pool
        if pool is None:
            raise StoreError(f"{self.url}: {operation}: the store is not open")
        try:
            worker = await pool.acquire()
        except (trio.ClosedResourceError, trio.EndOfChannel):
            raise StoreError(f"{self.url}: {operation}: the store is not open") from None
        try:
            job = worker.submit(work)
            try:
                await job.done.wait()
            except trio.Cancelled:
                if not await self._interrupt(worker, job):
                    raise
                # The job finished before the cancel reached the server, so it
                # happened whole: hand back what it did. The caller's scope is
                # still cancelled and raises at its next checkpoint.
        finally:
            pool.release(worker)
        assert job.result is not None
        try:
            return cast("T", job.result.unwrap())
        except StoreError:
            raise
        except _Unreachable as exc:
            raise StoreError(f"{self.url}: {operation}: cannot connect: {exc}") from exc.cause
        except _ConnectionLost as exc:
            raise StoreError(f"{self.url}: {operation}: connection lost: {exc}") from exc.cause
        except (psycopg.Error, UnicodeError, _Contended) as exc:
            raise StoreError(f"{self.url}: {operation}: {_one_line(exc)}") from exc

    async def _interrupt(self, worker: _Worker, job: _Job) -> bool:
        """Stop ``job`` after its caller was cancelled; True if it had succeeded anyway."""
        if worker.drop(job):
            return False
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._cancel_timeout
            await trio.to_thread.run_sync(
                partial(worker.cancel, job, self._cancel_timeout), abandon_on_cancel=True
            )
            await job.done.wait()
        if scope.cancelled_caught:
            worker.retired = True
            return False
        return isinstance(job.result, outcome.Value)

    # -- runs ---------------------------------------------------------------
    async def begin_attempt(
        self, run_id: str, play: str, input_json: str, *, now: float
    ) -> RunRecord:
        now = float(now)

        def work(conn: _Conn) -> RunRecord:
            row = conn.execute(
                self._sql.begin_attempt, (run_id, play, input_json.encode(), now, now), binary=True
            ).fetchone()
            assert row is not None
            return _run(row)

        return await self._call("begin_attempt", work)

    async def finish_attempt(
        self,
        run_id: str,
        status: RunStatus,
        *,
        now: float,
        output_json: str | None = None,
        error: str | None = None,
        stats_json: str | None = None,
    ) -> None:
        def work(conn: _Conn) -> int:
            params = (status, float(now), _b(output_json), _b(error), _b(stats_json), run_id)
            return conn.execute(self._sql.finish_attempt, params).rowcount

        if await self._call("finish_attempt", work) != 1:
            raise StoreError(f"{self.url}: finish_attempt: unknown run {run_id!r}")

    async def get_run(self, run_id: str) -> RunRecord | None:
        def work(conn: _Conn) -> RunRecord | None:
            row = conn.execute(self._sql.get_run, (run_id,), binary=True).fetchone()
            return _run(row) if row is not None else None

        return await self._call("get_run", work)

    async def list_runs(self, *, limit: int = 50) -> list[RunRecord]:
        def work(conn: _Conn) -> list[RunRecord]:
            rows = conn.execute(self._sql.list_runs, (limit,), binary=True).fetchall()
            return [_run(row) for row in rows]

        return await self._call("list_runs", work)

    # -- receipts -----------------------------------------------------------
    async def claim_many(
        self, requests: Sequence[ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[ClaimOutcome]:
        if not requests:
            await trio.lowlevel.checkpoint()
            return []
        work = partial(
            _claim_many,
            self._sql,
            self._growth,
            list(requests),
            owner,
            float(lease_ttl),
            float(now),
        )
        return await self._call("claim_many", work)

    async def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        expires = float(now) + float(lease_ttl)
        work = partial(
            _fenced, self._sql.heartbeat, (expires, float(now)), _leases(leases), None, True
        )
        updated = await self._call("heartbeat_many", work)
        return [expires if ok else None for ok in updated]

    async def complete_many(self, items: Sequence[Completion], *, now: float) -> list[bool]:
        results = [item.result_json for item in items]
        shared = (float(now), float(now))
        work = partial(_fenced, self._sql.complete, shared, _leases(items), results, False)
        return await self._call("complete_many", work)

    async def fail_many(self, items: Sequence[Failure], *, now: float) -> list[bool]:
        errors = [item.error_json for item in items]
        shared = (float(now), float(now))
        work = partial(_fenced, self._sql.fail, shared, _leases(items), errors, False)
        return await self._call("fail_many", work)

    async def release_many(self, leases: Sequence[Lease], *, now: float) -> list[bool]:
        work = partial(_fenced, self._sql.release, (float(now),), _leases(leases), None, False)
        return await self._call("release_many", work)

    async def get_many(self, keys: Sequence[str]) -> list[Receipt | None]:
        if not keys:
            await trio.lowlevel.checkpoint()
            return []
        unique = list(dict.fromkeys(keys))

        def work(conn: _Conn) -> dict[str, Receipt]:
            rows = conn.execute(self._sql.get_receipts, (unique,), binary=True).fetchall()
            return {row[0]: _receipt(row) for row in rows}

        found = await self._call("get_many", work)
        return [found.get(key) for key in keys]

    async def count_receipts(self, run_id: str) -> dict[str, int]:
        def work(conn: _Conn) -> dict[str, int]:
            return dict(conn.execute(self._sql.count_receipts, (run_id,)).fetchall())

        return await self._call("count_receipts", work)

    # -- dataset sheets -----------------------------------------------------
    async def write_terminal_rows(
        self, run_id: str, dataset: str, rows: Sequence[SheetRow]
    ) -> None:
        if not rows:
            await trio.lowlevel.checkpoint()
            return
        work = partial(_write_rows, self._sql, self._growth, run_id, dataset, list(rows))
        await self._call("write_terminal_rows", work)

    async def sheet_status(
        self, run_id: str, dataset: str, keys: Sequence[str]
    ) -> dict[str, SheetEntry]:
        if not keys:
            await trio.lowlevel.checkpoint()
            return {}
        unique = list(dict.fromkeys(keys))

        def work(conn: _Conn) -> dict[str, SheetEntry]:
            rows = conn.execute(self._sql.sheet_status, (run_id, dataset, unique)).fetchall()
            return {key: SheetEntry(status, attempt) for key, status, attempt in rows}

        return await self._call("sheet_status", work)

    async def read_rows(
        self,
        run_id: str,
        dataset: str,
        *,
        status: RowStatus | None = None,
        after_position: int = -1,
        limit: int = 1000,
    ) -> list[SheetRow]:
        if limit <= 0:
            await trio.lowlevel.checkpoint()
            return []
        params: tuple[Any, ...] = (run_id, dataset, after_position)
        if status is not None:
            params += (status,)
        query = self._sql.read_rows if status is None else self._sql.read_rows_by_status

        def work(conn: _Conn) -> list[SheetRow]:
            rows = conn.execute(query, (*params, limit), binary=True).fetchall()
            return [
                SheetRow(key, position, status, data.decode(), _s(error), attempt)
                for key, position, status, data, error, attempt in rows
            ]

        return await self._call("read_rows", work)

    async def count_rows(self, run_id: str, dataset: str) -> dict[str, int]:
        def work(conn: _Conn) -> dict[str, int]:
            return dict(conn.execute(self._sql.count_rows, (run_id, dataset)).fetchall())

        return await self._call("count_rows", work)

    async def list_datasets(self, run_id: str) -> list[str]:
        def work(conn: _Conn) -> list[str]:
            rows = conn.execute(self._sql.list_datasets, (run_id,)).fetchall()
            return [dataset for (dataset,) in rows]

        return await self._call("list_datasets", work)

    # -- page leases --------------------------------------------------------
    async def claim_page(
        self,
        run_id: str,
        dataset: str,
        offset: int,
        *,
        owner: str,
        lease_ttl: float,
        now: float,
        takeover_lease: str | None = None,
        reopen: bool = False,
    ) -> PageClaim:
        decide = partial(
            decide_page,
            owner=owner,
            lease_ttl=float(lease_ttl),
            now=float(now),
            takeover_lease=takeover_lease,
            reopen=reopen,
        )
        work = partial(_claim_page, self._sql, (run_id, dataset, offset), float(now), decide)
        return await self._call("claim_page", work)

    async def heartbeat_pages(
        self, leases: Sequence[PageLease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        expires = float(now) + float(lease_ttl)
        shared = (expires, float(now))
        work = partial(_fenced, self._sql.heartbeat_pages, shared, _page_leases(leases), None, True)
        updated = await self._call("heartbeat_pages", work)
        return [expires if ok else None for ok in updated]

    async def finish_page(self, lease: PageLease, *, attempt: int, failed: int, now: float) -> bool:
        shared = (attempt, failed, float(now))
        work = partial(_fenced, self._sql.finish_page, shared, _page_leases([lease]), None, False)
        [finished] = await self._call("finish_page", work)
        return finished

    async def release_page(self, lease: PageLease, *, now: float) -> bool:
        work = partial(
            _fenced, self._sql.release_page, (float(now),), _page_leases([lease]), None, False
        )
        [released] = await self._call("release_page", work)
        return released


# -- the workers ---------------------------------------------------------------


class _ConnectionLost(Exception):
    """The connection broke during a job (wraps psycopg's error)."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(_one_line(cause))
        self.cause = cause


class _Unreachable(_ConnectionLost):
    """No connection could be opened for a job."""


class _Contended(Exception):
    """A claim kept losing races for new keys to concurrent claimers."""


class _State(enum.Enum):
    QUEUED = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()
    DROPPED = enum.auto()


@attrs.define(eq=False)
class _Job:
    work: Callable[[_Conn], Any]
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.Factory(trio.Event)
    state: _State = _State.QUEUED
    cancel_requested: bool = False
    result: outcome.Outcome[Any] | None = None


class _Worker:
    """A thread that owns one connection (opened lazily) and runs jobs on it in order.

    ``_lock`` guards job states: a job is either dropped before it starts or
    runs to its end. ``_conn_lock`` guards the connection's lifetime against a
    cancel request in flight from another thread: the connection is never
    closed under ``cancel_safe``.
    """

    def __init__(self, connect: Callable[[], _Conn], name: str) -> None:
        self._connect = connect
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._conn_lock = threading.Lock()
        self._conn: _Conn | None = None
        # Set by the Trio side: this worker takes no more jobs.
        self.retired = False
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Callable[[_Conn], Any]) -> _Job:
        job = _Job(work, trio.lowlevel.current_trio_token())
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """Close the connection and end the thread once the current job (if any) is done."""
        self.retired = True
        self._jobs.put(None)

    def drop(self, job: _Job) -> bool:
        """Withdraw ``job`` if it has not started; True if it never will."""
        with self._lock:
            if job.state is _State.QUEUED:
                job.state = _State.DROPPED
                return True
            return False

    def cancel(self, job: _Job, timeout: float) -> None:
        """Ask the server to cancel ``job`` if it is running (blocks: call from a thread)."""
        with self._conn_lock:
            with self._lock:
                if job.state is not _State.RUNNING:
                    return
                job.cancel_requested = True
                conn = self._conn
            if conn is None:
                return
            try:
                conn.cancel_safe(timeout=timeout)
            except psycopg.Error:
                pass  # the caller's wait for the job is bounded anyway

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            # Connecting is not part of the job: a caller cancelled meanwhile
            # drops a job that never started.
            ready = outcome.capture(self._ready)
            with self._lock:
                if job.state is _State.DROPPED:
                    continue
                job.state = _State.RUNNING
            if isinstance(ready, outcome.Value):
                result = outcome.capture(self._execute, job, ready.value)
            else:
                result = ready
            with self._lock:
                job.state = _State.DONE
                discard = job.cancel_requested
            if discard or not _idle(self._conn):
                # A late cancel must never hit the next job; a broken or
                # mid-transaction connection is of no further use.
                outcome.capture(self._close)
            job.result = result
            try:
                job.token.run_sync_soon(job.done.set)
            except trio.RunFinishedError:
                pass
        outcome.capture(self._close)

    def _execute(self, job: _Job, conn: _Conn) -> Any:
        try:
            return job.work(conn)
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise _ConnectionLost(exc) from exc
            raise

    def _ready(self) -> _Conn:
        conn = self._conn
        if conn is not None and _healthy(conn):
            return conn
        self._close()
        try:
            conn = self._connect()
        except psycopg.Error as exc:
            raise _Unreachable(exc) from exc
        with self._conn_lock:
            self._conn = conn
        return conn

    def _close(self) -> None:
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _idle(conn: _Conn | None) -> bool:
    return (
        conn is not None
        and not conn.closed
        and not conn.broken
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


def _healthy(conn: _Conn) -> bool:
    """Whether an idle connection is still there.

    Between jobs the server has nothing to say, so a readable socket means it
    hung up (a terminated backend, a restart, a proxy that cut us off).
    """
    if not _idle(conn):
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


class _Pool:
    """The workers, each either idle in a channel or held by exactly one call."""

    def __init__(self, size: int, new_worker: Callable[[], _Worker]) -> None:
        self._new_worker = new_worker
        self._send, self._receive = trio.open_memory_channel[_Worker](size)
        self._workers: list[_Worker] = []
        self._closed = False
        for _ in range(size):
            self._send.send_nowait(self._add())

    def _add(self) -> _Worker:
        worker = self._new_worker()
        self._workers.append(worker)
        return worker

    async def acquire(self) -> _Worker:
        return await self._receive.receive()

    def release(self, worker: _Worker) -> None:
        if self._closed:
            worker.stop()
            return
        if worker.retired:
            # Abandoned mid-job: it ends by itself once its blocking call returns.
            worker.stop()
            self._workers.remove(worker)
            worker = self._add()
        self._send.send_nowait(worker)

    async def aclose(self, *, timeout: float) -> None:
        self._closed = True
        self._send.close()
        self._receive.close()
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()

        def join() -> None:
            for worker in workers:
                worker.thread.join()

        # Idle workers end at once; one stuck on a dead network is left to
        # its daemon thread rather than hold up the caller.
        with trio.move_on_after(timeout):
            await trio.to_thread.run_sync(join, abandon_on_cancel=True)


# -- planner statistics -----------------------------------------------------------

_GROWING = ("receipts", "sheet_rows")


class _Growth:
    """When to refresh the planner's statistics of the tables a run fills.

    Every lookup here is by key, and with statistics PostgreSQL answers it
    from the primary key. Without them (a new table, or one that grew fast)
    it picks sequential scans, and each batch then reads the whole table:
    a run slows down quadratically. Autovacuum analyzes at most once per
    ``autovacuum_naptime`` (a minute by default), while a run can insert
    tens of thousands of receipts in that time. So the store analyzes a
    table itself once its own inserts have grown it by ``_ANALYZE_MIN_ROWS``
    rows, then each time they have doubled it: a few analyses per run, each a
    sampled read of the table.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, float] = {}
        self._added: dict[str, int] = {}

    def baseline(self, table: str, rows: float) -> None:
        with self._lock:
            self._rows[table] = rows
            self._added[table] = 0

    def grown(self, table: str, added: int) -> bool:
        """Count ``added`` rows; True if ``table`` should be analyzed now."""
        with self._lock:
            total = self._added.get(table, 0) + added
            if total < max(_ANALYZE_MIN_ROWS, self._rows.get(table, 0.0)):
                self._added[table] = total
                return False
            self._rows[table] = self._rows.get(table, 0.0) + total
            self._added[table] = 0
            return True


def _analyze_if_grown(sql: _Sql, growth: _Growth, table: str, added: int, conn: _Conn) -> None:
    # After the commit: the write is done whatever happens to this.
    if added > 0 and growth.grown(table, added):
        try:
            conn.execute(f"ANALYZE {sql.s}.{table}")
        except psycopg.Error:
            pass  # statistics are an optimisation; a broken connection is replaced


# -- jobs: each runs on a worker thread, in one transaction ---------------------


def _migrate(sql: _Sql, growth: _Growth, url: str, conn: _Conn) -> None:
    _migrate_schema(sql, url, conn)
    rows = conn.execute(
        "SELECT c.relname, c.reltuples FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%b::text[])",
        (sql.schema, list(_GROWING)),
    ).fetchall()
    for table, tuples in rows:
        growth.baseline(table, max(0.0, tuples))


def _migrate_schema(sql: _Sql, url: str, conn: _Conn) -> None:
    version = _schema_version(sql, conn)
    if version == SCHEMA_VERSION:
        return  # the common case needs no lock and no privilege to create
    lock = int.from_bytes(
        hashlib.blake2b(f"trioplay-migrate:{sql.schema}".encode(), digest_size=8).digest(),
        "big",
        signed=True,
    )
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
        version = _schema_version(sql, conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{url}: open: the database has schema version {version}, newer than"
                f" {SCHEMA_VERSION} which this trioplay understands; upgrade trioplay"
            )
        if version == SCHEMA_VERSION:
            return  # another process migrated while we waited for the lock
        if version == 0:
            exists = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (sql.schema,)
            ).fetchone()
            if exists is None:
                conn.execute(f"CREATE SCHEMA {sql.s}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {sql.s}.schema_version (version integer NOT NULL)"
            )
        for statements in sql.migrations[version:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"DELETE FROM {sql.s}.schema_version")
        conn.execute(f"INSERT INTO {sql.s}.schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))


def _schema_version(sql: _Sql, conn: _Conn) -> int:
    # A query on the catalog, not to_regclass(): after waiting on the advisory
    # lock, the statement's fresh snapshot sees a schema another process just
    # committed, where the catalog cache may not have caught up yet.
    found = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'schema_version'",
        (sql.schema,),
    ).fetchone()
    if found is None:
        return 0
    got = conn.execute(f"SELECT max(version) FROM {sql.s}.schema_version").fetchone()
    return int(got[0]) if got is not None and got[0] is not None else 0


def _claim_many(
    sql: _Sql,
    growth: _Growth,
    requests: list[ClaimRequest],
    owner: str,
    lease_ttl: float,
    now: float,
    conn: _Conn,
) -> list[ClaimOutcome]:
    keys = sorted({request.key for request in requests})
    for attempt in count(1):
        # A plain read first: a batch that claims nothing (replays, keys held
        # by others) takes no lock and writes nothing.
        rows = conn.execute(sql.get_receipts, (keys,), binary=True).fetchall()
        stored = {row[0]: _receipt(row) for row in rows}
        outcomes, claimed = decide_claims(
            requests, stored, owner=owner, lease_ttl=lease_ttl, now=now
        )
        if not claimed:
            return outcomes
        existing = sorted(receipt.key for receipt in claimed if receipt.key in stored)
        try:
            # Pipelined: BEGIN travels with the locking read, the write with COMMIT.
            with conn.pipeline(), conn.transaction():
                if existing:
                    # Lock the receipts to take over and decide again on what they
                    # are now. The other keys keep the answer of the plain read.
                    locked = conn.execute(sql.lock_receipts, (existing,), binary=True).fetchall()
                    stored.update((row[0], _receipt(row)) for row in locked)
                    outcomes, claimed = decide_claims(
                        requests, stored, owner=owner, lease_ttl=lease_ttl, now=now
                    )
                if claimed:
                    columns = [
                        list(column) for column in zip(*map(_receipt_row, claimed), strict=True)
                    ]
                    written = conn.execute(sql.upsert_claimed, (*columns, existing)).fetchall()
                    if len(written) != len(claimed):
                        raise _Contended(
                            f"gave up after {attempt} attempts: new keys kept being claimed"
                            " by concurrent transactions"
                        )
        except (_Contended, psycopg.errors.DeadlockDetected):
            if attempt == _RACE_ATTEMPTS:
                raise
            continue
        _analyze_if_grown(sql, growth, "receipts", len(claimed) - len(existing), conn)
        return outcomes
    raise AssertionError("unreachable")


def _fenced(
    sql: str,
    shared: tuple[Any, ...],
    leases: Sequence[tuple[Any, ...]],
    payloads: Sequence[str] | None,
    renews: bool,
    conn: _Conn,
) -> list[bool]:
    """One fenced UPDATE for a batch of leases; True per item whose lease matched.

    The answers are those of applying the items in order: an item repeating
    an earlier lease gets the earlier one's answer when the write ``renews``
    the lease (a heartbeat), and ``False`` otherwise (the first write settled
    or released the receipt). Only one lease per key can match, so the
    statement never touches a row twice.
    """
    if not leases:
        return []
    first: dict[tuple[Any, ...], int] = {}
    payload_of: dict[tuple[Any, ...], bytes | None] = {}
    for index, lease in enumerate(leases):
        if lease not in first:
            first[lease] = len(first)
            if payloads is not None:
                payload_of[lease] = _b(payloads[index])
    columns: list[list[Any]] = [list(column) for column in zip(*first, strict=True)]
    if payloads is not None:
        columns.append(list(payload_of.values()))
    for attempt in count(1):
        try:
            rows = conn.execute(sql, (*shared, *columns)).fetchall()
            break
        except psycopg.errors.DeadlockDetected:
            if attempt == _RACE_ATTEMPTS:
                raise
    matched = {ordinal - 1 for (ordinal,) in rows}
    seen: set[tuple[Any, ...]] = set()
    answers: list[bool] = []
    for lease in leases:
        answers.append(first[lease] in matched and (renews or lease not in seen))
        seen.add(lease)
    return answers


def _write_rows(
    sql: _Sql, growth: _Growth, run_id: str, dataset: str, rows: list[SheetRow], conn: _Conn
) -> None:
    # A key repeated in one batch keeps its last row (and an upsert may not
    # touch one row twice).
    latest = {row.key: row for row in rows}
    with conn.transaction(), conn.cursor() as cursor:
        with cursor.copy(sql.copy_rows) as copy:
            copy.set_types(["text", "int8", "text", "bytea", "bytea", "int4"])
            for row in latest.values():
                copy.write_row(
                    (
                        row.key,
                        row.position,
                        row.status,
                        row.data_json.encode(),
                        _b(row.error),
                        row.attempt,
                    )
                )
        cursor.execute(sql.upsert_rows, (run_id, dataset))
    _analyze_if_grown(sql, growth, "sheet_rows", len(latest), conn)


def _claim_page(
    sql: _Sql,
    where: tuple[str, str, int],
    now: float,
    decide: Callable[[PageRecord | None], tuple[PageClaim, PageRecord | None]],
    conn: _Conn,
) -> PageClaim:
    with conn.transaction():
        # A page never seen gets a pending row first, so that the row exists
        # to be locked; a pending page is claimed exactly like an absent one.
        conn.execute(sql.new_page, (*where, now))
        row = conn.execute(sql.lock_page, where).fetchone()
        assert row is not None
        answer, claimed = decide(PageRecord(*row))
        if claimed is not None:
            conn.execute(
                sql.claim_page,
                (
                    claimed.status,
                    claimed.lease_id,
                    claimed.lease_expires_at,
                    claimed.owner,
                    claimed.attempt,
                    claimed.failed,
                    claimed.updated_at,
                    *where,
                ),
            )
    return answer


# -- conversions -----------------------------------------------------------------


def _b(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _s(data: bytes | None) -> str | None:
    return bytes(data).decode() if data is not None else None


def _run(row: Sequence[Any]) -> RunRecord:
    run_id, play, input_json, status, attempt, created_at, updated_at, output, error, stats = row
    return RunRecord(
        run_id,
        play,
        bytes(input_json).decode(),
        status,
        attempt,
        created_at,
        updated_at,
        _s(output),
        _s(error),
        _s(stats),
    )


def _receipt(row: Sequence[Any]) -> Receipt:
    (key, operation, name, status, run_id, lease_id, lease_expires_at, owner, attempts) = row[:9]
    result_json, error_json, created_at, updated_at, completed_at = row[9:]
    return Receipt(
        key,
        operation,
        name,
        status,
        run_id,
        lease_id,
        lease_expires_at,
        owner,
        attempts,
        _s(result_json),
        _s(error_json),
        created_at,
        updated_at,
        completed_at,
    )


def _receipt_row(r: Receipt) -> tuple[Any, ...]:
    return (
        r.key,
        r.operation,
        r.name,
        r.status,
        r.run_id,
        r.lease_id,
        r.lease_expires_at,
        r.owner,
        r.attempts,
        _b(r.result_json),
        _b(r.error_json),
        r.created_at,
        r.updated_at,
        r.completed_at,
    )


def _leases(items: Iterable[Lease | Completion | Failure]) -> list[tuple[str, str]]:
    return [(item.key, item.lease_id) for item in items]


def _page_leases(leases: Iterable[PageLease]) -> list[tuple[str, str, int, str]]:
    return [(lease.run_id, lease.dataset, lease.offset, lease.lease_id) for lease in leases]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _display_url(params: dict[str, Any], schema: str) -> str:
    """``postgresql://user@host:port/db`` from libpq parameters, never with a password."""
    user = params.get("user")
    host = params.get("host") or params.get("hostaddr") or ""
    port = params.get("port")
    netloc = quote(str(host), safe=",:[]")
    if port:
        netloc += f":{port}"
    if user:
        netloc = f"{quote(str(user), safe='')}@{netloc}"
    url = f"postgresql://{netloc}/{quote(str(params.get('dbname') or ''), safe='')}"
    if schema != DEFAULT_SCHEMA:
        url += f"?schema={schema}"
    return url


__all__ = ["DEFAULT_POOL_SIZE", "DEFAULT_SCHEMA", "SCHEMA_VERSION", "PostgresStore"]
