"""Compare: the throughput benchmark of an earlier revision against the working tree.

``python -m benchmarks compare --against REV [--rows N] [--rounds R]
[--only A,B]`` measures throughput contenders (default ``sqlite`` and
``memory``) of two versions of trioplay in one run:

- *old*: the commit ``REV`` (default ``HEAD``, so uncommitted work is
  compared with the committed state), exported with ``git archive`` and
  installed (not editable) into a virtualenv of its own. Both live in
  ``<tmp>/trioplay-bench-<sha>/`` and are reused by the next compare
  against the same commit. Its third-party packages are pinned to the
  versions of the current interpreter, so only trioplay differs.
- *new*: the working tree, run by the current interpreter (``.venv``).

Each measurement is one round of ``python -m benchmarks throughput --only
NAME --rows N --rounds 1 --no-save`` in a fresh process, run by that side's
interpreter in that side's source tree, so each side uses its own benchmark
code. Rounds interleave the two sides, and the side that goes first
alternates from round to round, so a neighbour's burst of CPU on a shared
machine hits both alike. Per contender the best rows/s and the best CPU
time per row of each side count; the result is new / old in rows/s and
old / new in CPU per row (above 1: the working tree is faster).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trioplay

from . import throughput
from .workload import clean_env, git_describe, install_venv, machine, save_results, stamp, tail

DEFAULT_ROWS = 20_000
DEFAULT_ROUNDS = 3
DEFAULT_CONTENDERS = ("sqlite", "memory")
ROOT = Path(__file__).resolve().parents[1]


class Side:
    """One version of trioplay to measure: an interpreter and a source tree."""

    def __init__(self, label: str, sha: str, python: Path, tree: Path) -> None:
        self.label = label
        self.sha = sha
        self.python = python
        self.tree = tree


def _fail(message: str) -> SystemExit:
    return SystemExit(f"compare: {message}")


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise _fail(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def prepare_old(rev: str) -> Side:
    """Export ``rev`` and install it into a virtualenv of its own, or reuse the cached one."""
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    short = _git("rev-parse", "--short", sha)
    cache = Path(tempfile.gettempdir()) / f"trioplay-bench-{sha}"
    src = cache / "src"
    venv = cache / "venv"
    python = venv / "bin" / "python"
    stamp = cache / "installed"
    if stamp.exists():
        print(f"compare: reusing {cache}")
        return Side(short, sha, python, src)

    print(f"compare: building {short} in {cache} (export, virtualenv, pip install)")
    shutil.rmtree(cache, ignore_errors=True)  # a build that did not finish
    try:
        _build(sha, short, cache)
    except BaseException:
        shutil.rmtree(cache, ignore_errors=True)
        raise
    stamp.write_text(f"{sha}\n")
    return Side(short, sha, python, src)


def _build(sha: str, short: str, cache: Path) -> None:
    """Export commit ``sha`` into ``cache/src`` and install it into a new ``cache/venv``."""
    src = cache / "src"
    venv = cache / "venv"
    src.mkdir(parents=True)
    archive = cache / "src.tar"
    _git("archive", "--format=tar", "-o", str(archive), sha)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(src)], check=True)
    archive.unlink()
    if not (src / "benchmarks" / "throughput.py").exists():
        raise _fail(f"{short} has no benchmarks/throughput.py; it cannot be compared")

    problem = install_venv(venv, [str(src)])
    if problem is not None:
        raise _fail(f"pip could not install {short} into {venv}: {problem}")


def current_side() -> Side:
    """The working tree, run by this interpreter (it must import trioplay from this tree)."""
    imported = Path(trioplay.__file__).resolve()
    if not imported.is_relative_to(ROOT):
        raise _fail(
            f"this interpreter imports trioplay from {imported}, not from {ROOT}; "
            f"run compare with the repository's .venv (an editable install)"
        )
    return Side(git_describe(), _git("rev-parse", "HEAD"), Path(sys.executable), ROOT)


def check_only_option(side: Side) -> None:
    """Fail clearly if ``side``'s benchmarks cannot run one contender alone."""
    done = subprocess.run(
        [str(side.python), "-m", "benchmarks", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=side.tree,
        env=clean_env(),
    )
    if done.returncode != 0:
        raise _fail(f"`python -m benchmarks --help` failed at {side.label}:\n{tail(done.stderr)}")
    if "--only" not in done.stdout:
        raise _fail(
            f"the benchmarks of {side.label} have no --only option, so their contenders "
            f"cannot be measured one at a time; compare against a later revision"
        )


def parse_table(output: str, name: str, rows: int) -> dict[str, float]:
    """Read ``name``'s line of the throughput table printed by ``benchmarks throughput``.

    The line reads: contender, best s, rows/s, vs baseline (``-`` without a
    baseline), cpu us/row, tasks/row, steps/row.
    """
    lines = output.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("contender")]
    if not headers:
        raise _fail(f"no throughput table in this output:\n{tail(output)}")
    for line in lines[headers[-1] + 1 :]:
        fields = line.split()
        if not fields or fields[0] != name:
            continue
        try:
            best = float(fields[1])
            rate = float(fields[2].replace(",", ""))
            cpu = float(fields[4])
            steps = float(fields[6])
        except (IndexError, ValueError):
            raise _fail(f"cannot read this line of the throughput table: {line!r}") from None
        if abs(rows / best - rate) > 0.01 * rate:  # both are rounded: wrong columns?
            raise _fail(f"rows/s and best s disagree in this table line: {line!r}")
        return {"seconds": best, "rows_per_s": rate, "cpu_us_per_row": cpu, "steps_per_row": steps}
    raise _fail(f"no line for {name} in this throughput table:\n{tail(output)}")


