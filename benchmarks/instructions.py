"""Instructions per row: the throughput contenders' cost, counted instead of timed.

On a shared machine a timed run moves by tens of percent with the
neighbours' load; the number of machine instructions a run executes does
not. This benchmark runs each throughput contender (the same code, rows and
checks as :mod:`benchmarks.throughput`) under Valgrind's callgrind, which
counts every instruction the process executes, at two sizes, and reports

    instructions per row = (Ir(rows) - Ir(rows / 5)) / (rows - rows / 5)

so start-up, imports and opening the store cancel out. Two runs of the same
code agree to about 0.1%, so a change of a few percent is visible at once,
where the timed benchmark needs interleaved rounds to see a 10% change.
Ratios to ``baseline-chunks`` are printed next to the counts.

Instructions are not time (a cache miss costs no instruction, a system call
is counted only on the user side), so this complements the throughput
benchmark, it does not replace it. It needs ``valgrind`` on the ``PATH``
(Debian: ``apt-get install valgrind``); a run under callgrind is some 50 times
slower, hence the small default of 2,500 rows (about 5 minutes in all).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import throughput
from .workload import chosen, machine, save_results, stamp

DEFAULT_ROWS = 2_500
DEFAULT_CONTENDERS = ("baseline-chunks", "floor-trio", "floor-sqlite", "memory", "sqlite")
_COLLECTED = re.compile(r"Collected : (\d+)")


def child(name: str, rows: int) -> None:
    """Run one contender once, in this process (under callgrind), and check its work."""
    with tempfile.TemporaryDirectory(prefix="trioplay-ir-") as tmp:
        throughput.measure(name, rows, Path(tmp), "ir")


def count(name: str, rows: int) -> int:
    """Instructions executed by a whole process running ``name`` over ``rows`` rows."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "benchmarks.instructions",
        name,
        str(rows),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(
            f"{name} ({rows} rows) under callgrind failed (exit {done.returncode}):\n"
            + done.stderr[-2000:]
        )
    return int(found.group(1))


def run(
    rows: int = DEFAULT_ROWS,
    save: bool = True,
    contenders: tuple[str, ...] = DEFAULT_CONTENDERS,
) -> dict[str, Any]:
    """Count instructions per row of each contender; print a table and return (and save) it."""
    if shutil.which("valgrind") is None:
        raise SystemExit(
            "instructions: valgrind is not installed (Debian: apt-get install valgrind);"
            " the timed benchmarks (throughput, compare) need nothing more"
        )
    chosen(contenders, throughput.KNOWN)
    small = max(1, rows // 5)
    print(f"instructions: {small:,} and {rows:,} rows under callgrind, per row of the difference")
    started = time.time()
    where = machine()
    per_row: dict[str, float] = {}
    for name in contenders:
        low, high = count(name, small), count(name, rows)
        per_row[name] = (high - low) / (rows - small)
        print(f"  {name:<17}{per_row[name]:>14,.0f} instructions/row", flush=True)
    base = per_row.get("baseline-chunks")
    ratio = {name: base / value for name, value in per_row.items()} if base else {}
    if ratio:
        print()
        print(f"{'contender':<18}{'instr/row':>14}{'baseline / it':>15}")
        for name, value in per_row.items():
            print(f"{name:<18}{value:>14,.0f}{ratio[name]:>14.3f}x")
        print("(baseline / it: the baseline's instructions per row over the contender's)")
    results = {
        "benchmark": "instructions",
        "started_at": stamp(started),
        "rows": [small, rows],
        "machine": where,
        "instructions_per_row": per_row,
        "ratio_vs_baseline": ratio,
    }
    if save:
        print(f"saved {save_results('instructions', results)}")
    return results


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]))
