"""The benchmark suite still runs: every benchmark, in a short form, does its work and checks it.

The numbers of so small a run mean nothing (they come from ``benchmarks/``
runs, see docs/benchmarks.md); what this guards is that each contender,
floors included, still runs and checks its own output, so no benchmark rots.
The PostgreSQL ones need the test server (skipped without it, failed under
``CI=true``); the DBOS one needs the scratch virtualenv that ``python -m
benchmarks peers`` makes, and skips, saying so, without it: tests never
install anything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from benchmarks import latency, latency_waits, peers, plot, scenarios
from benchmarks.throughput import CONTENDERS

from .test_postgres import DSN, require_postgres

ROOT = Path(__file__).resolve().parent.parent


def test_every_throughput_contender_runs_and_checks_its_work() -> None:
    command = ["throughput", "--rows", "600", "--rounds", "1", "--no-save"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("contender", 1)[1]
    for name in CONTENDERS:
        assert f"\n{name} " in table, (name, done.stdout)
    assert "provider_calls=1,200 (2 x rows = 1,200)" in done.stdout


def test_fetch_races_plain_httpx_and_checks_every_request() -> None:
    # The benchmark checks itself: the server counts the requests it answered,
    # the play its completed rows and fetches.
    # 200 requests, past the 64 connections: the quick form's 1,000 check nothing more.
    out = _bench("fetch", "--quick", "--rows", "200", timeout=120).stdout
    table = out.split("contender", 1)[1]
    for name in ("httpx", "sqlite"):
        assert f"\n{name} " in table, (name, out)
    assert "ratio ctx.fetch (sqlite) / plain httpx: " in out


def test_memory_measures_the_peak_of_a_fresh_process() -> None:
    out = _bench("memory", "--quick", timeout=120).stdout
    assert re.search(r"^  small +2,000 rows +peak +[\d.]+ MB", out, re.M), out


@pytest.mark.postgres
def test_scaling_shares_one_run_between_processes_on_both_stores() -> None:
    require_postgres()
    out = _bench("scaling", "--quick", timeout=240).stdout
    for store in ("sqlite", "postgres"):
        for processes in (1, 4):
            assert f"  {store:13s} {processes} process(es) " in out, (store, processes, out)
    assert "rows per process [2000]" in out, out


def test_scenarios_times_a_scenario_from_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = scenarios.run(rounds=1, save=False, names=("slow-body",))
    out = capsys.readouterr().out
    assert re.search(r"^  slow-body +[\d.]+s +[\d.]+s +[\d.]+s$", out, re.M), out
    assert "target: every scenario < 2 s: worst " in out
    assert re.search(r"^  six-hour-stall +[\d.]+s  \(6 h virtual; target < 1 s of CPU", out, re.M)
    assert list(result["results"]) == ["slow-body"]


# -- the benchmarks of issue 15, in short form --------------------------------
def _bench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks ARGS`` against the test server, nothing saved."""
    env = {**os.environ, "TRIOPLAY_BENCH_POSTGRES": DSN}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.postgres
def test_latency_races_raw_trio_and_says_where_the_time_goes() -> None:
    require_postgres()
    out = _bench("latency", "--quick", timeout=240).stdout
    table = out.split("contender", 1)[1]
    for name in latency.CONTENDERS:
        assert f"\n  {name} " in table, (name, out)
    for name in latency.CONTENDERS[1:]:
        # The recorded run split its calls into every phase, and timed the store.
        line = next(
            line for line in out.splitlines() if line.startswith(f"  {name} ") and "per row" in line
        )
        assert all(f"{phase} " in line for phase, _ in latency.PHASES), line
    assert "claim_many" in out
    assert "complete_many" in out


def test_latency_waits_in_virtual_time_reach_the_bound_only_without_store_latency() -> None:
    out = _bench("latency-waits", "--quick", "--no-save", timeout=120).stdout
    ratios = {
        name: float(re.search(rf"\n  {re.escape(name)} .* ([0-9.]+) of the bound", out)[1])  # type: ignore[index]
        for name in latency_waits.CASES
    }
    # CPU takes no virtual time: with instant store calls the map is raw Trio's
    # bound exactly, and each slower store costs more.
    assert ratios["none"] == 1.0, out
    assert ratios["none"] > ratios["sqlite-like"] > ratios["3ms"] > ratios["postgres-like"], out


@pytest.mark.postgres
def test_scaling_latency_shares_one_run_between_processes() -> None:
    require_postgres()
    out = _bench("scaling-latency", "--quick", timeout=240).stdout
    assert "rows per process [512]" in out, out
    assert "rows per process [128, 128, 128, 128]" in out, out
    assert "target (postgres): 4 processes >= 3.6x one" in out
    assert "target (postgres-page-1s): 4 processes >= 3.6x one" in out


