"""The benchmark suite still runs: every throughput contender does its work and passes its checks.

The numbers of so small a run mean nothing (they come from ``benchmarks/``
runs, see docs/benchmarks.md); what this guards is that each contender,
floors included, still runs and checks its own output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.throughput import CONTENDERS

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
