"""The PostgreSQL store's jobs: functions of a connection, run on a worker thread.

A job is named after the store operation it does and takes the statements
(:class:`trioplay.stores._pg_sql.Sql`), that operation's arguments, then the
connection; :class:`trioplay.stores.postgres.PostgresStore` hands it to a
worker of its pool (:mod:`trioplay.stores._pg_bridge`). Also here: the schema
migration, when to refresh the planner's statistics (:class:`Growth`), and
the mapping between records and rows (payloads travel as ``bytea``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from itertools import count
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.errors

from trioplay import (
    EventRecord,
    Receipt,
    RunRecord,
    SheetEntry,
    SheetRow,
    StoreError,
    UnknownRun,
    WaitRecord,
)

from ._columns import event_values, page_values, receipt_values, wait_values
from ._pg_bridge import commit_point, committed, transaction
from ._pg_sql import SCHEMA_VERSION
from ._rules import (
    Begin,
    PageRecord,
    Slot,
    address,
    decide_attempt,
    decide_cancel,
    decide_register,
    decide_send,
    decide_sheet_writes,
    decide_timeouts,
    failed_keys,
    fenced_pages,
    page_key,
    renewed,
    run_leases_of,
    slot_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    import trioplay as tp
    from trioplay import SendRequest, SendResult, WaitRequest

    from ._pg_bridge import Conn
    from ._pg_sql import Sql

    # decide_claims with the claim's owner, lease_ttl and now.
    DecideClaims = Callable[
        [Sequence[tp.ClaimRequest], Mapping[str, Receipt]],
        tuple[list[tp.ClaimOutcome], list[Receipt]],
    ]

# A claim that loses a race for a new key (another process inserted it after
# our snapshot), or a deadlock between two batches, is retried whole.
_RACE_ATTEMPTS = 5
# See Growth: a table this store fills is analyzed once it has grown by this
# many rows, then each time it has doubled.
_ANALYZE_MIN_ROWS = 1000


class Contended(Exception):
    """A claim kept losing races for new keys to concurrent claimers."""


# -- planner statistics -----------------------------------------------------------

_GROWING = ("receipts", "sheet_rows")


class Growth:
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


def _analyze_if_grown(sql: Sql, growth: Growth, table: str, added: int, conn: Conn) -> None:
    # After the commit: the write is done whatever happens to this.
    if added > 0 and growth.grown(table, added):
        try:
            conn.execute(f"ANALYZE {sql.s}.{table}")
        except psycopg.Error:
            pass  # statistics are an optimisation; a broken connection is replaced


# -- jobs: each runs on a worker thread, in one transaction ---------------------


def migrate(sql: Sql, growth: Growth, url: str, conn: Conn) -> None:
    _migrate_schema(sql, url, conn)
    rows = conn.execute(
        "SELECT c.relname, c.reltuples FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%b::text[])",
        (sql.schema, list(_GROWING)),
    ).fetchall()
    for table, tuples in rows:
        growth.baseline(table, max(0.0, tuples))


def _migrate_schema(sql: Sql, url: str, conn: Conn) -> None:
    version = _schema_version(sql, conn)
    if version == SCHEMA_VERSION:
        return  # the common case needs no lock and no privilege to create
    lock = int.from_bytes(
        hashlib.blake2b(f"trioplay-migrate:{sql.schema}".encode(), digest_size=8).digest(),
        "big",
        signed=True,
    )
    with transaction(conn):
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


def _schema_version(sql: Sql, conn: Conn) -> int:
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


def claim_many(
    sql: Sql,
    growth: Growth,
    requests: list[tp.ClaimRequest],
    decide: DecideClaims,
    fresh: bool,
    conn: Conn,
) -> tuple[list[tp.ClaimOutcome], bool]:
    """Claim ``requests``, each key atomically; also answers whether the next batch tries
    ``fresh``.

    With ``fresh`` (and no key repeated), the batch first takes every key
    for new: :func:`decide_claims` claims a key with no receipt whatever the
    request says, so one ``INSERT ... ON CONFLICT DO NOTHING`` in autocommit
    writes exactly those claims, in one round trip, with no read, no
    transaction and no pipeline (for 8 new keys, half the client CPU, wall
    time and server CPU of the general way: docs/benchmarks.md, "PostgreSQL
    claims"). The keys it skipped have a receipt; they take the general way
    (:func:`_claim_stored`), and so does every following batch, sparing it
    an insert bound to fail, until a batch finds none of its keys stored. A
    claim is atomic per key, never per batch, so keeping the new keys'
    claims while the others are decided is what a claim is.
    """
    if fresh and len({request.key for request in requests}) == len(requests):
        outcomes, claimed = decide(requests, {})
        commit_point()  # one INSERT in autocommit mode: it commits as it runs
        rows = conn.execute(sql.insert_new, (_receipt_rows(claimed),)).fetchall()
        inserted = {key for (key,) in rows}
        committed()
        _analyze_if_grown(sql, growth, "receipts", len(inserted), conn)
        if len(inserted) == len(requests):
            return outcomes, True
        stored = [request for request in requests if request.key not in inserted]
        decided = iter(_claim_stored(sql, growth, stored, decide, conn)[0])
        merged = [
            outcome if request.key in inserted else next(decided)
            for request, outcome in zip(requests, outcomes, strict=True)
        ]
        return merged, False
    outcomes, found = _claim_stored(sql, growth, requests, decide, conn)
    return outcomes, not found


def _claim_stored(
    sql: Sql,
    growth: Growth,
    requests: list[tp.ClaimRequest],
    decide: DecideClaims,
    conn: Conn,
) -> tuple[list[tp.ClaimOutcome], bool]:
    """The general way of a claim: read, decide, lock and upsert; and whether any key was
    stored."""
    keys = sorted({request.key for request in requests})
    for attempt in count(1):
        # A plain read first: a batch that claims nothing (replays, keys held
        # by others) takes no lock and writes nothing.
        rows = conn.execute(sql.get_receipts, (keys,), binary=True).fetchall()
        stored = {row[0]: receipt(row) for row in rows}
        outcomes, claimed = decide(requests, stored)
        if not claimed:
            return outcomes, bool(stored)
        existing = sorted(receipt.key for receipt in claimed if receipt.key in stored)
        try:
            # Pipelined: BEGIN travels with the locking read, the write with COMMIT.
            with conn.pipeline(), transaction(conn):
                if existing:
                    # Lock the receipts to take over and decide again on what they
                    # are now. The other keys keep the answer of the plain read.
                    locked = conn.execute(sql.lock_receipts, (existing,), binary=True).fetchall()
                    stored.update((row[0], receipt(row)) for row in locked)
                    outcomes, claimed = decide(requests, stored)
                if claimed:
                    params = (_receipt_rows(claimed), existing)
                    written = conn.execute(sql.upsert_claimed, params).fetchall()
                    if len(written) != len(claimed):
                        raise Contended(
                            f"gave up after {attempt} attempts: new keys kept being claimed"
                            " by concurrent transactions"
                        )
        except (Contended, psycopg.errors.DeadlockDetected):
            if attempt == _RACE_ATTEMPTS:
                raise
            continue
        committed()  # the pipeline's sync confirmed the COMMIT
        _analyze_if_grown(sql, growth, "receipts", len(claimed) - len(existing), conn)
        return outcomes, bool(stored)
    raise AssertionError("unreachable")


def _fenced(
    sql: str,
    shared: tuple[Any, ...],
    leases: Sequence[tuple[Any, ...]],
    payloads: Sequence[str] | None,
    renews: bool,
    conn: Conn,
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
            commit_point()  # one UPDATE in autocommit mode: it commits as it runs
            rows = conn.execute(sql, (*shared, *columns)).fetchall()
            committed()
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


def write_terminal_rows(
    sql: Sql,
    growth: Growth,
    run_id: str,
    dataset: str,
    rows: list[SheetRow],
    leases: Sequence[tp.PageLease | None],
    conn: Conn,
) -> list[tp.SheetWrite]:
    """Write the rows :func:`decide_sheet_writes` lets through, in one transaction."""
    with transaction(conn), conn.cursor() as cursor:
        offsets = fenced_pages(leases)
        current: dict[int, str | None] = {}
        if offsets:
            locked = cursor.execute(sql.lock_page_leases, (run_id, dataset, offsets))
            current = dict(locked.fetchall())
        completed: list[str] = []
        if failed := failed_keys(rows):
            found = cursor.execute(sql.completed_keys, (run_id, dataset, failed))
            completed = [key for (key,) in found.fetchall()]
        answers = decide_sheet_writes(rows, leases, current, completed)
        # A key repeated in one batch keeps its last row (and an upsert may not
        # touch one row twice).
        latest = {
            row.key: row for row, answer in zip(rows, answers, strict=True) if answer == "written"
        }
        if not latest:
            return answers
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
    return answers


def claim_page(
    sql: Sql,
    where: tuple[str, str, int],
    now: float,
    decide: Callable[[PageRecord | None], tuple[tp.PageClaim, PageRecord | None]],
    conn: Conn,
) -> tp.PageClaim:
    with transaction(conn):
        # A page never seen gets a pending row first, so that the row exists
        # to be locked; a pending page is claimed exactly like an absent one.
        conn.execute(sql.new_page, (*where, now))
        row = conn.execute(sql.lock_page, where).fetchone()
        assert row is not None
        answer, claimed = decide(PageRecord(*row))
        if claimed is not None:
            conn.execute(
                sql.claim_page,
                (*page_values(claimed), *where),
            )
    return answer


# -- runs ------------------------------------------------------------------------


def begin_attempt(sql: Sql, begin: Begin, conn: Conn) -> tp.RunRecord:
    run_id, play, input_json, now, play_ref, parent_run_id = begin
    with transaction(conn):
        parent = get_run(sql, parent_run_id, conn) if parent_run_id is not None else None
        # What a new run would be (its root and depth); an existing one keeps its own.
        new, _ = decide_attempt(None, parent, begin)
        values = (run_id, play, input_json.encode(), now, now, parent_run_id, new.root_run_id)
        row = conn.execute(
            sql.begin_attempt, (*values, new.depth, play_ref), binary=True
        ).fetchone()
        if row is None:  # another play or input, or cancelled: left as it is for the caller
            row = conn.execute(sql.get_run, (run_id,)).fetchone()
    assert row is not None
    return run_record(row)


def finish_attempt(sql: Sql, params: tuple[Any, ...], conn: Conn) -> bool | None:
    """Whether the attempt's end was written (``False``: a later attempt holds the run;
    ``None``: no such run); ``params`` as :meth:`Sql.finish_attempt` takes them."""
    status, now, output_json, error, stats_json, run_id, attempt = params
    values = (status, now, _b(output_json), _b(error), _b(stats_json), run_id, attempt)
    commit_point()  # autocommit: the statement commits as it runs
    if conn.execute(sql.finish_attempt, values).rowcount == 1:
        return True
    # Not written: a later attempt holds the run, or there is no such run.
    return False if conn.execute(sql.run_exists, (run_id,)).fetchone() is not None else None


def get_run(sql: Sql, run_id: str, conn: Conn) -> RunRecord | None:
    row = conn.execute(sql.get_run, (run_id,), binary=True).fetchone()
    return run_record(row) if row is not None else None


def list_runs(sql: Sql, limit: int, conn: Conn) -> list[RunRecord]:
    rows = conn.execute(sql.list_runs, (limit,), binary=True).fetchall()
    return [run_record(row) for row in rows]


# -- receipts: the fenced writes and the reads -------------------------------------


def heartbeat_many(
    sql: Sql, leases: Sequence[tp.Lease], lease_ttl: float, now: float, conn: Conn
) -> list[float | None]:
    expires = now + lease_ttl
    return renewed(expires, _fenced(sql.heartbeat, (expires, now), _keys(leases), None, True, conn))


def complete_many(sql: Sql, items: Sequence[tp.Completion], now: float, conn: Conn) -> list[bool]:
    results = [item.result_json for item in items]
    return _fenced(sql.complete, (now, now), _keys(items), results, False, conn)


def fail_many(sql: Sql, items: Sequence[tp.Failure], now: float, conn: Conn) -> list[bool]:
    errors = [item.error_json for item in items]
    return _fenced(sql.fail, (now, now), _keys(items), errors, False, conn)


def release_many(sql: Sql, leases: Sequence[tp.Lease], now: float, conn: Conn) -> list[bool]:
    return _fenced(sql.release, (now,), _keys(leases), None, False, conn)


def get_many(sql: Sql, keys: list[str], conn: Conn) -> dict[str, Receipt]:
    rows = conn.execute(sql.get_receipts, (keys,), binary=True).fetchall()
    return {row[0]: receipt(row) for row in rows}


def count_receipts(sql: Sql, run_id: str, conn: Conn) -> dict[str, int]:
    return dict(conn.execute(sql.count_receipts, (run_id,)).fetchall())


def list_failed_receipts(
    sql: Sql, run_id: str, after_key: str, limit: int, conn: Conn
) -> list[Receipt]:
    rows = conn.execute(sql.failed_receipts, (run_id, after_key, limit), binary=True).fetchall()
    return [receipt(row) for row in rows]


def forget_failed_receipts(
    sql: Sql, run_id: str, keys: list[str], now: float, conn: Conn
) -> list[str]:
    commit_point()  # one UPDATE in autocommit mode: it commits as it runs
    rows = conn.execute(sql.forget_failed, (now, keys, run_id)).fetchall()
    forgotten = {row[0] for row in rows}
    return [key for key in keys if key in forgotten]


# -- dataset sheets: the reads (the write is write_terminal_rows) -------------------


def sheet_status(
    sql: Sql, run_id: str, dataset: str, keys: list[str], conn: Conn
) -> dict[str, SheetEntry]:
    rows = conn.execute(sql.sheet_status, (run_id, dataset, keys)).fetchall()
    return {key: SheetEntry(status, attempt) for key, status, attempt in rows}


def read_rows(
    sql: Sql,
    run_id: str,
    dataset: str,
    status: tp.RowStatus | None,
    after_position: int,
    limit: int,
    conn: Conn,
) -> list[SheetRow]:
    if status is None:
        rows = conn.execute(sql.read_rows, (run_id, dataset, after_position, limit), binary=True)
    else:
        params = (run_id, dataset, after_position, status, limit)
        rows = conn.execute(sql.read_rows_by_status, params, binary=True)
    return [
        SheetRow(key, position, status, data.decode(), _s(error), attempt)
        for key, position, status, data, error, attempt in rows.fetchall()
    ]


def count_rows(sql: Sql, run_id: str, dataset: str, conn: Conn) -> dict[str, int]:
    return dict(conn.execute(sql.count_rows, (run_id, dataset)).fetchall())


def list_datasets(sql: Sql, run_id: str, conn: Conn) -> list[str]:
    rows = conn.execute(sql.list_datasets, (run_id,)).fetchall()
    return [dataset for (dataset,) in rows]


def run_leases(sql: Sql, run_ids: list[str], conn: Conn) -> dict[str, tp.RunLeases]:
    rows = conn.execute(sql.run_leases, (run_ids, run_ids)).fetchall()
    return {run_id: run_leases_of([(expires, renewed)]) for run_id, expires, renewed in rows}


# -- page leases: the fenced writes (the claim is claim_page) -----------------------


def heartbeat_pages(
    sql: Sql, leases: Sequence[tp.PageLease], lease_ttl: float, now: float, conn: Conn
) -> list[float | None]:
    expires = now + lease_ttl
    keys = [page_key(lease) for lease in leases]
    return renewed(expires, _fenced(sql.heartbeat_pages, (expires, now), keys, None, True, conn))


def finish_page(
    sql: Sql, lease: tp.PageLease, attempt: int, failed: int, now: float, conn: Conn
) -> bool:
    shared = (attempt, failed, now)
    [finished] = _fenced(sql.finish_page, shared, [page_key(lease)], None, False, conn)
    return finished


def release_page(sql: Sql, lease: tp.PageLease, now: float, conn: Conn) -> bool:
    [released] = _fenced(sql.release_page, (now,), [page_key(lease)], None, False, conn)
    return released


# -- conversions -----------------------------------------------------------------


def _b(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _s(data: bytes | None) -> str | None:
    return bytes(data).decode() if data is not None else None


def run_record(row: Sequence[Any]) -> RunRecord:
    run_id, play, input_json, status, attempt, created_at, updated_at = row[:7]
    output, error, stats, parent_run_id, root_run_id, depth, play_ref = row[7:]
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
        parent_run_id,
        root_run_id,
        depth,
        play_ref,
    )


def receipt(row: Sequence[Any]) -> Receipt:
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


def _receipt_rows(receipts: Iterable[Receipt]) -> str:
    """``receipts`` as one ``jsonb`` parameter, an array of their columns (see ``_json_rows``)."""
    return json.dumps(list(map(receipt_values, receipts)))


def _keys(items: Iterable[tp.Lease | tp.Completion | tp.Failure]) -> list[tuple[str, str]]:
    return [(item.key, item.lease_id) for item in items]


# -- waits and events ----------------------------------------------------------------
# A sender and a registrar of one (run, name, key) meet under a transaction-scoped
# advisory lock on a hash of it, which exists before either row does. Every such
# transaction first takes its runs' locks, in run id order: shared for a few slots,
# exclusive for a batch of many (so a transaction holds at most _MAX_SLOT_LOCKS + its
# runs' locks, far below max_locks_per_transaction), then the slot locks in key order.
# cancel_run takes its run's lock exclusive.

_MAX_SLOT_LOCKS = 64

race_hook: Callable[[str], None] | None = None
"""A test seam: called (on the worker thread) at ``"send:lock"``, before a send
takes its locks, and at ``"register:read"``, after a registration has read
the buffered events and before it writes. ``tests/test_wait_race.py`` uses it
to force the interleaving that loses an event without the lock."""

_TAKE_LOCKS = """
    SELECT count({}(k)) FROM (SELECT k FROM unnest(%b::int8[]) WITH ORDINALITY AS u(k, i)
    ORDER BY i) AS ordered
