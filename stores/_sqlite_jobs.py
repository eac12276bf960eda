"""The SQLite store's jobs: each a function of the connection, run in one transaction.

A job is named after the store operation it does and takes that operation's
arguments, then the connection; :class:`trioplay.stores.sqlite.SqliteStore`
hands it to its thread (:mod:`trioplay.stores._sqlite_bridge`), which runs it
there or inline. The statements are in :mod:`trioplay.stores._sqlite_sql`,
the decisions in :mod:`trioplay.stores._rules`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trioplay import (
    Claimed,
    EventRecord,
    Receipt,
    RunRecord,
    SheetEntry,
    SheetRow,
    StoreError,
    UnknownRun,
    WaitRecord,
)

from ._columns import (
    PAGE_COLUMNS,
    RECEIPT_COLUMNS,
    RUN_COLUMNS,
    SHEET_COLUMNS,
    event_values,
    page_values,
    receipt_values,
    run_values,
    wait_values,
)
from ._rules import (
    Begin,
    PageRecord,
    address,
    decide_attempt,
    decide_cancel,
    decide_claims,
    decide_register,
    decide_send,
    decide_sheet_writes,
    decide_timeouts,
    failed_keys,
    fenced_pages,
    lease_ids,
    page_key,
    renewed,
    run_leases_of,
    slot_of,
)
from ._sqlite_connect import check_file
from ._sqlite_sql import (
    BEGIN_ATTEMPT,
    CANCEL_RUN,
    COMPLETE,
    COMPLETED_KEYS,
    CONSUME_EVENT,
    EVENT_BY_ID,
    FAIL,
    FAILED_RECEIPTS,
    FINISH_ATTEMPT,
    FINISH_PAGE,
    FORGET_FAILED,
    HEARTBEAT,
    HEARTBEAT_PAGE,
    INSERT_EVENT,
    INSERT_FRESH,
    INSERT_NEW_ROWS,
    INSERT_WAIT,
    LIST_EVENTS,
    LIST_WAITS,
    MIGRATIONS,
    OPEN_WAITS,
    PAGE_LEASES,
    RELEASE,
    RELEASE_PAGE,
    RUN_LEASES,
    RUN_OPEN_WAITS,
    SCHEMA_VERSION,
    SELECT_WAITS,
    SETTLE_WAIT,
    UNCLAIMED_EVENTS,
    UPSERT_CLAIMED,
    UPSERT_ROWS,
    WAIT_BY_TOKEN,
    rows_in,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterator, Sequence

    import trioplay as tp
    from trioplay import SendRequest, SendResult, WaitRequest


@contextmanager
def transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    conn.execute(begin)
    try:
        check_file(conn)  # never write on into a file that was deleted or replaced
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def migrate(conn: sqlite3.Connection, *, url: str) -> None:
    with transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        version = row[0] or 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{url}: open: the database has schema version {version}, newer than"
                f" {SCHEMA_VERSION} which this trioplay understands; upgrade trioplay"
            )
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))


# -- jobs: each runs on the worker thread, in one transaction ------------------


def begin_attempt(begin: Begin, conn: sqlite3.Connection) -> tp.RunRecord:
    with transaction(conn):
        parent_id = begin.parent_run_id
        parent = get_run(parent_id, conn) if parent_id is not None else None
        record, write = decide_attempt(get_run(begin.run_id, conn), parent, begin)
        if write:
            conn.execute(BEGIN_ATTEMPT, run_values(record))
    return record


def finish_attempt(params: tuple[Any, ...], conn: sqlite3.Connection) -> bool | None:
    """Whether the attempt's end was written (``False``: a later attempt holds the run;
    ``None``: no such run); ``params`` as :data:`FINISH_ATTEMPT` takes them."""
    with transaction(conn):
        if conn.execute(FINISH_ATTEMPT, params).rowcount == 1:
            return True
        run_id = params[-2]
        known = conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return False if known is not None else None


def get_run(run_id: str, conn: sqlite3.Connection) -> RunRecord | None:
    row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return RunRecord(*row) if row is not None else None


def list_runs(limit: int, conn: sqlite3.Connection) -> list[RunRecord]:
    rows = conn.execute(
        f"SELECT {RUN_COLUMNS} FROM runs ORDER BY updated_at DESC, rowid DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [RunRecord(*row) for row in rows]


def _select_receipts(keys: Sequence[str], conn: sqlite3.Connection) -> dict[str, Receipt]:
    select = f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE key IN "
    rows = rows_in(conn, select, (), list(dict.fromkeys(keys)))
    return {row[0]: Receipt(*row) for row in rows}


def get_many(keys: Sequence[str], conn: sqlite3.Connection) -> dict[str, Receipt]:
    # A read transaction, so that every chunk sees the same snapshot.
    with transaction(conn, "BEGIN"):
        return _select_receipts(keys, conn)


class _Fallback(Exception):
    """A batch's fast way does not fit it (a lease not ours, a key not new): roll back."""


