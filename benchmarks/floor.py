"""The floor: the least any engine keeping trioplay's guarantees does per row.

``floor-sqlite`` is a contender of the throughput benchmark (and
``floor-trio`` the same without the database), written in raw
Trio and raw :mod:`sqlite3` with nothing else: no governor, no lease
renewal, no same-run followers, no retries, no stall observer, no memory
budgets, no progress, no error handling. What it keeps is what DESIGN §3
asks of every tool call and every row, each in its cheapest form:

- a task per row, 256 rows at a time (as ``baseline-chunks``);
- per tool call: the content-addressed key (SHA-256 over canonical JSON);
  the claim written *before* the call (so no other process pays for the same
  key), for which the row task parks until a batch of claims is committed;
  the call under a cancel scope with its deadline (every wait is bounded);
  a ``ToolCall`` with its idempotency key; the result's JSON, and its
  completion written in a batch after the call;
- per row: its JSON, written in a batch to the sheet after the completions
  of its calls.

It writes the same tables as ``sqlite:///`` (the store's own schema), each
batch as one multi-row statement (inserts as ``INSERT OR ROLLBACK``, which
spares SQLite a statement journal, see ``_ManyRows`` in stores/_sqlite_sql.py),
one writer task serving completions, rows and claims in that order, all
that is queued in one transaction. What it cannot do without is a
lower bound for trioplay on this machine: its ratio to the baseline is the
best ratio a durable engine of this design can reach here.

``floor-store`` (:func:`floor_store`) asks a different question: what the
SQLite store's own statements cost, with no engine and no event loop
around them. It bounds every design that keeps trioplay's receipts in this
store, not only this one.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sqlite3
import time
from typing import TYPE_CHECKING, Any

import trio

import trioplay
from trioplay._json import canonical_json, dumps
from trioplay._keys import tool_receipt_key
from trioplay._runtime import play_name
from trioplay.stores import _sqlite_jobs as store
from trioplay.stores._sqlite_connect import connect
from trioplay.stores._sqlite_sql import COMPLETE, MIGRATIONS

from .workload import COLUMNS, enrich_play, expected_row, registry, source_rows

if TYPE_CHECKING:
    from pathlib import Path

CHUNK = 256
_TIMEOUT = 930.0  # Limits.tool_timeout's default
_BATCH = 90  # rows per statement: 11 bound variables each, under SQLite's old limit of 999


def _values(width: int, count: int) -> str:
    row = "(" + ",".join("?" * width) + ")"
    return ",".join([row] * count)


class _Writer:
    """Claims, completions and sheet rows, each kind written in multi-row batches."""

    def __init__(self, path: Path | None) -> None:
        self.conn: sqlite3.Connection | None = None  # None: nothing is written (floor-trio)
        if path is not None:
            self.conn = sqlite3.connect(path, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            for statement in MIGRATIONS[0]:
                self.conn.execute(statement)
        self.claims: list[tuple[str, trio.lowlevel.Task]] = []
        self.completions: list[tuple[str, str]] = []
        self.rows: list[tuple[str, int, str]] = []
        self.wakeup = trio.Event()
        self.lease = os.urandom(8).hex()
        self.stored_completions = 0  # counted instead, without a database
        self.stored_rows = 0

    async def claim(self, key: str) -> None:
        """Park until the claim of ``key`` is committed."""
        self.claims.append((key, trio.lowlevel.current_task()))
        self.wakeup.set()
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    async def run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup = trio.Event()
            self.flush()

    def flush(self) -> None:
        now = trio.current_time()
        completions, self.completions = self.completions, []
        rows, self.rows = self.rows, []
        claims, self.claims = self.claims, []
        conn = self.conn
        if conn is None:
            self.stored_completions += len(completions)
            self.stored_rows += len(rows)
            for _, task in claims:
                trio.lowlevel.reschedule(task)
            return
        conn.execute("BEGIN IMMEDIATE")
        for start in range(0, len(completions), _BATCH):
            batch = completions[start : start + _BATCH]
            params: list[Any] = [now, now]
            for key, result in batch:
                params += (key, self.lease, result)
            conn.execute(
                "UPDATE receipts SET status = 'completed', lease_expires_at = NULL,"
                " result_json = v.column3, updated_at = ?, completed_at = ?"
                f" FROM (VALUES {_values(3, len(batch))}) AS v"
                " WHERE receipts.key = v.column1 AND receipts.lease_id = v.column2",
                params,
            )
        for start in range(0, len(rows), _BATCH):
            batch_rows = rows[start : start + _BATCH]
            params = []
            for key, position, data in batch_rows:
                params += ("floor", "leads", key, position, "completed", data, None, 1)
            conn.execute(
                "INSERT OR ROLLBACK INTO sheet_rows (run_id, dataset, key, position, status,"
                f" data_json, error, attempt) VALUES {_values(8, len(batch_rows))}",
                params,
            )
        for start in range(0, len(claims), _BATCH):
            batch_claims = claims[start : start + _BATCH]
            params = []
            for key, _ in batch_claims:
                params += (key, "tool", "x", "running", "floor", self.lease, now + 60, "me", 1)
                params += (now, now)
            conn.execute(
                "INSERT OR ROLLBACK INTO receipts (key, operation, name, status, run_id,"
                " lease_id, lease_expires_at, owner, attempts, created_at, updated_at)"
                f" VALUES {_values(11, len(batch_claims))}",
                params,
            )
        conn.execute("COMMIT")
        for _, task in claims:
            trio.lowlevel.reschedule(task)


class _FloorTools:
    """The resolvers' ``rc``: a tool call with just what every durable call needs."""

    def __init__(self, writer: _Writer) -> None:
        self._writer = writer
        self._fns = {spec.tool_id: spec.fn for spec in registry()}
        self.calls = 0

    async def tool(self, tool_id: str, input: dict[str, Any]) -> Any:
        text = canonical_json(input)
        key = hashlib.sha256(f"{tool_id}\0{text}".encode()).hexdigest()
        await self._writer.claim(key)
        deadline = trio.current_time() + _TIMEOUT
        call = trioplay.ToolCall(
            tool_id, hashlib.sha256(key.encode()).hexdigest()[:32], 1, deadline
        )
        with trio.CancelScope(deadline=deadline):
            result = await self._fns[tool_id](input, call)
        self._writer.completions.append((key, dumps(result)))
        self.calls += 1
        return result


