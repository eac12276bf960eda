"""Memory: peak resident set size of a whole map, each run in a fresh process.

Each variant runs the benchmark play on SQLite (a fresh file in a temporary
directory) in a child process, ``python -m benchmarks.memory --child ...``,
so that nothing of an earlier run, of the parent or of another variant is
counted. Peak RSS is read twice and both are reported: the child's own
``VmHWM`` from ``/proc/self/status`` at the end of its run, and the
``ru_maxrss`` the kernel reports for exactly that child through
``os.wait4``. ``start`` is the child's RSS after its imports, before the run:
the interpreter, Trio, trioplay and sqlite3 cost that much anyway.

Variants:

- ``small``: ``N`` small rows (default 100,000), two zero-latency tool
  columns, as in the throughput benchmark.
- ``small-10x``: the same at ten times ``N`` (1,000,000 by default). With
  ``small`` in the same invocation it also prints the ratio of the two peaks.
- ``large``: 10,000 rows whose one tool returns 1 MiB each (a string of
  1 MiB, built afresh for each call, that the resolver keeps as the row's
  column), with the default budgets. It writes two copies of every payload
  to SQLite (receipt and sheet), about 20 GB of disk on the way: mind the
  free space of ``$TMPDIR``.

Row sources are generators: no variant builds its rows up front.

Targets (issue 5): ``small-10x`` at 1,000,000 rows at most 300 MB and at most
1.3 x ``small`` at 100,000; ``large`` under 700 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
DEFAULT_ROWS = 100_000
LARGE_ROWS = 10_000
QUICK_LARGE_ROWS = 200
PAYLOAD_BYTES = MiB
TARGET_1M_MB = 300
TARGET_RATIO = 1.3
TARGET_LARGE_MB = 700
_REPO = Path(__file__).resolve().parent.parent


# -- the child ----------------------------------------------------------------
def _status_kib(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (Linux), or ``None``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def _run_child(variant: str, rows: int, db: str) -> dict[str, Any]:
    import trioplay

    from .workload import DATASET, check_output, enrich_play, registry, source_rows

    tools = registry()

    async def blob_tool(input: dict[str, Any], call: trioplay.ToolCall) -> dict[str, Any]:
        head = input["domain"] + ":"
        return {
            "domain": input["domain"],
            "blob": (head * (PAYLOAD_BYTES // len(head) + 1))[:PAYLOAD_BYTES],
        }

    async def resolve_blob(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("blob", {"domain": row["domain"]}))["blob"]

    @trioplay.play("bench-blobs")
    async def blob_play(ctx: trioplay.PlayContext, input: dict[str, Any]) -> dict[str, Any]:
        dataset = ctx.dataset(DATASET, source_rows(input["rows"])).with_column("blob", resolve_blob)
        result = await dataset.run(key="domain")
        return {
            "completed": result.completed_count,
            "failed": result.failed_count,
            "skipped": result.skipped_count,
            "preview": [],
        }

    tools.add("blob", blob_tool)
    play = blob_play if variant == "large" else enrich_play
    calls_per_row = 1 if variant == "large" else 2
    start = time.perf_counter()
    async with trioplay.open_runtime(store=f"sqlite:///{db}", tools=tools) as rt:
        output = await rt.run(play, {"rows": rows}, run_id=f"bench-{variant}")
        stats = rt.last_stats
    elapsed = time.perf_counter() - start
    provider_calls = stats.provider_calls if stats else -1
    check_output(output, rows, None)
    if provider_calls != calls_per_row * rows:
        raise AssertionError(
            f"expected {calls_per_row * rows} provider calls, got {provider_calls}"
        )
    del output
    return {"elapsed": elapsed, "provider_calls": provider_calls, "db_bytes": _db_bytes(db)}


def _db_bytes(db: str) -> int:
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))


def child_main(variant: str, rows: int, db: str) -> None:
    import trio

    from .workload import git_describe

    start_kib = _status_kib("VmRSS")
    code = git_describe()  # what this child imported, if the tree moves during a long run
    result = trio.run(_run_child, variant, rows, db)
    result |= {"start_kib": start_kib, "vmhwm_kib": _status_kib("VmHWM"), "code": code}
    print(json.dumps(result))


# -- the parent ---------------------------------------------------------------
def measure(variant: str, rows: int) -> dict[str, Any]:
    """Run ``variant`` at ``rows`` in a fresh child; return its peaks in MB (10^6 bytes)."""
    with tempfile.TemporaryDirectory(prefix="trioplay-mem-") as tmp:
        db = str(Path(tmp) / "bench.db")
        cmd = [sys.executable, "-m", "benchmarks.memory", "--child", variant, str(rows), db]
        proc = subprocess.Popen(cmd, cwd=_REPO, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        # wait4 rather than wait: it gives the rusage of exactly this child.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"memory benchmark {variant} at {rows} rows failed ({proc.returncode})")
    child = json.loads(out.strip().splitlines()[-1])
    kib_to_mb = 1024 / 1e6
    return {
        "variant": variant,
        "rows": rows,
        "elapsed_s": child["elapsed"],
        "rows_per_s": rows / child["elapsed"],
        "peak_rss_mb": child["vmhwm_kib"] * kib_to_mb if child["vmhwm_kib"] else None,
        "ru_maxrss_mb": usage.ru_maxrss * kib_to_mb,
        "start_rss_mb": child["start_kib"] * kib_to_mb if child["start_kib"] else None,
        "db_mb": child["db_bytes"] / 1e6,
        "provider_calls": child["provider_calls"],
        "code": child["code"],
    }


def run(
    variants: list[str], *, rows: int | None, quick: bool = False, save: bool = True
) -> dict[str, Any]:
    """Measure ``variants`` one after the other; print a table; return (and save) it."""
    from .workload import machine, save_results

    base = rows or DEFAULT_ROWS
    counts = {
        "small": base,
        "small-10x": 10 * base,
        "large": rows or (QUICK_LARGE_ROWS if quick else LARGE_ROWS),
    }
    print(
        f"memory: peak RSS of a map on SQLite, a fresh process per variant: {', '.join(variants)}"
    )
    where = machine()  # before the runs: the code measured is the code at start
    measured: list[dict[str, Any]] = []
    for variant in variants:
        result = measure(variant, counts[variant])
        measured.append(result)
        print(
            f"  {variant:<10}{result['rows']:>10,} rows  peak {result['peak_rss_mb']:7.1f} MB"
            f"  (ru_maxrss {result['ru_maxrss_mb']:.1f} MB,"
            f" at start {result['start_rss_mb']:.1f} MB)"
            f"  {result['elapsed_s']:7.1f} s  {result['rows_per_s']:>8,.0f} rows/s"
            f"  db {result['db_mb']:,.0f} MB"
        )
    by_variant = {m["variant"]: m for m in measured}
    summary: dict[str, Any] = {}
    if "small" in by_variant and "small-10x" in by_variant:
        small, big = by_variant["small"], by_variant["small-10x"]
        ratio = big["peak_rss_mb"] / small["peak_rss_mb"]
        summary["ratio_10x"] = ratio
        met = big["peak_rss_mb"] <= TARGET_1M_MB and ratio <= TARGET_RATIO
        summary["target_10x_met"] = met
        print(
            f"  peak at {big['rows']:,} / peak at {small['rows']:,} rows = {ratio:.2f}; target "
            f"(issue 5, 1M vs 100k): <= {TARGET_1M_MB} MB and <= {TARGET_RATIO} x: "
            f"{'met' if met else 'MISSED'}"
        )
    if "large" in by_variant:
        met = by_variant["large"]["peak_rss_mb"] < TARGET_LARGE_MB
        summary["target_large_met"] = met
        print(
            f"  target (issue 5, 10,000 x 1 MiB): < {TARGET_LARGE_MB} MB: "
            f"{'met' if met else 'MISSED'}"
        )
    results = {
        "benchmark": "memory",
        "variants": measured,
        "summary": summary,
        "machine": where | {"loadavg_after": list(os.getloadavg())},
    }
    if save:
        name = "memory-" + "+".join(variants)
        print(f"saved {save_results(name, results)}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "ROWS", "DB"), required=True)
    args = parser.parse_args(argv)
    variant, rows, db = args.child
    child_main(variant, int(rows), db)


if __name__ == "__main__":
    main()