"""
_SHARED = _TAKE_LOCKS.format("pg_advisory_xact_lock_shared")
_EXCLUSIVE = _TAKE_LOCKS.format("pg_advisory_xact_lock")


def _lock_key(kind: bytes, *parts: str) -> int:
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8, person=kind).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_slots(slots: Iterable[Slot], conn: Conn) -> None:
    """Take the locks of ``slots`` (and their runs) for the rest of the transaction."""
    wanted = set(slots)
    runs = [_lock_key(b"trioplay-run", run) for run in sorted({slot[0] for slot in wanted})]
    if len(wanted) > _MAX_SLOT_LOCKS:
        conn.execute(_EXCLUSIVE, (runs,))
        return
    conn.execute(_SHARED, (runs,))
    conn.execute(_EXCLUSIVE, (sorted(_lock_key(b"trioplay-slot", *slot) for slot in wanted),))


def lock_run(run_id: str, conn: Conn) -> None:
    conn.execute(_EXCLUSIVE, ([_lock_key(b"trioplay-run", run_id)],))


def wait_record(row: Sequence[Any]) -> WaitRecord:
    wait_key, run_id, dataset, row_key, name, key_json, token, deadline = row[:8]
    status, created_at, settled_at, payload_json, reason, event_id = row[8:]
    return WaitRecord(
        wait_key,
        run_id,
        dataset,
        row_key,
        name,
        key_json,
        token,
        deadline,
        status,
        created_at,
        settled_at,
        _s(payload_json),
        _s(reason),
        event_id,
    )


def event_record(row: Sequence[Any]) -> EventRecord:
    event_id, run_id, name, key_json, payload_json, reject, sent_at, consumed_by = row
    return EventRecord(
        event_id, run_id, name, key_json, _s(payload_json), _s(reject), sent_at, consumed_by
    )


def _settle(sql: Sql, waits: Sequence[WaitRecord], conn: Conn) -> int:
    if not waits:
        return 0
    columns = [
        [w.wait_key for w in waits],
        [w.status for w in waits],
        [w.settled_at for w in waits],
        [_b(w.payload_json) for w in waits],
        [_b(w.reason) for w in waits],
        [w.event_id for w in waits],
    ]
    return conn.execute(sql.settle_waits, columns).rowcount


def _read_waits(sql: Sql, keys: Sequence[str], conn: Conn) -> dict[str, WaitRecord]:
    rows = conn.execute(sql.get_waits, (list(dict.fromkeys(keys)),), binary=True).fetchall()
    return {row[0]: wait_record(row) for row in rows}


def register_waits(
    sql: Sql, requests: Sequence[WaitRequest], now: float, conn: Conn
) -> list[WaitRecord]:
    with transaction(conn):
        lock_slots((slot_of(r) for r in requests), conn)
        stored = _read_waits(sql, [r.wait_key for r in requests], conn)
        fresh = [r for r in requests if r.wait_key not in stored]
        buffered: list[EventRecord] = []
        if fresh:
            slots = {slot_of(r) for r in fresh}
            runs = sorted({r.run_id for r in fresh})
            rows = conn.execute(sql.unclaimed_events, (runs,), binary=True).fetchall()
            buffered = [e for row in rows if slot_of(e := event_record(row)) in slots]
        if race_hook is not None:
            race_hook("register:read")
        decision = decide_register(requests, stored, buffered, now)
        inserts = decision.inserts
        if inserts:
            columns = [
                list(column) for column in zip(*(_wait_row(w) for w in inserts), strict=True)
            ]
            conn.execute(sql.insert_waits, columns)
        _settle(sql, decision.updates, conn)
        consumed = decision.consumed
        if consumed:
            conn.execute(
                sql.consume_events,
                (
                    [e.run_id for e in consumed],
                    [e.event_id for e in consumed],
                    [e.consumed_by for e in consumed],
                ),
            )
    return decision.records


def _wait_row(wait: WaitRecord) -> tuple[Any, ...]:
    return (*wait_values(wait)[:11], _b(wait.payload_json), _b(wait.reason), wait.event_id)


def poll_waits(sql: Sql, wait_keys: Sequence[str], now: float, conn: Conn) -> dict[str, WaitRecord]:
    found = _read_waits(sql, wait_keys, conn)
    if not decide_timeouts(found.values(), now):
        return found  # nothing to write: no lock, no transaction
    with transaction(conn):
        lock_slots((slot_of(w) for w in found.values()), conn)
        found = _read_waits(sql, wait_keys, conn)
        expired = decide_timeouts(found.values(), now)
        _settle(sql, expired, conn)
    found.update((w.wait_key, w) for w in expired)
    return found


def send_event(sql: Sql, request: SendRequest, now: float, url: str, conn: Conn) -> SendResult:
    # Two senders of one event id to two slots hold different locks: the second
    # insert fails on the primary key; sent again, it finds the first.
    for attempt in range(_RACE_ATTEMPTS):
        try:
            return _send_event(sql, request, now, url, conn)
        except psycopg.errors.UniqueViolation:
            if attempt == _RACE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _run_status(sql: Sql, run_id: str, conn: Conn) -> Any:
    row = conn.execute(sql.run_status, (run_id,)).fetchone()
    return row[0] if row is not None else None


def _send_event(sql: Sql, request: SendRequest, now: float, url: str, conn: Conn) -> SendResult:
    with transaction(conn):
        token_wait = None
        if request.token is not None:
            row = conn.execute(sql.wait_by_token, (request.token,), binary=True).fetchone()
            token_wait = wait_record(row) if row is not None else None
        # A token names its wait for good: the slot is known before the lock.
        request = address(request, _run_status(sql, request.run_id, conn), token_wait, store=url)
        if race_hook is not None:
            race_hook("send:lock")
        lock_slots([slot_of(request)], conn)
        where = (request.run_id, request.event_id)
        stored = conn.execute(sql.event_by_id, where, binary=True).fetchone()
        open_rows = conn.execute(sql.open_waits, slot_of(request), binary=True).fetchall()
        delivery = decide_send(
            request,
            event_record(stored) if stored is not None else None,
            [wait_record(r) for r in open_rows],
            _run_status(sql, request.run_id, conn),
            now,
            store=url,
        )
        event = delivery.event
        if event is not None:
            values = (*event_values(event)[:4], _b(event.payload_json), _b(event.reject))
            conn.execute(sql.insert_event, (*values, event.sent_at, event.consumed_by))
        if delivery.wait is not None and _settle(sql, [delivery.wait], conn) != 1:
            raise AssertionError(f"wait {delivery.wait.wait_key} settled under its lock")
    return delivery.result


def cancel_run(sql: Sql, run_id: str, now: float, url: str, conn: Conn) -> int:
    with transaction(conn):
        lock_run(run_id, conn)
        if _run_status(sql, run_id, conn) is None:
            raise UnknownRun(run_id, url)
        rows = conn.execute(sql.run_open_waits, (run_id,), binary=True).fetchall()
        cancelled = decide_cancel([wait_record(row) for row in rows], now)
        _settle(sql, cancelled, conn)
        conn.execute(sql.cancel_run, (now, run_id))
    return len(cancelled)


def list_waits(sql: Sql, run_id: str, conn: Conn) -> list[WaitRecord]:
    rows = conn.execute(sql.list_waits, (run_id,), binary=True).fetchall()
    return [wait_record(row) for row in rows]


def list_events(sql: Sql, run_id: str, unclaimed_only: bool, conn: Conn) -> list[EventRecord]:
    if unclaimed_only:
        rows = conn.execute(sql.unclaimed_events, ([run_id],), binary=True).fetchall()
    else:
        rows = conn.execute(sql.list_events, (run_id,), binary=True).fetchall()
    return [event_record(row) for row in rows]
