"""Peers: trioplay against what a Python user would pick instead, in the same run.

**DBOS Transact.** ``python -m benchmarks peers`` runs the same work in
trioplay and in DBOS Transact (:data:`DBOS_PIN`): 3,000 rows, two durable
calls each, both on SQLite (a fresh file each time). DBOS runs in its
fastest idiom, one workflow looping over the rows and calling two steps per
row (``benchmarks/peers_dbos.py``); trioplay runs the throughput
benchmark's play (two tool columns, ``sqlite:///``, default ``Limits``).
Contenders, each a fresh process per measurement, in rounds whose order
rotates, the best of each counting:

- ``trioplay``;
- ``dbos``: DBOS with SQLite as it ships it (rollback journal,
  ``synchronous=FULL``: an fsync per step);
- ``dbos-wal``: DBOS with trioplay's SQLite settings on every connection
  (``journal_mode=WAL``, ``synchronous=NORMAL``), so both keep their steps
  equally durably. The target (**at least 50 x**) is judged against the
  faster DBOS.

**DBOS on PostgreSQL** (:data:`RACES`): ``trioplay-pg`` against ``dbos-pg``,
the same rows on a fresh store of :data:`benchmarks.workload.POSTGRES`
(trioplay a new schema, DBOS a new database it makes; all dropped after),
and ``trioplay-pg-50ms`` against ``dbos-pg-50ms``, :data:`LATENCY_ROWS` rows
whose two steps each wait 50 ms, 256 rows in flight (DBOS in its asyncio
idiom, one async workflow per row). These races have no target: the ratio
is printed and saved.

A time counts setting up (trioplay: opening the runtime and store; DBOS:
configuring and launching it), the work, and closing. Every run is checked:
trioplay as in the throughput benchmark, DBOS by its rows (the last one
enriched as expected) and its database (one workflow, ``2 N`` step outputs).

DBOS and trio-asyncio (:data:`TRIO_ASYNCIO_PIN`) are not dependencies of
trioplay: they are installed into a virtualenv of this benchmark's own,
``<tmp>/trioplay-peers-<pins>/venv``, made on first use and reused after
(third-party packages pinned to ``.venv``'s versions). If it cannot be made
(no index, no wheel), the benchmark says why, loudly, and skips what needs it.

**The PostgreSQL bridge** (``bridge``, a second contender): the store runs
psycopg's synchronous API on threads (``stores/_pg_bridge.py``,
docs/architecture.md (i)) instead of psycopg's asyncio API under
trio-asyncio, which DESIGN §5 suggested. Measured here, in one process,
alternating: ``SELECT 1`` round trips, one after another (µs each), through
``Pool.run`` (the store's own bridge, one worker) and through
``trio_asyncio.aio_as_trio`` around ``AsyncConnection.execute`` inside
``trio_asyncio.open_loop()`` (and, as the floor of both, a blocking psycopg
connection with no bridge at all); and a cancelled query: ``SELECT
pg_sleep(10)`` under a 50 ms Trio deadline, timing how long after the
deadline the caller is back, whether the server stopped the query (no
backend of ours still runs it 1 s later), and whether the connection then
answers a ``SELECT 1``.

``python -m benchmarks peers [--rows N] [--rounds R] [--only A,B]`` (``A,B``
among :data:`CONTENDERS`); ``--quick``: 300 rows (512 in the latency race), one
round, every contender but ``dbos``, few round trips, and it never installs: it
uses the virtualenv an earlier run made, or skips.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio

from . import latency as latency_bench
from . import throughput
from .workload import (
    POSTGRES,
    chosen,
    clean_env,
    expected_row,
    install_venv,
    machine,
    postgres_problem,
    save_results,
    stamp,
    tail,
)

DBOS_PIN = "dbos==3.4.0"
TRIO_ASYNCIO_PIN = "trio-asyncio==0.16.0"
PINS = (DBOS_PIN, TRIO_ASYNCIO_PIN)
DEFAULT_ROWS = 3_000
DEFAULT_ROUNDS = 3
QUICK_ROWS = 300
LATENCY_ROWS = 2_560
QUICK_LATENCY_ROWS = 512
CONTENDERS = (
    "trioplay",
    "dbos",
    "dbos-wal",
    "trioplay-pg",
    "dbos-pg",
    "trioplay-pg-50ms",
    "dbos-pg-50ms",
    "bridge",
)
QUICK_CONTENDERS = tuple(name for name in CONTENDERS if name != "dbos")
TARGET_RATIO = 50.0
ROUND_TRIPS = 2_000
QUICK_ROUND_TRIPS = 200
CANCELS = 10
QUICK_CANCELS = 2
CANCEL_AFTER = 0.05
ROOT = Path(__file__).resolve().parents[1]


# -- the scratch virtualenv -------------------------------------------------
def scratch_dir() -> Path:
    """Where the virtualenv of :data:`PINS` lives (one per set of pins and Python)."""
    key = hashlib.sha256(" ".join([*PINS, sys.version]).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"trioplay-peers-{key}"


def scratch_python(*, install: bool) -> Path | str:
    """The scratch virtualenv's interpreter, made first if ``install``; or why there is none."""
    cache = scratch_dir()
    python, done = cache / "venv" / "bin" / "python", cache / "installed"
    if done.exists():
        return python
    if not install:
        return (
            f"no virtualenv with {', '.join(PINS)} at {cache} "
            "(`python -m benchmarks peers` makes it; the quick form never installs)"
        )
    print(f"peers: installing {', '.join(PINS)} into {cache / 'venv'} (once)")
    cache.mkdir(parents=True, exist_ok=True)
    problem = install_venv(cache / "venv", PINS)
    if problem is not None:
        return f"pip could not install {', '.join(PINS)} into {cache / 'venv'}: {problem}"
    done.write_text("\n".join(PINS) + "\n")
    return python