async def _row(position: int, data: dict[str, Any], tools: _FloorTools, writer: _Writer) -> None:
    row = dict(data)
    for name, resolver in COLUMNS:
        row[name] = await resolver(row, tools)
    writer.rows.append((row["domain"], position, dumps(row)))


async def floor_sqlite(n: int, path: Path | None) -> dict[str, Any]:
    """Run ``n`` rows; returns the count of rows and calls, for the check.

    With ``path=None`` nothing is written (``floor-trio``): the claims still
    park their rows until the writer task has seen them, so what is left is
    the floor's cost in Trio and Python alone.
    """
    writer = _Writer(path)
    tools = _FloorTools(writer)
    try:
        async with trio.open_nursery() as outer:
            outer.start_soon(writer.run)
            rows = enumerate(source_rows(n))
            while chunk := list(itertools.islice(rows, CHUNK)):
                async with trio.open_nursery() as nursery:
                    for position, data in chunk:
                        nursery.start_soon(_row, position, data, tools, writer)
            writer.flush()
            outer.cancel_scope.cancel()
        if writer.conn is None:
            completed, receipts = writer.stored_rows, writer.stored_completions
        else:
            (completed,) = writer.conn.execute("SELECT count(*) FROM sheet_rows").fetchone()
            (receipts,) = writer.conn.execute(
                "SELECT count(*) FROM receipts WHERE status = 'completed'"
            ).fetchone()
    finally:
        if writer.conn is not None:
            writer.conn.close()
    if receipts != tools.calls:
        raise AssertionError(f"floor-sqlite: {receipts} completed receipts for {tools.calls} calls")
    return {"completed": completed, "calls": tools.calls}


