"""``--out`` writes where it is told: through a symlink to its target, into a
FIFO as it is, ``-`` to standard output. Every test runs the command line in
this process (``support.cli``)."""

from __future__ import annotations

import csv
import io
import os
import stat
import threading
from pathlib import Path

import pytest

from .support import cli

PLAY = """
import trioplay

@trioplay.play("rows")
async def rows(ctx, input):
    source = [{"n": i} for i in range(input.get("count", 5))]
    await ctx.dataset("d", source).with_column("twice", lambda row, rc: row["n"] * 2).run()
    if input.get("second"):
        await ctx.dataset("e", [{"m": 1}]).run()
"""


@pytest.fixture
def play(tmp_path: Path) -> Path:
    path = tmp_path / "rows.py"
    path.write_text(PLAY)
    return path


def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


EXPECTED = [{"n": str(i), "twice": str(i * 2)} for i in range(5)]


def test_out_writes_through_a_symlink_to_its_target(tmp_path: Path, play: Path) -> None:
    real = tmp_path / "real" / "rows.csv"
    real.parent.mkdir()
    real.write_text("old contents\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    done = cli(
        "run", str(play), "--store", store(tmp_path), "--run-id", "r", "--out", str(link),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert os.readlink(link) == str(real)
    assert rows_of(real.read_text()) == EXPECTED

    dangling = tmp_path / "later.csv"
    dangling.symlink_to(tmp_path / "real" / "not-yet.csv")
    done = cli("export", "r", "d", "--store", store(tmp_path), "--out", str(dangling), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert dangling.is_symlink()
    assert rows_of((tmp_path / "real" / "not-yet.csv").read_text()) == EXPECTED
    assert not list(tmp_path.rglob(".*.partial"))


def test_out_writes_into_a_fifo_as_it_is(tmp_path: Path, play: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []

    def read() -> None:
        with open(fifo, encoding="utf-8") as file:
            received.append(file.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done = cli("run", str(play), "--store", store(tmp_path), "--out", str(fifo), cwd=tmp_path)
    finally:
        if reader.is_alive():  # nothing opened the FIFO: let the reader go
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert rows_of(received[0]) == EXPECTED
    assert f"output: {fifo} (5 rows of d)" in done.stdout


def test_out_dash_is_standard_output(tmp_path: Path, play: Path) -> None:
    done = cli(
        "run", str(play), "--store", store(tmp_path), "--run-id", "r", "--out", "-",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert rows_of(done.stdout) == EXPECTED  # the rows only: the summary went to stderr
    assert "run r: completed" in done.stderr
    assert "output: - (5 rows of d)" in done.stderr
    assert not (tmp_path / "-").exists()

    exported = cli(
        "export", "r", "d", "--store", store(tmp_path), "--out", "-", "--format", "jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [f'{{"n":{i},"twice":{i * 2}}}' for i in range(5)]
    assert exported.stderr == "standard output: 5 rows of d (run r)\n"
    assert not (tmp_path / "-").exists()


def test_out_on_a_directory_is_refused(tmp_path: Path, play: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    cli("run", str(play), "--store", store(tmp_path), "--run-id", "r", cwd=tmp_path)
    done = cli("export", "r", "d", "--store", store(tmp_path), "--out", str(folder), cwd=tmp_path)
    assert done.returncode != 0
    assert f"{folder} is a directory" in done.stderr
    assert folder.is_dir()
    assert list(folder.iterdir()) == []
