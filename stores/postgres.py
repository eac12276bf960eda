"""``postgresql://...``: the store that lets several processes share one run.

PostgreSQL is the coordination engine for cooperative execution (DESIGN §5):
receipts and dataset pages are leased in it, and fenced writes make a
zombie's late write a no-op. The decisions themselves are the pure functions
of :mod:`trioplay.stores._rules` (``decide_claims``, ``decide_page``), applied
here to rows locked with ``SELECT ... FOR UPDATE``, so every store answers the
same way.

Every call is one job, a function of a connection, run on a small pool of
threads that each own a connection: :mod:`trioplay.stores._pg_bridge` says
why this bridge, and what cancellation and a lost connection do. The
statements are in :mod:`trioplay.stores._pg_sql`, the jobs (one per store
operation, named after it) in :mod:`trioplay.stores._pg_jobs`; the class
hands each operation to its job.

Lookups are by key, and PostgreSQL plans them well only with fresh table
statistics; a run fills its tables faster than autovacuum analyzes them, so
the store runs ``ANALYZE`` on a table each time its own inserts have doubled
it (see ``Growth``).

Payload columns (JSON text the engine hands over) are stored as ``bytea``
holding UTF-8: PostgreSQL ``text`` cannot hold the NUL character, and stores
must hand payloads back exactly as given.
"""

from __future__ import annotations

import math
import os
import re
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import psycopg
import psycopg.conninfo
import trio

from trioplay import StoreError

from . import _pg_jobs as jobs
from ._bridge import one_line
from ._confirm import reclaim, settle
from ._pg_bridge import (
    Abandoned,
    Closed,
    Commit,
    ConnectionLost,
    NoAnswer,
    Pool,
    SetupFailed,
    Unreachable,
    Worker,
    connect,
)
from ._pg_jobs import Contended, Growth
from ._pg_sql import CREATE_INCOMING, SCHEMA_VERSION, Sql
from ._rules import decide_claims, decide_page
from ._sql_store import SqlStore

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import trioplay as tp

    from ._pg_bridge import Conn
    from ._rules import Begin
    from ._terms import End, Page, PageTerms, Query

T = TypeVar("T")

