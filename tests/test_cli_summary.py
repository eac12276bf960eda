"""The summary adds up, the first error is the one shown, and the exit code
says whether the run or its export failed. Every test runs the real entry
point."""

from __future__ import annotations

import re
from pathlib import Path

from .support import run_trioplay

FAILING = """
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("check")
async def check(input, call):
    if input["n"] % 3 == 2:
        raise trioplay.ToolExecutionError("refused")
    return input["n"]


async def checked(row, rc):
    return await rc.tool("check", {"n": row["n"]})


@trioplay.play("strict")
async def strict(ctx, input):
    rows = [{"n": n} for n in range(12)]
    await ctx.dataset("d", rows).with_column("v", checked).run(key="n", on_row_error="fail")
"""


def test_a_failed_map_counts_the_failed_rows_it_stored(tmp_path: Path) -> None:
    play = tmp_path / "strict.py"
    play.write_text(FAILING)
    done = run_trioplay(
        "run", str(play), "--store", f"sqlite:///{tmp_path / 's.db'}", "--run-id", "r",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    match = re.search(
        r"^  d: (\d+) completed, (\d+) failed, 0 skipped; "
        r"sheet holds (\d+) completed, (\d+) failed$",
        done.stdout,
        re.M,
    )
    assert match is not None, done.stdout
    completed, failed, held_completed, held_failed = map(int, match.groups())
    assert failed >= 1
    assert (completed, failed) == (held_completed, held_failed)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert errors[0].startswith("error: ToolExecutionError: refused")


TWO = """
import trioplay

@trioplay.play("two")
async def two(ctx, input):
    await ctx.dataset("a", [{"k": 1}, {"k": 2}]).run()
    await ctx.dataset("b", [{"k": 3}]).run()
"""


def test_a_failed_export_exits_3_after_the_summary(tmp_path: Path) -> None:
    play = tmp_path / "two.py"
    play.write_text(TWO)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be\n")
    store = f"sqlite:///{tmp_path / 's.db'}"
    base = ["run", str(play), "--store", store, "--run-id", "r"]

    done = run_trioplay(*base, "--out", str(blocker / "out.csv"), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("run r: completed (play two, attempt 1)\n")
    assert "  a: 2 completed, 0 failed, 0 skipped; sheet holds 2 completed, 0 failed" in done.stdout
    lines = done.stderr.strip().splitlines()
    [error] = [line for line in lines if line.startswith("error: ")]
    assert f"writing --out {blocker / 'out.csv'} failed" in error
    assert lines[-1] == (
        f"the run completed and its rows are in the store: "
        f"trioplay export r DATASET --out FILE --store {store}"
    )

    dash = run_trioplay(*base, "--out", "-", cwd=tmp_path)
    assert dash.returncode == 3, dash.stderr
    assert dash.stdout == ""
    assert "run r: completed (play two, attempt 2)" in dash.stderr
    assert "error: UsageError: --out - writes one dataset, and this run has 2 (a, b)" in (
        dash.stderr
    )


CUT_STORE = '''
"""A store whose connection is cut at its first sheet write (a test double)."""
from trioplay import StoreError
from trioplay.stores.memory import MemoryStore


class CutStore(MemoryStore):
    cut = False

    def _check(self, what):
        if self.cut:
            raise StoreError(f"{what}: connection lost")

    async def write_terminal_rows(self, *args, **kwargs):
        self.cut = True
        raise StoreError("write_terminal_rows: connection lost while writing 3 rows")

    async def finish_attempt(self, *args, **kwargs):
        self._check("finish_attempt")

    async def list_datasets(self, *args, **kwargs):
        self._check("list_datasets")

    async def count_rows(self, *args, **kwargs):
        self._check("count_rows")


def open_store(url):
    return CutStore()
'''


def test_the_first_error_is_shown_when_the_store_goes_away(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    info = plugins / "cutstore-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cutstore\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[trioplay.stores]\ncut = cutstore:open_store\n")
    (plugins / "cutstore.py").write_text(CUT_STORE)
    play = tmp_path / "rows.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('rows')\n"
        "async def rows(ctx, input):\n"
        "    await ctx.dataset('d', [{'k': 1}, {'k': 2}, {'k': 3}]).run()\n"
    )
    done = run_trioplay(
        "run", str(play), "--store", "cut://", "--run-id", "r",
        cwd=tmp_path,
        env={"PYTHONPATH": str(plugins)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("run r: failed (play rows, attempt 1)\n"), done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert "write_terminal_rows: connection lost while writing 3 rows" in errors[0]
    assert "list_datasets" not in done.stderr