@pytest.mark.postgres
def test_throughput_on_postgres_reports_cpu_per_durable_call() -> None:
    require_postgres()
    out = _bench(
        "throughput",
        "--only",
        "postgres,sqlite",
        "--rows",
        "300",
        "--rounds",
        "1",
        "--no-save",
        timeout=120,
    ).stdout
    assert "provider_calls=600" in out
    line = next(line for line in out.splitlines() if line.startswith("CPU µs per durable call"))
    assert "sqlite " in line, line
    assert "postgres " in line, line
    assert "in the server" in line, line


@pytest.mark.postgres
def test_peers_short_form_uses_an_installed_virtualenv_or_skips_loudly() -> None:
    """Never installs (no network in tests): an earlier ``python -m benchmarks peers`` must
    have made the scratch virtualenv, or this skips and says so."""
    found = peers.scratch_python(install=False)
    if not isinstance(found, Path):
        pytest.skip(f"SKIPPED THE DBOS PEERS BENCHMARK: {found}")
    require_postgres()
    out = _bench("peers", "--quick", timeout=240).stdout
    assert "SKIPPING" not in out, out
    assert f"peers: {peers.QUICK_ROWS} rows" in out
    assert "target: trioplay >= 50x the faster DBOS (dbos-wal)" in out
    assert "the faster DBOS (dbos-pg) on postgres\n" in out, out
    assert "the faster DBOS (dbos-pg-50ms) on postgres-50ms" in out, out
    for name in ("direct", "thread", "trio-asyncio"):
        assert f"\n  {name} " in out, (name, out)
    assert "stopped on the server 2/2" in out, out


def test_plot_draws_both_panels_with_their_bounds(tmp_path: Path) -> None:
    for name in ("latency", "scaling-latency"):
        (tmp_path / f"{name}-2026-12-01.json").write_text(json.dumps(PLOT_INPUT[name]))
    out = plot.run(out=tmp_path / "plot.svg", where=tmp_path)
    assert out is not None
    svg = ElementTree.parse(out).getroot()
    texts = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "bound: 256 rows in flight / (2 x latency)" in texts
    assert "bound: x N one process (from go)" in texts
    assert any("x0.64 at 50 ms, x0.96 at 500 ms" in t for t in texts), texts
    lines = list(svg.iter("{http://www.w3.org/2000/svg}polyline"))
    assert len(lines) == 5 + 3  # bound + 4 contenders, bound + 2 scaling series


def test_the_published_plot_is_drawn_from_the_newest_results() -> None:
    """docs/img/latency-scaling.svg is what ``python -m benchmarks plot`` draws now."""
    latest = plot.render(plot.newest("latency"), plot.newest("scaling-latency"))
    assert plot.OUT.read_text() == latest, "run `python -m benchmarks plot`"


def _race(latency: float, rates: dict[str, float], ratios: dict[str, float]) -> dict[str, Any]:
    return {"latency_s": latency, "rows_per_s": rates, "ratio_vs_trio": ratios}


PLOT_INPUT: dict[str, Any] = {
    "latency": {
        "in_flight": 256,
        "results": {
            "50ms": _race(
                0.05,
                {"trio": 2400, "sqlite": 1536, "sqlite-window": 1400, "postgres": 1200},
                {"trio": 1.0, "sqlite": 0.64, "sqlite-window": 0.58, "postgres": 0.5},
            ),
            "500ms": _race(
                0.5,
                {"trio": 250, "sqlite": 240, "sqlite-window": 238, "postgres": 220},
                {"trio": 1.0, "sqlite": 0.96, "sqlite-window": 0.95, "postgres": 0.88},
            ),
        },
    },
    "scaling-latency": {
        "latency_s": 0.1,
        "in_flight_per_process": 64,
        "results": {
            "postgres": [
                {
                    "processes": n,
                    "rows_per_s": 200 * n**0.5,
                    "rows_per_s_from_go": 250 * n,
                    "scaling": n**0.5,
                    "scaling_from_go": float(n),
                }
                for n in (1, 2, 4)
            ]
        },
    },
}


@pytest.mark.postgres
def test_store_calls_times_every_operation_on_both_stores() -> None:
    require_postgres()
    out = _bench("store-calls", "--quick", timeout=120).stdout
    for store, operations in (
        ("sqlite", ("claim", "complete", "sheet", "replay")),
        ("postgres", ("claim", "complete", "sheet", "replay", "select 1")),
    ):
        for operation in operations:
            assert f"  {store:8} {operation:9} cpu " in out, (store, operation, out)
    assert "server cpu" in out


def test_peers_sqlite_races_never_reach_for_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A race on SQLite alone makes and drops its stores without the PostgreSQL server."""
    monkeypatch.setattr(peers, "POSTGRES", "postgresql://postgres@127.0.0.1:1/nothing-here")
    databases = peers._Databases(tmp_path)
    urls = [databases.for_racer(name, "sqlite") for name in ("trioplay", "dbos-wal")]
    assert all(url.startswith(f"sqlite:///{tmp_path}") for url in urls), urls
    assert len(set(urls)) == 2
    databases.drop()  # nothing of PostgreSQL to drop: no connection tried