DEFAULT_SCHEMA = "trioplay"
DEFAULT_POOL_SIZE = 4
DEFAULT_CALL_TIMEOUT = 60.0
DEFAULT_STATEMENT_TIMEOUT = 30.0
DEFAULT_CANCEL_TIMEOUT = 0.25

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Connection defaults, used unless the URL (or libpq's environment) says otherwise.
_CONNECT_DEFAULTS = {
    "connect_timeout": ("10", "PGCONNECT_TIMEOUT"),
    "application_name": ("trioplay", "PGAPPNAME"),
    # Notice a peer that vanished (no FIN, no RST) in about a minute, not
    # hours: probes after 30 s idle, and 30 s for sent data to be acknowledged.
    "keepalives_idle": ("30", None),
    "keepalives_interval": ("10", None),
    "keepalives_count": ("3", None),
    "tcp_user_timeout": ("30000", None),
}
# The store's own options, besides libpq's, that a URL may carry: name -> type.
_URL_OPTIONS: dict[str, type] = {
    "schema": str,
    "pool_size": int,
    "call_timeout": float,
    "statement_timeout": float,
    "cancel_timeout": float,
}


class PostgresStore(SqlStore[Pool]):
    """A :class:`trioplay.Store` in a PostgreSQL schema, shared by any number of processes.

    Build it with :meth:`from_url` (``postgresql://user:secret@host:5432/db``,
    optionally with the store's options as query parameters:
    ``?schema=name&pool_size=N&call_timeout=S&statement_timeout=S&cancel_timeout=S``;
    every other parameter goes to libpq) or from a libpq connection string
    and the same options as keywords. :meth:`open` creates
    the schema (default ``trioplay``) and its tables, or migrates them, under
    an advisory lock so that processes starting together do not race, and
    refuses with :class:`trioplay.StoreError` a schema written by a newer
    trioplay. A role that may not create anything can use a schema migrated
    beforehand.

    Every call is one job on one of ``pool_size`` connections, each owned by
    its own thread; every batch call is one transaction. See
    :mod:`trioplay.stores._pg_bridge` for what cancellation does (in short: a call blocked on the
    server is cancelled on the server and returns within ``cancel_timeout``)
    and for what a lost connection does (a ``StoreError`` naming the
    operation; the next call reconnects). Errors name the store by
    :attr:`url`, which never shows the password.

    Deadlines (seconds; ``docs/durability.md`` says what each one bounds):

    - ``call_timeout`` (60): the longest one call may take, from the moment
      it is made (waiting for a free connection, connecting, every statement
      and the commit). Kept on the Trio side, so it holds even when the
      network is silent; the call then fails with a :class:`trioplay.StoreError`
      saying ``no answer``, and its connection is discarded.
    - ``statement_timeout`` (30): PostgreSQL's own, per statement, sent as a
      connection option (``0`` turns it off). When the connection string's
      ``options`` already set ``statement_timeout``, that one is kept unless
      this keyword is given.
    - ``cancel_timeout`` (0.25): how long a cancelled call waits for the server
      to confirm the cancel before its connection is abandoned.
    - libpq's, in the connection string: ``connect_timeout`` (10),
      ``keepalives_idle`` / ``keepalives_interval`` / ``keepalives_count``
      (30 / 10 / 3) and ``tcp_user_timeout`` (30000 ms), which notice a peer
      that vanished from the network.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_size: int = DEFAULT_POOL_SIZE,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        statement_timeout: float | None = None,
        cancel_timeout: float = DEFAULT_CANCEL_TIMEOUT,
    ) -> None:
        _check_options(schema, pool_size, call_timeout, cancel_timeout, statement_timeout)
        params = _connection_params(conninfo, statement_timeout)
        self._params: dict[str, Any] = params
        self._sql = Sql(schema)
        self._schema = schema
        self._pool_size = pool_size
        self._call_timeout = call_timeout
        self._cancel_timeout = cancel_timeout
        self._url = _display_url(params, schema)
        self._growth = Growth()
        self._fresh_claims = True  # the next claim takes its keys for new first (claim_many)

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """The store for ``url``; raises ``ValueError`` if it is not a PostgreSQL URL."""
        conninfo, options = _split_url(url)
        return cls(conninfo, **options)

    @property
    def url(self) -> str:
        return self._url

    @property
    def schema(self) -> str:
        return self._schema

    def _start(self) -> Pool:
        return Pool(self._pool_size, self._new_worker, cancel_timeout=self._cancel_timeout)

    async def _migrate(self) -> None:
        await self._call("open", partial(jobs.migrate, self._sql, self._growth, self.url))

    def _new_worker(self) -> Worker:
        opener = partial(connect, self._params, CREATE_INCOMING)
        return Worker(opener, f"trioplay-postgres {self.url}")

    async def _call(
        self, operation: str, work: Callable[[Conn], T], *, repeatable: bool = False
    ) -> T:
        """Run ``work`` on a pooled connection, and name the store in its errors.

        Marked ``retryable`` (see ``_store_retry``): a failure that did nothing
        (refused, or lost before any commit), and a lost ``repeatable`` call,
        which done twice leaves the store as once would (a heartbeat, the
        upsert, a release or page finish whose answer goes unused) or safe (a
        page claim that took effect finds its own lease held, and waits it out).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        pool = self._bridge_for(operation)
        started = trio.current_time()
        try:
            return await pool.run(work, timeout=self._call_timeout)
        except StoreError:
            raise
        except _CALL_FAULTS as exc:
            error, cause = _call_error(self, operation, exc, started, repeatable)
            raise error from cause

    # -- runs ---------------------------------------------------------------
    async def _begin_attempt(self, begin: Begin) -> tp.RunRecord:
        return await self._call("begin_attempt", partial(jobs.begin_attempt, self._sql, begin))

    async def _wait_job(self, operation: str, *args: Any, read: bool = False) -> Any:
        return await self._call(operation, partial(getattr(jobs, operation), self._sql, *args))

    async def _finish_attempt(
        self, run_id: str, status: tp.RunStatus, attempt: int, end: End
    ) -> bool | None:
        now, *ending = end
        params = (status, float(now), *ending, run_id, attempt)
        finish = partial(jobs.finish_attempt, self._sql, params)
        # Fenced by the attempt, so made again after a lost connection it is the same.
        return await self._call("finish_attempt", finish, repeatable=True)

    async def get_run(self, run_id: str) -> tp.RunRecord | None:
        return await self._call("get_run", partial(jobs.get_run, self._sql, run_id))

    async def list_runs(self, *, limit: int = 50) -> list[tp.RunRecord]:
        return await self._call("list_runs", partial(jobs.list_runs, self._sql, limit))

    # -- receipts -----------------------------------------------------------
    async def claim_many(
        self, requests: Sequence[tp.ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[tp.ClaimOutcome]:
        if not requests:
            await trio.lowlevel.checkpoint()
            return []
        decide = partial(decide_claims, owner=owner, lease_ttl=float(lease_ttl), now=float(now))
        claim = partial(
            jobs.claim_many, self._sql, self._growth, list(requests), decide, self._fresh_claims
        )
        try:
            outcomes, self._fresh_claims = await self._call("claim_many", claim)
        except StoreError as exc:
            if exc.outcome_unknown:
                exc.retryable = True
                exc.retry_with = partial(reclaim, self, requests, owner, lease_ttl, float(now))
            raise
        return outcomes

    async def heartbeat_many(
        self, leases: Sequence[tp.Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        renew = partial(jobs.heartbeat_many, self._sql, leases, float(lease_ttl), float(now))
        return await self._call("heartbeat_many", renew, repeatable=True)

    async def complete_many(self, items: Sequence[tp.Completion], *, now: float) -> list[bool]:
        complete = partial(
            self._call, "complete_many", partial(jobs.complete_many, self._sql, items, float(now))
        )
        return await settle(complete, self.get_many, items, "completed")

    async def fail_many(self, items: Sequence[tp.Failure], *, now: float) -> list[bool]:
        fail = partial(
            self._call, "fail_many", partial(jobs.fail_many, self._sql, items, float(now))
        )
        return await settle(fail, self.get_many, items, "failed")

    async def release_many(self, leases: Sequence[tp.Lease], *, now: float) -> list[bool]:
        release = partial(jobs.release_many, self._sql, leases, float(now))
        return await self._call("release_many", release, repeatable=True)

    async def get_many(self, keys: Sequence[str]) -> list[tp.Receipt | None]:
        if not keys:
            await trio.lowlevel.checkpoint()
            return []
        unique = list(dict.fromkeys(keys))
        found = await self._call("get_many", partial(jobs.get_many, self._sql, unique))
        return [found.get(key) for key in keys]

    async def count_receipts(self, run_id: str) -> dict[str, int]:
        return await self._call("count_receipts", partial(jobs.count_receipts, self._sql, run_id))

    # -- recorded failures (FailureStore) ------------------------------------
    async def list_failed_receipts(
        self, run_id: str, *, after_key: str = "", limit: int = 1000
    ) -> list[tp.Receipt]:
        listed = partial(jobs.list_failed_receipts, self._sql, run_id, after_key, limit)
        return await self._call("list_failed_receipts", listed)

    async def forget_failed_receipts(
        self, run_id: str, keys: Sequence[str], *, now: float
    ) -> list[str]:
        unique = list(dict.fromkeys(keys))
        forget = partial(jobs.forget_failed_receipts, self._sql, run_id, unique, float(now))
        return await self._call("forget_failed_receipts", forget)

    # -- dataset sheets -----------------------------------------------------
    async def write_terminal_rows(
        self,
        run_id: str,
        dataset: str,
        rows: Sequence[tp.SheetRow],
        *,
        leases: Sequence[tp.PageLease | None] = (),
    ) -> list[tp.SheetWrite]:
        if not rows:
            await trio.lowlevel.checkpoint()
            return []
        write = partial(
            jobs.write_terminal_rows, self._sql, self._growth, run_id, dataset, list(rows), leases
        )
        # An upsert of the same rows under the same leases: made twice, the sheet is the same.
        return await self._call("write_terminal_rows", write, repeatable=True)

    async def sheet_status(
        self, run_id: str, dataset: str, keys: Sequence[str]
    ) -> dict[str, tp.SheetEntry]:
        if not keys:
            await trio.lowlevel.checkpoint()
            return {}
        unique = list(dict.fromkeys(keys))
        status = partial(jobs.sheet_status, self._sql, run_id, dataset, unique)
        return await self._call("sheet_status", status)

    async def _read_rows(self, run_id: str, dataset: str, query: Query) -> list[tp.SheetRow]:
        status, after_position, limit = query
        if limit <= 0:
            await trio.lowlevel.checkpoint()
            return []
        read = partial(jobs.read_rows, self._sql, run_id, dataset, status, after_position, limit)
        return await self._call("read_rows", read)

    async def count_rows(self, run_id: str, dataset: str) -> dict[str, int]:
        return await self._call("count_rows", partial(jobs.count_rows, self._sql, run_id, dataset))

    async def list_datasets(self, run_id: str) -> list[str]:
        return await self._call("list_datasets", partial(jobs.list_datasets, self._sql, run_id))

    async def run_leases(self, run_ids: Sequence[str]) -> dict[str, tp.RunLeases]:
        if not run_ids:
            await trio.lowlevel.checkpoint()
            return {}
        leases = partial(jobs.run_leases, self._sql, list(run_ids))
        return await self._call("run_leases", leases)

    # -- page leases --------------------------------------------------------
    async def _claim_page(self, page: Page, terms: PageTerms) -> tp.PageClaim:
        # Floats, as the columns are: psycopg sends an int as an integer.
        terms["lease_ttl"] = float(terms["lease_ttl"])
        terms["now"] = now = float(terms["now"])
        decide = partial(decide_page, **terms)
        claim = partial(jobs.claim_page, self._sql, page, now, decide)
        return await self._call("claim_page", claim, repeatable=True)

    async def heartbeat_pages(
        self, leases: Sequence[tp.PageLease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        renew = partial(jobs.heartbeat_pages, self._sql, leases, float(lease_ttl), float(now))
        return await self._call("heartbeat_pages", renew, repeatable=True)

    async def finish_page(
        self, lease: tp.PageLease, *, attempt: int, failed: int, now: float
    ) -> bool:
        finish = partial(jobs.finish_page, self._sql, lease, attempt, failed, float(now))
        return await self._call("finish_page", finish, repeatable=True)

    async def release_page(self, lease: tp.PageLease, *, now: float) -> bool:
        release = partial(jobs.release_page, self._sql, lease, float(now))
        return await self._call("release_page", release, repeatable=True)


def _call_error(
    store: PostgresStore, operation: str, exc: Exception, started: float, repeatable: bool
) -> tuple[StoreError, BaseException | None]:
    """The :class:`StoreError` of a call that failed with ``exc``, and its cause."""
    url = store.url
    if isinstance(exc, Closed):
        return StoreError(f"{url}: {operation}: the store is not open"), None
    if isinstance(exc, NoAnswer):
        fault = f"no answer from the database within {store._call_timeout:g}s (call_timeout)"
        if exc.stage == "queued":
            fault += f": all {store._pool_size} connections stayed busy"
        elif exc.stage == "connecting":
            fault += ": its connection did not open"
        else:
            fault += ", the connection was discarded"
        return _error(url, operation, fault, started, exc.commit), None
    if isinstance(exc, Unreachable):
        fault = f"cannot connect: {exc}"
        return _error(url, operation, fault, started, retryable=True), exc.cause
    if isinstance(exc, ConnectionLost):
        again = repeatable or exc.commit is None
        fault = f"connection lost: {exc}"
        return _error(url, operation, fault, started, exc.commit, retryable=again), exc.cause
    if isinstance(exc, SetupFailed):
        fault = f"connected, but setting the connection up failed: {exc}"
        return _error(url, operation, fault, started), exc.cause
    return _error(url, operation, one_line(exc), started), exc


# What a pooled call may fail with, besides a StoreError of its own.
_CALL_FAULTS = (
    Closed,
    NoAnswer,
    Unreachable,
    ConnectionLost,
    SetupFailed,
    psycopg.Error,
    UnicodeError,
    Contended,
    Abandoned,
)


def _error(
    url: str,
    operation: str,
    fault: str,
    started: float,
    commit: Commit = None,
    *,
    retryable: bool = False,
) -> StoreError:
    """The error of a failed call: the store, the operation, what went wrong, and when."""
    elapsed = trio.current_time() - started
    unknown = commit == "sent"
    if unknown:
        fault += (
            "; the COMMIT was sent but never confirmed, so whether it took effect is"
            " unknown (rows and receipts it wrote count only once a rerun finds them)"
        )
    elif commit == "done":
        fault += "; it had committed, but its answer never came back"
    return StoreError(
        f"{url}: {operation}: {fault} (after {elapsed:.2f}s)",
        store=url,
        operation=operation,
        elapsed=elapsed,
        outcome_unknown=unknown,
        retryable=retryable,
    )


def _check_options(
    schema: str,
    pool_size: int,
    call_timeout: float,
    cancel_timeout: float,
    statement_timeout: float | None,
) -> None:
    """Refuse, with ``ValueError``, options the store cannot work with."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"bad PostgreSQL schema name {schema!r}: use letters, digits and _"
            " (at most 63, not starting with a digit)"
        )
    if pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {pool_size}")
    for option, seconds, zero in (
        ("call_timeout", call_timeout, False),
        ("cancel_timeout", cancel_timeout, False),
        ("statement_timeout", statement_timeout, True),
    ):
        if seconds is not None and not (
            math.isfinite(seconds) and (seconds > 0 or (zero and seconds == 0))
        ):
            accepted = "finite seconds of at least 0" if zero else "finite seconds above 0"
            raise ValueError(f"{option} must be {accepted}, got {seconds!r}")


def _connection_params(conninfo: str, statement_timeout: float | None) -> dict[str, Any]:
    """libpq's parameters: the connection string's, the store's defaults, the timeout."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        # The message of libpq names the fault, never the password.
        raise ValueError(f"bad PostgreSQL connection string: {exc}") from None
    for name, (value, env) in _CONNECT_DEFAULTS.items():
        if name not in params and (env is None or env not in os.environ):
            params[name] = value
    _set_statement_timeout(params, statement_timeout)
    return params


def _split_url(url: str) -> tuple[str, dict[str, Any]]:
    """A store URL as libpq's connection string and the store's own options."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("bad PostgreSQL store URL: use postgresql://user@host:port/db")
    options: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        kind = _URL_OPTIONS.get(name)
        if kind is None:
            rest.append((name, value))
            continue
        try:
            options[name] = kind(value)
        except ValueError:
            raise ValueError(f"bad {name} {value!r} in a PostgreSQL URL") from None
    # Rebuilt by hand: urlunsplit drops the "//" of an empty host (a local socket).
    query = urlencode(rest)
    conninfo = f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
    return conninfo, options


def _set_statement_timeout(params: dict[str, Any], seconds: float | None) -> None:
    """Add ``-c statement_timeout`` to libpq's ``options`` (which default to PGOPTIONS)."""
    options = str(params.get("options", os.environ.get("PGOPTIONS", "")))
    if seconds is None:
        if "statement_timeout" in options:
            return  # the connection string set its own
        seconds = DEFAULT_STATEMENT_TIMEOUT
    setting = f"-c statement_timeout={round(seconds * 1000)}"
    params["options"] = f"{options} {setting}".strip()


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


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CANCEL_TIMEOUT",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SCHEMA",
    "DEFAULT_STATEMENT_TIMEOUT",
    "SCHEMA_VERSION",
    "PostgresStore",
]
