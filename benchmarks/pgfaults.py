"""PostgreSQL fault trials: ``python -m benchmarks pgfaults [--trials N] [--rows R]``.

Issue 24, acceptance 2: a run on PostgreSQL rides out a terminated backend
and a server restart within ``Limits.store_retry``, and past the budget
fails saying so. Each trial runs a play of R rows (default 3,000; one tool
call per row, 2 ms each, 64 rows in flight) on the test server
(``TRIOPLAY_TEST_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/test``),
in a schema of its own, and once a third of the rows have committed, does
one of:

- ``kill``: ``pg_terminate_backend`` of every backend of the run (found by
  its ``application_name``), three times 0.3 s apart: what an operator or
  a failover does;
- ``restart-3s``, ``restart-8s``: the run reaches the server through a TCP
  proxy on 127.0.0.1 (port 0) that, for that long, closes every connection
  and refuses new ones (accepted, then closed at once), then lets them
  through again: a server restart as its clients see it. The machine's own
  server is shared, so it is never restarted for real;
- ``past-budget``: the same cut for 8 s with ``store_retry=3``: the run must
  fail, and its error must name the budget.

After each trial a fresh connection counts the sheet's rows, and the trial
reports: how the run ended (and whether as expected), rows lost (reported
committed by the run but not in the sheet; for a completed run also rows
missing from it), provider calls made twice (a call whose result was paid
for and not recorded, within what was in flight: at most 64), and how long
the run took. Not a timing benchmark: the figures are counts.
``tests/test_postgres_faults.py`` runs a short form (one trial of each, 600
rows) in ``make test``; docs/durability.md records the full form.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any, Literal

import attrs
import psycopg
import psycopg.conninfo
import trio

import trioplay
from trioplay.adapters.faults import FaultyProxy

DSN = os.environ.get("TRIOPLAY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DEFAULT_TRIALS = 5
DEFAULT_ROWS = 3_000
IN_FLIGHT = 64
TOOL_LATENCY = 0.002
TRIAL_LIMIT = 120.0
"""Seconds a trial may take before it counts as hung."""


@attrs.frozen
class Fault:
    name: str
    kind: Literal["kill", "cut"]
    seconds: float  # how long a cut lasts
    budget: float  # Limits.store_retry
    expect: Literal["completed", "failed"]


FAULTS = (
    Fault("kill", "kill", 0.0, 30.0, "completed"),
    Fault("restart-3s", "cut", 3.0, 30.0, "completed"),
    Fault("restart-8s", "cut", 8.0, 30.0, "completed"),
    Fault("past-budget", "cut", 8.0, 3.0, "failed"),
)


@attrs.frozen
class Trial:
    fault: str
    status: str  # "completed", "failed", "hung"
    expected: bool
    reported: int  # rows the run reported committed
    stored: int  # rows the sheet holds
    lost: int
    paid_twice: int
    elapsed: float
    error: str | None


def _admin(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _target() -> tuple[str, int]:
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    return str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)


def _through(port: int, schema: str, app: str, budget_params: str = "") -> str:
    """The store URL of ``DSN``, through the proxy on ``port``."""
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    user = params.get("user") or "postgres"
    db = params.get("dbname") or "test"
    return (
        f"postgresql://{user}@127.0.0.1:{port}/{db}?schema={schema}&application_name={app}"
        f"&connect_timeout=2{budget_params}"
    )


async def trial(fault: Fault, rows: int = DEFAULT_ROWS) -> Trial:
    """One run of ``rows`` rows with ``fault`` once a third of them committed."""
    schema = f"pgfaults_{uuid.uuid4().hex[:10]}"
    app = f"trioplay-{schema}"
    paid: Counter[str] = Counter()
    committed = [0]
    third = trio.Event()

    async def finder(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(TOOL_LATENCY)
        paid[input["domain"]] += 1  # the provider did the work: it is paid
        return {"email": f"info@{input['domain']}"}

    async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    @trioplay.play("pgfaults")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        source = ({"domain": f"d{i}.example"} for i in range(rows))
        return await ctx.dataset("s", source).with_column("email", email).run(key="domain")

    def on_event(event: trioplay.RuntimeEvent) -> None:
        if event.type == "map.progress":
            committed[0] = event.data["completed"]
            if committed[0] >= rows // 3:
                third.set()

    tools = trioplay.ToolRegistry()
    tools.tool("finder", provider="acme")(finder)
    limits = trioplay.Limits(
        store_retry=fault.budget,
        max_concurrent_rows=IN_FLIGHT,
        progress_flush_interval=0.05,
        cleanup_timeout=2.0,
    )
    proxy = FaultyProxy(*_target())
    status, error = "hung", None
    started = time.perf_counter()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            url = _through(proxy.port, schema, app)

            async def run() -> None:
                nonlocal status, error
                async with trioplay.open_runtime(
                    store=url, tools=tools, limits=limits, on_event=on_event
                ) as rt:
                    try:
                        await rt.run(play, {}, run_id="r")
                        status = "completed"
                    except trioplay.StoreError as exc:
                        status, error = "failed", " ".join(str(exc).split())
                nursery.cancel_scope.cancel()

            async def strike() -> None:
                await third.wait()
                if fault.kind == "kill":
                    for _ in range(3):
                        await trio.to_thread.run_sync(_kill, app)
                        await trio.sleep(0.3)
                else:
                    proxy.cut()
                    await trio.sleep(fault.seconds)
                    proxy.restore()

            with trio.move_on_after(TRIAL_LIMIT):
                nursery.start_soon(strike)
                await run()
        elapsed = time.perf_counter() - started
        stored = await trio.to_thread.run_sync(_stored, schema)
    finally:
        await trio.to_thread.run_sync(_drop, schema)
    lost = max(committed[0], rows if status == "completed" else 0) - stored
    return Trial(
        fault=fault.name,
        status=status,
        expected=status == fault.expect
        and (fault.expect == "completed" or f"(store_retry={fault.budget:g}s)" in (error or "")),
        reported=committed[0],
        stored=stored,
        lost=max(lost, 0),
        paid_twice=sum(count - 1 for count in paid.values() if count > 1),
        elapsed=elapsed,
        error=error,
    )


def _kill(app: str) -> None:
    _admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (app,),
    )


def _stored(schema: str) -> int:
    rows = _admin(f"SELECT count(*) FROM {schema}.sheet_rows WHERE status = 'completed'")
    return int(rows[0][0])


def _drop(schema: str) -> None:
    _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@attrs.frozen
class Report:
    trials: list[Trial]

    @property
    def clean(self) -> bool:
        return all(t.expected and t.lost == 0 and t.paid_twice <= IN_FLIGHT for t in self.trials)

    def lines(self) -> list[str]:
        out = [
            f"{'fault':<12} {'trials':>6} {'as expected':>11} {'lost':>4} "
            f"{'paid twice (max)':>16} {'elapsed (median)':>16}  error (first)"
        ]
        for name in dict.fromkeys(t.fault for t in self.trials):
            group = [t for t in self.trials if t.fault == name]
            expected = sum(t.expected for t in group)
            error = next((t.error for t in group if t.error), "")
            out.append(
                f"{name:<12} {len(group):>6} {expected:>11} {sum(t.lost for t in group):>4} "
                f"{max(t.paid_twice for t in group):>16} "
                f"{statistics.median(t.elapsed for t in group):>15.1f}s  {error[:160]}"
            )
        out.append("clean" if self.clean else "NOT CLEAN")
        return out


def run(trials: int = DEFAULT_TRIALS, rows: int = DEFAULT_ROWS, *, quiet: bool = False) -> Report:
    """``trials`` trials of every fault in :data:`FAULTS`; prints the table unless ``quiet``."""

    async def main() -> list[Trial]:
        done = []
        for _ in range(trials):
            for fault in FAULTS:
                result = await trial(fault, rows)
                if not quiet:
                    print(
                        f"  {result.fault}: {result.status}, {result.stored:,} stored,"
                        f" {result.lost} lost, {result.paid_twice} paid twice,"
                        f" {result.elapsed:.1f}s",
                        flush=True,
                    )
                done.append(result)
        return done

    report = Report(trio.run(main))
    if not quiet:
        print("\n".join(report.lines()))
    return report