def site_packages(python: Path) -> str:
    """The scratch virtualenv's site-packages, for :func:`site.addsitedir` in a child."""
    return subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


# -- trioplay and DBOS, each run in a fresh process --------------------------
@attrs.frozen
class Race:
    """One workload both sides run: its store, the tools' latency, the rows in flight."""

    name: str
    store: str  # "sqlite" or "postgres"
    latency: float = 0.0
    in_flight: int = latency_bench.IN_FLIGHT
    target: float | None = None  # trioplay's least ratio over the faster DBOS, if any

    def describe(self, rows: int) -> str:
        waits = f"steps that wait {self.latency * 1e3:g} ms, " if self.latency else ""
        flight = f"{self.in_flight} rows in flight, " if self.latency else ""
        return f"{rows:,} rows, two durable calls each, {waits}{flight}{self.store}"


RACES = {
    "sqlite": Race("sqlite", "sqlite", target=TARGET_RATIO),
    "postgres": Race("postgres", "postgres"),
    "postgres-50ms": Race("postgres-50ms", "postgres", latency=0.05),
}
# contender -> (its race, the DBOS SQLite settings); "trioplay*" are the reference of each race
RACERS = {
    "trioplay": ("sqlite", ""),
    "dbos": ("sqlite", "shipped"),
    "dbos-wal": ("sqlite", "wal"),
    "trioplay-pg": ("postgres", ""),
    "dbos-pg": ("postgres", ""),
    "trioplay-pg-50ms": ("postgres-50ms", ""),
    "dbos-pg-50ms": ("postgres-50ms", ""),
}


def trioplay_child(rows: int, url: str, latency: float, in_flight: int) -> None:
    """``--child-trioplay``: one run of the throughput play on ``url``, as a JSON line."""
    limits = latency_bench.limits(0.0, in_flight) if latency else None
    out = trio.run(lambda: throughput.run_trioplay(rows, url, latency=latency, limits=limits))
    throughput.check_engine_run("trioplay", rows, out)
    print(json.dumps({"elapsed": out["elapsed"], "cpu": out["cpu"], "completed": rows}))