def claim_many(
    requests: Sequence[tp.ClaimRequest],
    owner: str,
    lease_ttl: float,
    now: float,
    fresh: bool,
    conn: sqlite3.Connection,
) -> tuple[list[tp.ClaimOutcome], bool]:
    """Claim ``requests`` atomically; also answers whether the next batch tries ``fresh``.

    With ``fresh``, the batch first tries to claim every key as new
    (:func:`_claim_fresh`), the usual case in a first run and far cheaper
    than reading first. If some key is stored (or repeated), that
    transaction is rolled back (a savepoint would make SQLite journal every
    page the insert changes) and the batch takes the general way in another:
    read the stored receipts, ask :func:`decide_claims`, upsert the claimed
    ones. A batch that finds stored keys (a replay, say) sends the next one
    straight the general way, sparing it an insert bound to fail, until a
    batch finds none of its keys stored.
    """
    if fresh:
        try:
            with transaction(conn):
                outcomes = _claim_fresh(requests, owner, lease_ttl, now, conn)
                if outcomes is None:
                    raise _Fallback
        except _Fallback:
            pass
        else:
            return outcomes, True
    with transaction(conn):
        stored = _select_receipts([request.key for request in requests], conn)
        outcomes, claimed = decide_claims(
            requests, stored, owner=owner, lease_ttl=lease_ttl, now=now
        )
        conn.executemany(UPSERT_CLAIMED, [receipt_values(r) for r in claimed])
    return outcomes, not stored


def _claim_fresh(
    requests: Sequence[tp.ClaimRequest],
    owner: str,
    lease_ttl: float,
    now: float,
    conn: sqlite3.Connection,
) -> list[tp.ClaimOutcome] | None:
    """Claim every request as a new key; None if some key is stored or repeated.

    :func:`decide_claims` claims a key with no receipt whatever the request
    says (attempt 1, created now). So when an insert that skips stored keys
    (one per chunk) writes a row for every request, every key was new and
    distinct, and those rows and outcomes are what :func:`decide_claims`
    would give, with no read and no :class:`Receipt` built. On None, some
    rows may be written: the caller rolls them back.
    """
    lease_expires_at = now + lease_ttl
    ids = lease_ids(len(requests))
    rows = [
        (r.key, r.operation, r.name, r.run_id, lease_id, lease_expires_at, owner, now, now)
        for r, lease_id in zip(requests, ids, strict=True)
    ]
    if INSERT_FRESH.execute(conn, rows) != len(rows):
        return None
    return [
        Claimed(r.key, lease_id, lease_expires_at, 1)
        for r, lease_id in zip(requests, ids, strict=True)
    ]


