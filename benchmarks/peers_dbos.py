"""The DBOS side of the peers benchmark, run by the scratch virtualenv's interpreter.

``python benchmarks/peers_dbos.py ROWS URL SETTINGS LATENCY IN_FLIGHT`` runs the
benchmark's rows through DBOS Transact, two steps per row, on the system
database at ``URL`` (``sqlite:///FILE``, a fresh file, or ``postgresql://...``,
a fresh database that DBOS creates), and prints one JSON line: the seconds from
configuring DBOS to its ``destroy`` (as a trioplay time counts opening and
closing the runtime), the process CPU time of the same span, and what the
database holds afterwards (workflows, step outputs), which the parent checks.

With ``LATENCY`` 0 it uses DBOS's fastest idiom: one workflow that loops over
the rows. With ``LATENCY`` > 0 each step first sleeps that long, so rows must
overlap to go fast: one async workflow per row (DBOS's asyncio idiom, steps
awaiting ``asyncio.sleep``), at most ``IN_FLIGHT`` at once, as trioplay's
``max_concurrent_rows``.

``SETTINGS`` (SQLite only): ``shipped`` leaves SQLite as DBOS sets it (rollback
journal, ``synchronous=FULL``: an fsync per step); ``wal`` gives every
connection trioplay's settings (``journal_mode=WAL``, ``synchronous=NORMAL``),
so both sides keep their steps equally durably. PostgreSQL is left as DBOS
ships it.

It imports neither trioplay nor the rest of the suite (they are not installed
in that virtualenv): the two steps compute what the suite's two tools do
(``benchmarks/workload.py``), and the parent checks the rows they return.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig

INDUSTRIES = ("software", "retail", "logistics", "health", "energy", "media", "finance")


def _company(domain: str) -> dict[str, Any]:
    industry = INDUSTRIES[len(domain) % len(INDUSTRIES)]
    return {"industry": industry, "employees": 10 * len(domain)}


def _email(domain: str, name: str) -> dict[str, Any]:
    return {"email": f"person.{name.split()[-1]}@{domain}", "confidence": 0.9}


def _row(i: int) -> dict[str, Any]:
    return {"domain": f"d{i}.example", "name": f"Person {i}"}


def looped(rows: int) -> Any:
    """One workflow looping over the rows: DBOS's fastest idiom when steps do not wait."""

    @DBOS.step()
    def company(domain: str) -> dict[str, Any]:
        return _company(domain)

    @DBOS.step()
    def email(domain: str, name: str) -> dict[str, Any]:
        return _email(domain, name)

    @DBOS.workflow()
    def enrich(n: int) -> list[dict[str, Any]]:
        out = []
        for i in range(n):
            row = _row(i)
            row["industry"] = company(row["domain"])["industry"]
            row["email"] = email(row["domain"], row["name"])["email"]
            out.append(row)
        return out

    return lambda: enrich(rows)


def concurrent(rows: int, latency: float, in_flight: int) -> Any:
    """One async workflow per row, ``in_flight`` at once, steps that sleep ``latency``."""

    @DBOS.step()
    async def company(domain: str) -> dict[str, Any]:
        await asyncio.sleep(latency)
        return _company(domain)

    @DBOS.step()
    async def email(domain: str, name: str) -> dict[str, Any]:
        await asyncio.sleep(latency)
        return _email(domain, name)

    @DBOS.workflow()
    async def enrich(i: int) -> dict[str, Any]:
        row = _row(i)
        row["industry"] = (await company(row["domain"]))["industry"]
        row["email"] = (await email(row["domain"], row["name"]))["email"]
        return row

    async def every_row() -> list[dict[str, Any]]:
        slots = asyncio.Semaphore(in_flight)

        async def one(i: int) -> dict[str, Any]:
            async with slots:
                return await enrich(i)

        return list(await asyncio.gather(*(one(i) for i in range(rows))))

    return lambda: asyncio.run(every_row())


def main(rows: int, url: str, settings: str, latency: float, in_flight: int) -> None:
    sqlite = url.startswith("sqlite:")
    if sqlite and settings == "wal":

        @sa.event.listens_for(sa.engine.Engine, "connect")
        def _trioplay_settings(dbapi_conn: Any, record: Any) -> None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    work = looped(rows) if latency == 0 else concurrent(rows, latency, in_flight)
    started, cpu = time.perf_counter(), time.process_time()
    config: DBOSConfig = {"name": "bench-peers", "system_database_url": url}
    DBOS(config=config)
    DBOS.launch()
    enriched = work()
    DBOS.destroy()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    tables = "" if sqlite else "dbos."
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        steps = conn.execute(sa.text(f"SELECT count(*) FROM {tables}operation_outputs")).scalar()
        workflows = conn.execute(sa.text(f"SELECT count(*) FROM {tables}workflow_status")).scalar()
        journal = conn.execute(sa.text("PRAGMA journal_mode")).scalar() if sqlite else None
    engine.dispose()
    print(
        json.dumps(
            {
                "elapsed": elapsed,
                "cpu": cpu,
                "completed": len(enriched),
                "last": enriched[-1] if enriched else None,
                "steps_recorded": steps,
                "workflows": workflows,
                "journal_mode": journal,
            }
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