def measure(side: Side, name: str, rows: int) -> dict[str, float]:
    """One round of one contender, in a fresh process of ``side``."""
    command = [str(side.python), "-m", "benchmarks", "throughput"]
    command += ["--only", name, "--rows", str(rows), "--rounds", "1", "--no-save"]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, cwd=side.tree, env=clean_env()
    )
    if done.returncode != 0:
        raise _fail(
            f"{' '.join(command[1:])} failed at {side.label} (in {side.tree}):\n"
            f"{tail(done.stdout + done.stderr)}"
        )
    return parse_table(done.stdout, name, rows)


def run(
    against: str = "HEAD",
    rows: int = DEFAULT_ROWS,
    rounds: int = DEFAULT_ROUNDS,
    save: bool = True,
    contenders: tuple[str, ...] = DEFAULT_CONTENDERS,
) -> dict[str, Any]:
    """Measure ``against`` and the working tree alternately; print and return (and save) it."""
    unknown = set(contenders) - set(throughput.CONTENDERS)
    if unknown:
        known = ", ".join(throughput.CONTENDERS)
        raise _fail(f"unknown contender(s) {', '.join(sorted(unknown))}; known: {known}")
    started = time.time()
    where = machine()
    new = current_side()
    old = prepare_old(against)
    check_only_option(old)
    print(
        f"compare: throughput of {old.label} (old) and {new.label} (new, the working tree), "
        f"{rows:,} rows, best of {rounds} interleaved round(s)"
    )
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"old": [], "new": []} for name in contenders
    }
    for round_no in range(1, rounds + 1):
        order = [("old", old), ("new", new)]
        if round_no % 2 == 0:
            order.reverse()
        for name in contenders:
            for key, side in order:
                sample = measure(side, name, rows)
                samples[name][key].append(sample)
                print(
                    f"  round {round_no} {name:<17}{key} {side.label:<15}"
                    f"{sample['rows_per_s']:>10,.0f} rows/s"
                    f"  cpu {sample['cpu_us_per_row']:7.1f} us/row"
                    f"  steps {sample['steps_per_row']:5.2f}/row"
                )

    summary: dict[str, dict[str, Any]] = {}
    for name in contenders:
        best = {
            key: {
                "rows_per_s": max(s["rows_per_s"] for s in samples[name][key]),
                "cpu_us_per_row": min(s["cpu_us_per_row"] for s in samples[name][key]),
                "steps_per_row": samples[name][key][-1]["steps_per_row"],
            }
            for key in ("old", "new")
        }
        pairs = zip(samples[name]["old"], samples[name]["new"], strict=True)
        summary[name] = {
            "old": best["old"],
            "new": best["new"],
            "speedup_rows_per_s": best["new"]["rows_per_s"] / best["old"]["rows_per_s"],
            "speedup_cpu": best["old"]["cpu_us_per_row"] / best["new"]["cpu_us_per_row"],
            "speedup_rows_per_s_per_round": [n["rows_per_s"] / o["rows_per_s"] for o, n in pairs],
        }

    print()
    print(
        f"{'contender':<18}{'old rows/s':>11}{'new rows/s':>11}{'new/old':>9}"
        f"{'old cpu us':>12}{'new cpu us':>12}{'old/new':>9}{'steps/row old,new':>19}"
    )
    for name, s in summary.items():
        steps = f"{s['old']['steps_per_row']:.2f}, {s['new']['steps_per_row']:.2f}"
        print(
            f"{name:<18}{s['old']['rows_per_s']:>11,.0f}{s['new']['rows_per_s']:>11,.0f}"
            f"{s['speedup_rows_per_s']:>8.3f}x"
            f"{s['old']['cpu_us_per_row']:>12.1f}{s['new']['cpu_us_per_row']:>12.1f}"
            f"{s['speedup_cpu']:>8.3f}x{steps:>19}"
        )
    print(
        f"(old: {old.label}, new: {new.label}; best rows/s and least CPU us per row over "
        f"the rounds; above 1x the working tree is faster)"
    )
    for name, s in summary.items():
        per_round = ", ".join(f"{ratio:.3f}" for ratio in s["speedup_rows_per_s_per_round"])
        print(f"{name}: new/old rows/s per round: {per_round}")

    results = {
        "benchmark": "compare",
        "started_at": stamp(started),
        "rows": rows,
        "rounds": rounds,
        "machine": where | {"loadavg_after": list(os.getloadavg())},
        "old": {"describe": old.label, "sha": old.sha, "requested": against},
        "new": {"describe": new.label, "sha": new.sha},
        "samples": samples,
        "contenders": summary,
    }
    if save:
        print(f"saved {save_results(f'compare-{old.label}', results)}")
    return results