class _Databases(latency_bench.Stores):
    """The latency benchmark's fresh stores (SQLite files, PostgreSQL schemas), and for DBOS
    on PostgreSQL a fresh database it makes itself; all dropped by :meth:`drop`."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.databases: list[str] = []

    def for_racer(self, contender: str, store: str) -> str:
        if store == "sqlite" or contender.startswith("trioplay"):
            return self.url(store)
        name = f"trioplay_peers_{uuid.uuid4().hex[:12]}"
        self.databases.append(name)
        return urlunsplit(urlsplit(POSTGRES)._replace(path=f"/{name}"))

    def drop(self) -> None:
        super().drop()
        if not self.databases:
            return
        import psycopg

        with psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3) as conn:
            for name in self.databases:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _measure(name: str, rows: int, url: str, python: Path | None) -> dict[str, Any]:
    race = RACES[RACERS[name][0]]
    shape = [str(rows), url, str(race.latency), str(race.in_flight)]
    if name.startswith("trioplay"):
        command = [sys.executable, "-m", "benchmarks.peers", "--child-trioplay", *shape]
    else:
        assert python is not None
        script = str(ROOT / "benchmarks" / "peers_dbos.py")
        command = [str(python), script, str(rows), url, RACERS[name][1], *shape[2:]]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=False, env=clean_env()
    )
    if done.returncode != 0:
        raise RuntimeError(f"peers: {name} failed:\n{tail(done.stdout + done.stderr)}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not name.startswith("trioplay"):
        expected = expected_row(rows - 1)
        workflows = 1 if race.latency == 0 else rows
        if (out["completed"], out["steps_recorded"], out["workflows"]) != (
            rows,
            2 * rows,
            workflows,
        ) or (out["last"] != expected):
            raise AssertionError(f"peers: {name} did not do the work: {out}")
    return out


def race(
    race: Race, rows: int, rounds: int, names: list[str], python: Path | None
) -> dict[str, Any]:
    """``names`` (all of ``race``) in rounds whose order rotates; the best of each counts."""
    print(f"peers: {race.describe(rows)}, best of {rounds} round(s)")
    seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    journal: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="trioplay-peers-") as tmp:
        databases = _Databases(Path(tmp))
        try:
            for round_no in range(rounds):
                order = names[round_no % len(names) :] + names[: round_no % len(names)]
                for name in order:
                    out = _measure(name, rows, databases.for_racer(name, race.store), python)
                    seconds[name].append(out["elapsed"])
                    cpu[name].append(out["cpu"])
                    if out.get("journal_mode"):
                        journal[name] = out["journal_mode"]
                    print(
                        f"  round {round_no + 1} {name:<17}{out['elapsed']:9.3f} s"
                        f"{rows / out['elapsed']:>9,.0f} rows/s"
                        f"{1e6 * out['cpu'] / rows:>9,.0f} µs CPU/row"
                    )
        finally:
            databases.drop()
    rate = {name: rows / min(times) for name, times in seconds.items()}
    cpu_per_row = {name: 1e6 * min(times) / rows for name, times in cpu.items()}
    result: dict[str, Any] = {
        "workload": race.describe(rows),
        "store": race.store,
        "latency": race.latency,
        "in_flight": race.in_flight,
        "rows": rows,
        "rounds": rounds,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_per_s": rate,
        "cpu_us_per_row": cpu_per_row,
        "dbos_journal_mode": journal,
    }
    ours = next((name for name in names if name.startswith("trioplay")), None)
    print(f"  {'contender':<17}{'rows/s':>9}{'µs CPU/row':>12}{'trioplay x':>12}  rounds")
    for name in names:
        if name == ours or ours is None:
            print(f"  {name:<17}{rate[name]:>9,.0f}{cpu_per_row[name]:>12,.0f}")
            continue
        per_round = [seconds[name][i] / seconds[ours][i] for i in range(rounds)]
        result.setdefault("ratio", {})[name] = rate[ours] / rate[name]
        result.setdefault("ratio_per_round", {})[name] = per_round
        result.setdefault("cpu_ratio", {})[name] = cpu_per_row[name] / cpu_per_row[ours]
        print(
            f"  {name:<17}{rate[name]:>9,.0f}{cpu_per_row[name]:>12,.0f}"
            f"{result['ratio'][name]:>11.1f}x  {', '.join(f'{r:.1f}' for r in per_round)}"
            f"  (by CPU per row {result['cpu_ratio'][name]:.1f}x)"
        )
    if result.get("ratio"):
        fastest = min(result["ratio"], key=result["ratio"].get)
        ratio = result["ratio"][fastest]
        if race.target is None:
            print(f"trioplay is {ratio:.1f}x the faster DBOS ({fastest}) on {race.name}")
        else:
            met = ratio >= race.target
            result["target"] = {"ratio": race.target, "against": fastest, "met": met}
            print(
                f"target: trioplay >= {race.target:g}x the faster DBOS ({fastest}): "
                f"{ratio:.1f}x, {'met' if met else 'MISSED'}"
            )
    return result


# -- the PostgreSQL bridges (run in a child with trio-asyncio importable) ----
def bridge_child(scratch_site: str, round_trips: int, cancels: int, rounds: int) -> None:
    """``--child-bridge``: both bridges, alternating, as one JSON line."""
    site.addsitedir(scratch_site)  # after .venv's own: only what .venv lacks comes from it
    # Before psycopg: psycopg binds asyncio.get_running_loop when imported, and
    # trio-asyncio's replacement must be the one it binds (or it finds no loop).
    import trio_asyncio  # noqa: F401

    names = ["thread", "trio-asyncio"]
    results: dict[str, Any] = {name: {} for name in names}
    results["direct"] = {"round_trip_us": []}
    for round_no in range(rounds):
        for name in names if round_no % 2 == 0 else names[::-1]:
            out = trio.run(_bridge_round, name, round_trips, cancels)
            for key, value in out.items():
                results[name].setdefault(key, []).append(value)
        results["direct"]["round_trip_us"].append(_direct_round_trips(round_trips))
    print(json.dumps(results))


def _direct_round_trips(round_trips: int) -> float:
    """µs per ``SELECT 1`` of a blocking psycopg connection, no bridge: the floor of both."""
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute("SELECT 1")
        started = time.perf_counter()
        for _ in range(round_trips):
            conn.execute("SELECT 1").fetchone()
        return 1e6 * (time.perf_counter() - started) / round_trips


async def _bridge_round(name: str, round_trips: int, cancels: int) -> dict[str, Any]:
    app = f"trioplay_bench_{uuid.uuid4().hex[:8]}"
    if name == "thread":
        async with _thread_bridge(app) as run_query:
            return await _exercise(run_query, app, round_trips, cancels)
    import trio_asyncio

    async with trio_asyncio.open_loop(), _asyncio_bridge(app) as run_query:
        return await _exercise(run_query, app, round_trips, cancels)


class _thread_bridge:
    """``run_query(sql)`` through the store's own bridge: a ``Pool`` of one worker."""

    def __init__(self, app: str) -> None:
        import psycopg

        from trioplay.stores._pg_bridge import Pool, Worker

        def connect() -> Any:
            return psycopg.Connection.connect(POSTGRES, autocommit=True, application_name=app)

        self._pool = Pool(1, lambda: Worker(connect, app), cancel_timeout=0.25)

    async def __aenter__(self) -> Any:
        pool = self._pool

        async def run_query(sql: str) -> Any:
            return await pool.run(lambda conn: conn.execute(sql).fetchone(), timeout=30)

        return run_query

    async def __aexit__(self, *exc_info: object) -> None:
        await self._pool.stop()  # waits up to 1 s for its thread


