"""The DBOS side of the peers benchmark, run by the scratch virtualenv's interpreter.

``python benchmarks/peers_dbos.py ROWS DB SETTINGS`` runs, in DBOS Transact's
fastest idiom, one workflow that loops over ``ROWS`` rows and calls two steps
per row, on a SQLite system database at ``DB`` (a fresh file), and prints one
JSON line: the seconds from configuring DBOS to its ``destroy`` (as a
trioplay time counts opening and closing the runtime), the process CPU time
of the same span, and what the database holds afterwards (workflows, step
outputs), which the parent checks.

``SETTINGS``: ``shipped`` leaves SQLite as DBOS sets it (rollback journal,
``synchronous=FULL``: an fsync per step); ``wal`` gives every connection
trioplay's settings (``journal_mode=WAL``, ``synchronous=NORMAL``), so both
sides keep their steps equally durably.

It imports neither trioplay nor the rest of the suite (they are not installed
in that virtualenv): the two steps compute what the suite's two tools do
(``benchmarks/workload.py``), and the parent checks the rows they return.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig

INDUSTRIES = ("software", "retail", "logistics", "health", "energy", "media", "finance")


def main(rows: int, db: str, settings: str) -> None:
    if settings == "wal":

        @sa.event.listens_for(sa.engine.Engine, "connect")
        def _trioplay_settings(dbapi_conn: Any, record: Any) -> None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @DBOS.step()
    def company(domain: str) -> dict[str, Any]:
        industry = INDUSTRIES[len(domain) % len(INDUSTRIES)]
        return {"industry": industry, "employees": 10 * len(domain)}

    @DBOS.step()
    def email(domain: str, name: str) -> dict[str, Any]:
        return {"email": f"person.{name.split()[-1]}@{domain}", "confidence": 0.9}

    @DBOS.workflow()
    def enrich(n: int) -> list[dict[str, Any]]:
        out = []
        for i in range(n):
            row: dict[str, Any] = {"domain": f"d{i}.example", "name": f"Person {i}"}
            row["industry"] = company(row["domain"])["industry"]
            row["email"] = email(row["domain"], row["name"])["email"]
            out.append(row)
        return out

    started, cpu = time.perf_counter(), time.process_time()
    config: DBOSConfig = {"name": "bench-peers", "system_database_url": f"sqlite:///{db}"}
    DBOS(config=config)
    DBOS.launch()
    enriched = enrich(rows)
    DBOS.destroy()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    with sqlite3.connect(db) as conn:
        steps = conn.execute("SELECT count(*) FROM operation_outputs").fetchone()[0]
        workflows = conn.execute("SELECT count(*) FROM workflow_status").fetchone()[0]
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
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
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