def _fenced(sql: str, params: list[tuple[Any, ...]], conn: sqlite3.Connection) -> list[bool]:
    """Whether each of ``params`` matched its lease, for the one-row fenced write ``sql``.

    Usually every lease is ours: one ``executemany``, whose total rowcount
    says so. Otherwise it is rolled back and redone one item at a time,
    whose rowcounts say which leases matched.
    """
    try:
        with transaction(conn):
            if conn.executemany(sql, params).rowcount != len(params):
                raise _Fallback
    except _Fallback:
        pass
    else:
        return [True] * len(params)
    with transaction(conn):
        cursor = conn.cursor()
        updated: list[bool] = []
        for item in params:
            cursor.execute(sql, item)
            updated.append(cursor.rowcount == 1)
    return updated


def heartbeat_many(
    leases: Sequence[tp.Lease], lease_ttl: float, now: float, conn: sqlite3.Connection
) -> list[float | None]:
    expires = now + lease_ttl
    params = [(expires, now, lease.key, lease.lease_id) for lease in leases]
    return renewed(expires, _fenced(HEARTBEAT, params, conn))


def complete_many(
    items: Sequence[tp.Completion], now: float, conn: sqlite3.Connection
) -> list[bool]:
    params = [(item.result_json, now, now, item.key, item.lease_id) for item in items]
    return _fenced(COMPLETE, params, conn)


def fail_many(items: Sequence[tp.Failure], now: float, conn: sqlite3.Connection) -> list[bool]:
    params = [(item.error_json, now, now, item.key, item.lease_id) for item in items]
    return _fenced(FAIL, params, conn)


def release_many(leases: Sequence[tp.Lease], now: float, conn: sqlite3.Connection) -> list[bool]:
    params = [(now, lease.key, lease.lease_id) for lease in leases]
    return _fenced(RELEASE, params, conn)


def count_receipts(run_id: str, conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status, count(*) FROM receipts WHERE run_id = ? GROUP BY status", (run_id,)
    ).fetchall()
    return dict(rows)


def list_failed_receipts(
    run_id: str, after_key: str, limit: int, conn: sqlite3.Connection
) -> list[Receipt]:
    rows = conn.execute(FAILED_RECEIPTS, (run_id, after_key, limit)).fetchall()
    return [Receipt(*row) for row in rows]


def forget_failed_receipts(
    run_id: str, keys: Sequence[str], now: float, conn: sqlite3.Connection
) -> list[str]:
    forgotten: list[str] = []
    with transaction(conn):
        cursor = conn.cursor()
        for key in dict.fromkeys(keys):
            cursor.execute(FORGET_FAILED, (now, key, run_id))
            if cursor.rowcount == 1:
                forgotten.append(key)
    return forgotten


def write_terminal_rows(
    run_id: str,
    dataset: str,
    rows: Sequence[SheetRow],
    leases: Sequence[tp.PageLease | None],
    conn: sqlite3.Connection,
) -> list[tp.SheetWrite]:
    """Write the rows :func:`decide_sheet_writes` lets through, in one transaction."""
    where = (run_id, dataset)
    with transaction(conn):
        offsets = fenced_pages(leases)
        current = dict(rows_in(conn, PAGE_LEASES, where, offsets)) if offsets else {}
        failed = failed_keys(rows)
        completed = [key for (key,) in rows_in(conn, COMPLETED_KEYS, where, failed)]
        answers = decide_sheet_writes(rows, leases, current, completed)
        params = [
            (run_id, dataset, r.key, r.position, r.status, r.data_json, r.error, r.attempt)
            for r, answer in zip(rows, answers, strict=True)
            if answer == "written"
        ]
        if INSERT_NEW_ROWS.execute(conn, params) != len(params):
            UPSERT_ROWS.execute(conn, params)
    return answers


def sheet_status(
    run_id: str, dataset: str, keys: Sequence[str], conn: sqlite3.Connection
) -> dict[str, SheetEntry]:
    select = (
        "SELECT key, status, attempt FROM sheet_rows WHERE run_id = ? AND dataset = ? AND key IN "
    )
    with transaction(conn, "BEGIN"):
        rows = rows_in(conn, select, (run_id, dataset), list(dict.fromkeys(keys)))
    return {key: SheetEntry(status, attempt) for key, status, attempt in rows}