class _asyncio_bridge:
    """``run_query(sql)`` through psycopg's ``AsyncConnection`` under trio-asyncio."""

    def __init__(self, app: str) -> None:
        self._app = app
        self._conn: Any = None

    async def __aenter__(self) -> Any:
        import psycopg
        import trio_asyncio

        self._conn = await trio_asyncio.aio_as_trio(psycopg.AsyncConnection.connect)(
            POSTGRES, autocommit=True, application_name=self._app
        )
        conn = self._conn

        async def query(sql: str) -> Any:
            cursor = await conn.execute(sql)
            return await cursor.fetchone()

        async def run_query(sql: str) -> Any:
            return await trio_asyncio.aio_as_trio(query)(sql)

        return run_query

    async def __aexit__(self, *exc_info: object) -> None:
        import trio_asyncio

        await trio_asyncio.aio_as_trio(self._conn.close)()


async def _exercise(run_query: Any, app: str, round_trips: int, cancels: int) -> dict[str, Any]:
    await run_query("SELECT 1")  # connected, warm
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(round_trips):
        if (await run_query("SELECT 1")) != (1,):
            raise AssertionError("SELECT 1 did not answer 1")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    back_ms: list[float] = []
    stopped = answers = 0
    for _ in range(cancels):
        deadline = trio.current_time() + CANCEL_AFTER
        with trio.move_on_at(deadline):
            await run_query("SELECT pg_sleep(10)")
            raise AssertionError("pg_sleep(10) was not cancelled")
        back_ms.append(1e3 * (trio.current_time() - deadline))
        await trio.sleep(1)
        stopped += not await trio.to_thread.run_sync(_still_sleeping, app)
        try:
            with trio.fail_after(5):
                answers += (await run_query("SELECT 1")) == (1,)
        except Exception as exc:  # the bridge's connection may be gone after a cancel
            print(f"peers: after a cancel, SELECT 1 failed: {exc!r}", file=sys.stderr)
    return {
        "round_trip_us": 1e6 * elapsed / round_trips,
        "cpu_us_per_round_trip": 1e6 * cpu / round_trips,
        "cancel_back_ms": statistics.median(back_ms) if back_ms else None,
        "cancel_back_ms_max": max(back_ms, default=None),
        "cancels": cancels,
        "server_stopped": stopped,
        "answered_after": answers,
    }


def _still_sleeping(app: str) -> bool:
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND state = 'active' AND query LIKE 'SELECT pg_sleep%%'",
            (app,),
        ).fetchone()
    return bool(row and row[0])