# What the workload's resolvers do (benchmarks/workload.py), spelt out for a
# loop without a resolver: the column, its tool, the input fields, the result
# field it keeps. Every run checks the first row of each chunk against
# expected_row, and counts the sheet rows and completed receipts.
_TOOL_COLUMNS = (
    ("industry", "company", ("domain",), "industry"),
    ("email", "email", ("domain", "name"), "email"),
)


def _run_tool(fn: Any, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
    """The result of a tool coroutine that never yields, without an event loop."""
    coro = fn(input, call)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("floor-store: the workload's tools must not yield")


async def floor_store(n: int, path: Path) -> dict[str, Any]:
    """``floor-store``: the SQLite store's own statements for ``n`` rows, and nothing else.

    No Trio task, no park, no governor, no engine: the store's claim,
    completion and sheet functions (``stores/sqlite.py``) called in a plain
    loop on one connection, in the engine's batch shape: rows 256 at a time;
    per tool column, claims of at most ``tool_batch_max`` keys per
    transaction, then their completions; the sheet rows once per chunk. The
    keys and results are the real ones (``tool_receipt_key``, the
    workload's tools). Whatever an engine does around the store, its SQLite
    run costs at least this much per row: its ratio to the baseline bounds
    the ratio any engine writing these receipts to this store can reach.
    """
    batch_max = trioplay.Limits().tool_batch_max
    fns = {spec.tool_id: spec.fn for spec in registry()}
    call = trioplay.ToolCall("floor", "", 1, _TIMEOUT)
    scope = play_name(enrich_play)
    conn = connect(str(path))
    calls = 0
    try:
        store.migrate(conn, url=f"sqlite:///{path}")
        rows = enumerate(source_rows(n))
        while chunk := list(itertools.islice(rows, CHUNK)):
            enriched = [(position, dict(data)) for position, data in chunk]
            for column, tool_id, fields, kept in _TOOL_COLUMNS:
                for start in range(0, len(enriched), batch_max):
                    part = enriched[start : start + batch_max]
                    inputs = [{f: row[f] for f in fields} for _, row in part]
                    requests = [
                        trioplay.ClaimRequest(
                            key=tool_receipt_key(tool_id, canonical_json(i), scope),
                            operation="tool",
                            name=tool_id,
                            run_id="floor",
                        )
                        for i in inputs
                    ]
                    now = time.time()
                    outcomes, _ = store.claim_many(requests, "floor", 60.0, now, True, conn)
                    claimed = [c for c in outcomes if isinstance(c, trioplay.Claimed)]
                    if len(claimed) != len(requests):
                        raise AssertionError(f"floor-store: a fresh key not claimed: {outcomes}")
                    results = [_run_tool(fns[tool_id], i, call) for i in inputs]
                    now = time.time()
                    done = store._fenced(
                        COMPLETE,
                        [
                            (dumps(result), now, now, c.key, c.lease_id)
                            for result, c in zip(results, claimed, strict=True)
                        ],
                        conn,
                    )
                    if not all(done):
                        raise AssertionError("floor-store: a completion lost its lease")
                    for (_, row), result in zip(part, results, strict=True):
                        row[column] = result[kept]
                    calls += len(part)
            sheet = [
                trioplay.SheetRow(row["domain"], position, "completed", dumps(row), None, 1)
                for position, row in enriched
            ]
            store.write_terminal_rows("floor", "leads", sheet, [None] * len(sheet), conn)
            for position, row in enriched[:1]:
                if row != expected_row(position):
                    raise AssertionError(f"floor-store: row {position} is {row}")
        (completed,) = conn.execute("SELECT count(*) FROM sheet_rows").fetchone()
        (receipts,) = conn.execute(
            "SELECT count(*) FROM receipts WHERE status = 'completed'"
        ).fetchone()
    finally:
        conn.close()
    if receipts != calls:
        raise AssertionError(f"floor-store: {receipts} completed receipts for {calls} calls")
    return {"completed": completed, "calls": calls}