def read_rows(
    run_id: str,
    dataset: str,
    status: tp.RowStatus | None,
    after_position: int,
    limit: int,
    conn: sqlite3.Connection,
) -> list[SheetRow]:
    where = "run_id = ? AND dataset = ? AND position > ?"
    params: tuple[Any, ...] = (run_id, dataset, after_position)
    if status is not None:
        where += " AND status = ?"
        params += (status,)
    rows = conn.execute(
        f"SELECT {SHEET_COLUMNS} FROM sheet_rows WHERE {where} ORDER BY position LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [SheetRow(*row) for row in rows]


def count_rows(run_id: str, dataset: str, conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status, count(*) FROM sheet_rows WHERE run_id = ? AND dataset = ? GROUP BY status",
        (run_id, dataset),
    ).fetchall()
    return dict(rows)


def list_datasets(run_id: str, conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT dataset FROM sheet_rows WHERE run_id = ? ORDER BY dataset", (run_id,)
    ).fetchall()
    return [dataset for (dataset,) in rows]


def run_leases(run_ids: Sequence[str], conn: sqlite3.Connection) -> dict[str, tp.RunLeases]:
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    with transaction(conn, "BEGIN"):
        rows = conn.execute(RUN_LEASES.format(marks=marks), (*ids, *ids)).fetchall()
    return {run_id: run_leases_of([(expires, renewed)]) for run_id, expires, renewed in rows}


def claim_page(
    run_id: str,
    dataset: str,
    offset: int,
    decide: Callable[[PageRecord | None], tuple[tp.PageClaim, PageRecord | None]],
    conn: sqlite3.Connection,
) -> tp.PageClaim:
    where = (run_id, dataset, offset)
    with transaction(conn):
        row = conn.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages"
            " WHERE run_id = ? AND dataset = ? AND page_offset = ?",
            where,
        ).fetchone()
        answer, claimed = decide(PageRecord(*row) if row is not None else None)
        if claimed is not None:
            conn.execute(
                f"INSERT OR REPLACE INTO pages (run_id, dataset, page_offset, {PAGE_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*where, *page_values(claimed)),
            )
    return answer


def heartbeat_pages(
    leases: Sequence[tp.PageLease], lease_ttl: float, now: float, conn: sqlite3.Connection
) -> list[float | None]:
    expires = now + lease_ttl
    params = [(expires, now, *page_key(lease)) for lease in leases]
    return renewed(expires, _fenced(HEARTBEAT_PAGE, params, conn))


def finish_page(
    lease: tp.PageLease, attempt: int, failed: int, now: float, conn: sqlite3.Connection
) -> bool:
    [finished] = _fenced(FINISH_PAGE, [(attempt, failed, now, *page_key(lease))], conn)
    return finished


def release_page(lease: tp.PageLease, now: float, conn: sqlite3.Connection) -> bool:
    [released] = _fenced(RELEASE_PAGE, [(now, *page_key(lease))], conn)
    return released


# -- waits and events: each job one transaction under the write lock ------------------
# BEGIN IMMEDIATE takes SQLite's write lock before the first read: a sender and
# a registrar of one (run, name, key) never interleave, even before either row exists.


def register_waits(
    requests: Sequence[WaitRequest], now: float, conn: sqlite3.Connection
) -> list[WaitRecord]:
    with transaction(conn):
        stored = _select_waits(list(dict.fromkeys(r.wait_key for r in requests)), conn)
        fresh_runs = {r.run_id for r in requests if r.wait_key not in stored}
        # One read per run: the buffered events of a run are few (each waits for its waiter).
        slots = {slot_of(r) for r in requests if r.wait_key not in stored}
        buffered = [
            event
            for run_id in sorted(fresh_runs)
            for row in conn.execute(UNCLAIMED_EVENTS, (run_id,)).fetchall()
            if slot_of(event := EventRecord(*row)) in slots
        ]
        decision = decide_register(requests, stored, buffered, now)
        conn.executemany(INSERT_WAIT, [wait_values(w) for w in decision.inserts])
        conn.executemany(SETTLE_WAIT, [_settled(w) for w in decision.updates])
        _consume(decision.consumed, conn)
    return decision.records