def bridges(python: Path, round_trips: int, cancels: int, rounds: int) -> dict[str, Any]:
    print(
        f"bridge: {round_trips:,} SELECT 1 round trips and {cancels} cancelled pg_sleep(10) "
        f"(after {CANCEL_AFTER * 1e3:g} ms) per round, {rounds} round(s), thread vs trio-asyncio"
    )
    command = [sys.executable, "-m", "benchmarks.peers", "--child-bridge", site_packages(python)]
    command += [str(round_trips), str(cancels), str(rounds)]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=False, env=clean_env()
    )
    if done.returncode != 0:
        raise RuntimeError(f"peers: the bridge child failed:\n{tail(done.stdout + done.stderr)}")
    if done.stderr.strip():
        print(tail(done.stderr))
    raw: dict[str, dict[str, list[Any]]] = json.loads(done.stdout.strip().splitlines()[-1])
    direct = min(raw.pop("direct")["round_trip_us"])
    print(f"  {'direct':<13}{direct:8.0f} µs/round trip (blocking psycopg, no bridge: the floor)")
    best: dict[str, dict[str, Any]] = {}
    for name, values in raw.items():
        best[name] = {
            "round_trip_us": min(values["round_trip_us"]),
            "cpu_us_per_round_trip": min(values["cpu_us_per_round_trip"]),
            "cancel_back_ms": statistics.median(values["cancel_back_ms"]),
            "cancel_back_ms_max": max(values["cancel_back_ms_max"]),
            "server_stopped": f"{sum(values['server_stopped'])}/{sum(values['cancels'])}",
            "answered_after": f"{sum(values['answered_after'])}/{sum(values['cancels'])}",
        }
        b = best[name]
        print(
            f"  {name:<13}{b['round_trip_us']:8.0f} µs/round trip ({b['cpu_us_per_round_trip']:.0f}"
            f" µs CPU); cancelled query back after {b['cancel_back_ms']:.1f} ms (max"
            f" {b['cancel_back_ms_max']:.1f}), stopped on the server {b['server_stopped']},"
            f" connection answers after {b['answered_after']}"
        )
    ratio = best["trio-asyncio"]["round_trip_us"] / best["thread"]["round_trip_us"]
    print(f"  round trip, trio-asyncio / thread: {ratio:.2f}")
    return {
        "rounds": raw,
        "best": best,
        "direct_round_trip_us": direct,
        "round_trip_ratio_asyncio_vs_thread": ratio,
    }


# -- the benchmark ----------------------------------------------------------
def run(
    *,
    rows: int = DEFAULT_ROWS,
    latency_rows: int = LATENCY_ROWS,
    rounds: int = DEFAULT_ROUNDS,
    contenders: tuple[str, ...] = CONTENDERS,
    quick: bool = False,
    save: bool = True,
) -> dict[str, Any]:
    names = chosen(contenders, CONTENDERS)
    started = time.time()
    payload: dict[str, Any] = {
        "benchmark": "peers",
        "started_at": stamp(started),
        "pins": list(PINS),
        "machine": machine(),
        "skipped": {},
        "races": {},
    }
    found = scratch_python(install=not quick)
    python = found if isinstance(found, Path) else None
    if python is None:
        banner = "!" * 78
        print(f"{banner}\npeers: SKIPPING DBOS and trio-asyncio: {found}\n{banner}")
        for name in names:
            if name != "trioplay":
                payload["skipped"][name] = str(found)
        names = [name for name in names if name.startswith("trioplay")]
    needs_postgres = any(RACES[RACERS[n][0]].store == "postgres" for n in names if n in RACERS)
    problem = postgres_problem() if needs_postgres or "bridge" in names else None
    for kind, workload in RACES.items():
        racers = [name for name in names if RACERS.get(name, ("",))[0] == kind]
        if racers and workload.store == "postgres" and problem is not None:
            print(f"peers: {problem}; skipping {', '.join(racers)}")
            payload["skipped"].update(dict.fromkeys(racers, problem))
        elif racers:
            count = latency_rows if workload.latency else rows
            payload["races"][kind] = race(workload, count, rounds, racers, python)
    if "bridge" in names and python is not None:
        if problem is None:
            trips, cancels = (QUICK_ROUND_TRIPS, QUICK_CANCELS) if quick else (ROUND_TRIPS, CANCELS)
            payload["bridge"] = bridges(python, trips, cancels, rounds)
        else:
            print(f"bridge: {problem}; skipping it")
            payload["skipped"]["bridge"] = problem
    payload["machine"]["loadavg_after"] = list(os.getloadavg())
    if save:
        print(f"saved {save_results('peers', payload)}")
    return payload


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-trioplay"]:
        trioplay_child(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1:2] == ["--child-bridge"]:
        bridge_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit("usage: python -m benchmarks peers (see benchmarks/peers.py)")
