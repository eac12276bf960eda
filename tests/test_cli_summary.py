"""The summary adds up, the first error is the one shown, and the exit code
says whether the run or its export failed. The tests whose store is a plugin
found on PYTHONPATH run the installed entry point in a process of their own
(the engine reads entry points once per process); the rest run the command line in
this process (``support.cli``)."""

from __future__ import annotations

import re
from pathlib import Path

from .support import cli, run_trioplay

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
    done = cli(
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
    # The summary's error line is the same, notes (which row failed) included.
    assert f"  {errors[0]}" in done.stdout.splitlines(), (errors[0], done.stdout)


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
    # --out names out.csv, which is fine; the files it becomes for two datasets
    # (out.a.csv, out.b.csv) are known after the run, and one is a folder.
    (tmp_path / "out.a.csv").mkdir()
    store = f"sqlite:///{tmp_path / 's.db'}"
    base = ["run", str(play), "--store", store, "--run-id", "r"]

    done = cli(*base, "--out", str(tmp_path / "out.csv"), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("run r: completed (play two, attempt 1)\n")
    assert "  a: 2 completed, 0 failed, 0 skipped; sheet holds 2 completed, 0 failed" in done.stdout
    lines = done.stderr.strip().splitlines()
    [error] = [line for line in lines if line.startswith("error: ")]
    assert f"--out {tmp_path / 'out.a.csv'} is a directory" in error
    assert f"writing --out {tmp_path / 'out.csv'} failed" in error
    assert lines[-1] == (
        f"the run completed and its rows are in the store: "
        f"trioplay export r DATASET --out FILE --store {store}"
    )

    dash = cli(*base, "--out", "-", cwd=tmp_path)
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
        return True

    async def list_datasets(self, *args, **kwargs):
        self._check("list_datasets")

    async def count_rows(self, *args, **kwargs):
        self._check("count_rows")


def open_store(url):
    return CutStore()
'''


def test_the_first_error_is_shown_when_the_store_goes_away(tmp_path: Path) -> None:
    plugins = _plugin(tmp_path, "cut", CUT_STORE)
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


def _plugin(tmp_path: Path, scheme: str, source: str) -> Path:
    """A folder holding a store plugin for ``scheme://`` (put it on PYTHONPATH)."""
    plugins = tmp_path / "plugins"
    module = f"{scheme}store"
    info = plugins / f"{module}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[trioplay.stores]\n{scheme} = {module}:open_store\n")
    (plugins / f"{module}.py").write_text(source)
    return plugins


CUT_LATER = '''
"""A store whose connection is cut at its second sheet write (a test double)."""
from pathlib import Path

from trioplay import StoreError
from trioplay.stores.memory import MemoryStore

HELD = Path(__file__).with_name("held.txt")


class CutLater(MemoryStore):
    writes = 0

    async def write_terminal_rows(self, run_id, dataset, rows, **kwargs):
        self.writes += 1
        if self.writes > 1:
            raise StoreError("write_terminal_rows: connection lost")
        written = await super().write_terminal_rows(run_id, dataset, rows, **kwargs)
        HELD.write_text(str(len(rows)))
        return written

    async def list_datasets(self, *args, **kwargs):
        raise StoreError("list_datasets: connection lost")


def open_store(url):
    return CutLater()
'''


def test_the_summary_counts_the_rows_written_before_the_writer_failed(tmp_path: Path) -> None:
    plugins = _plugin(tmp_path, "cutlater", CUT_LATER)
    play = tmp_path / "slow.py"
    play.write_text(
        "import trio, trioplay\n"
        "async def slow(row, rc):\n"
        "    await trio.sleep(0 if row['k'] < 5 else 0.5)\n"
        "    return row['k']\n"
        "@trioplay.play('slow')\n"
        "async def slow_play(ctx, input):\n"
        "    rows = [{'k': k} for k in range(10)]\n"
        "    await ctx.dataset('d', rows).with_column('v', slow).run(key='k')\n"
    )
    # No periodic progress: only the map's last counts can reach the summary.
    done = run_trioplay(
        "run", str(play), "--store", "cutlater://", "--run-id", "r",
        "--limit", "progress_flush_interval=60", "--limit", "writer_max_flush=0.05",
        cwd=tmp_path,
        env={"PYTHONPATH": str(plugins)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    held = int((plugins / "held.txt").read_text())
    assert 1 <= held <= 5  # the immediate rows, in one batch unless the machine is slow
    assert f"\n  d: {held} completed, 0 failed, 0 skipped\n" in done.stdout, done.stdout
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert error == "error: StoreError: write_terminal_rows: connection lost"


NO_RECEIPTS = '''
"""A store that cannot record completions (a test double)."""
from trioplay import StoreError
from trioplay.stores.memory import MemoryStore


class NoReceipts(MemoryStore):
    async def complete_many(self, items, *, now):
        raise StoreError(f"complete_many: connection lost while writing {len(items)}")


def open_store(url):
    return NoReceipts()
'''

MANY_CALLS = """
import trio, trioplay

tools = trioplay.ToolRegistry()


@tools.tool("finder")
async def finder(input, call):
    await trio.sleep(0.01)
    return input["k"]


async def found(row, rc):
    return await rc.tool("finder", {"k": row["k"]})


@trioplay.play("many")
async def many(ctx, input):
    rows = [{"k": k} for k in range(40)]
    await ctx.dataset("d", rows).with_column("v", found).run(key="k")
"""


def test_a_warning_repeated_per_call_is_said_once_with_a_count(tmp_path: Path) -> None:
    plugins = _plugin(tmp_path, "noreceipts", NO_RECEIPTS)
    play = tmp_path / "many.py"
    play.write_text(MANY_CALLS)
    argv = ["run", str(play), "--store", "noreceipts://", "--run-id", "r"]
    env = {"PYTHONPATH": str(plugins)}
    marker = "trioplay: tool 'finder' succeeded but its receipt could not be recorded"

    debug = run_trioplay(*argv, "--debug", cwd=tmp_path, env=env)
    assert debug.returncode == 1, debug.stderr
    every = [line for line in debug.stderr.splitlines() if line.startswith(marker)]
    assert len(every) > 1  # one per call in flight: --debug shows each one

    done = run_trioplay(*argv, cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len([line for line in lines if line.startswith(marker)]) == 1, done.stderr
    [more] = [line for line in lines if " more like " in line]
    assert re.fullmatch(
        r'trioplay: ([\d,]+) more like "tool \'finder\' succeeded but its receipt could not '
        r'be recorded \(.*…" not shown \(--debug shows every one\)',
        more,
    ), more
    assert int(re.findall(r"[\d,]+", more)[0]) >= 1
    # Said before the error line, which stays the last but one.
    assert lines.index(more) < len(lines) - 2
    assert lines[-2].startswith("error: ")


STALLS = """
import logging, trio, trioplay


class Stalls(logging.Handler):
    seen = 0

    def emit(self, record):
        Stalls.seen += 1


logging.getLogger("trioplay.stall").addHandler(Stalls())


async def stuck(row, rc):
    while Stalls.seen < 2:  # stuck until two stall lines were said, however long that takes
        await trio.sleep(0.05)
    return row["k"]


@trioplay.play("stalls")
async def stalls(ctx, input):
    await ctx.dataset("d", [{"k": 1}]).with_column("v", stuck).run(key="k")
"""


def test_stall_lines_are_never_collapsed(tmp_path: Path) -> None:
    play = tmp_path / "stalls.py"
    play.write_text(STALLS)
    done = cli(
        "run", str(play), "--store", f"sqlite:///{tmp_path / 's.db'}",
        "--limit", "stall_log_interval=0.3",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    stalls = [line for line in lines if line.startswith("trioplay.stall: d: no row committed")]
    assert len(stalls) >= 2, done.stderr
    assert " more like " not in done.stderr