def _settled(wait: WaitRecord) -> tuple[object, ...]:
    return (
        wait.status,
        wait.settled_at,
        wait.payload_json,
        wait.reason,
        wait.event_id,
        wait.wait_key,
    )


def _consume(events: Sequence[EventRecord], conn: sqlite3.Connection) -> None:
    consumed = [(e.consumed_by, e.run_id, e.event_id) for e in events]
    conn.executemany(CONSUME_EVENT, consumed)


def poll_waits(
    wait_keys: Sequence[str], now: float, conn: sqlite3.Connection
) -> dict[str, WaitRecord]:
    keys = list(dict.fromkeys(wait_keys))
    # A read first, in one snapshot: the lingering waits of a run are polled
    # every interval, and most polls time nothing out, so need no write lock.
    with transaction(conn, "BEGIN"):
        found = _select_waits(keys, conn)
    if not decide_timeouts(found.values(), now):
        return found
    with transaction(conn):
        found = _select_waits(keys, conn)
        expired = decide_timeouts(found.values(), now)
        conn.executemany(SETTLE_WAIT, [_settled(w) for w in expired])
    found.update((w.wait_key, w) for w in expired)
    return found


def _select_waits(keys: Sequence[str], conn: sqlite3.Connection) -> dict[str, WaitRecord]:
    return {row[0]: WaitRecord(*row) for row in rows_in(conn, SELECT_WAITS, (), keys)}


def send_event(request: SendRequest, now: float, url: str, conn: sqlite3.Connection) -> SendResult:
    with transaction(conn):
        run = get_run(request.run_id, conn)
        status = run.status if run is not None else None
        token_wait = None
        if request.token is not None:
            row = conn.execute(WAIT_BY_TOKEN, (request.token,)).fetchone()
            token_wait = WaitRecord(*row) if row is not None else None
        request = address(request, status, token_wait, store=url)
        row = conn.execute(EVENT_BY_ID, (request.run_id, request.event_id)).fetchone()
        open_waits = [WaitRecord(*r) for r in conn.execute(OPEN_WAITS, slot_of(request))]
        delivery = decide_send(
            request,
            EventRecord(*row) if row is not None else None,
            open_waits,
            status,
            now,
            store=url,
        )
        if delivery.event is not None:
            conn.execute(INSERT_EVENT, event_values(delivery.event))
        if delivery.wait is not None:
            conn.execute(SETTLE_WAIT, _settled(delivery.wait))
    return delivery.result


def cancel_run(run_id: str, now: float, url: str, conn: sqlite3.Connection) -> int:
    with transaction(conn):
        if get_run(run_id, conn) is None:
            raise UnknownRun(run_id, url)
        waits = [WaitRecord(*row) for row in conn.execute(RUN_OPEN_WAITS, (run_id,))]
        cancelled = decide_cancel(waits, now)
        conn.executemany(SETTLE_WAIT, [_settled(w) for w in cancelled])
        conn.execute(CANCEL_RUN, (now, run_id))
    return len(cancelled)


def list_waits(run_id: str, conn: sqlite3.Connection) -> list[WaitRecord]:
    return [WaitRecord(*row) for row in conn.execute(LIST_WAITS, (run_id,))]


def list_events(run_id: str, unclaimed_only: bool, conn: sqlite3.Connection) -> list[EventRecord]:
    select = UNCLAIMED_EVENTS if unclaimed_only else LIST_EVENTS
    return [EventRecord(*row) for row in conn.execute(select, (run_id,))]
