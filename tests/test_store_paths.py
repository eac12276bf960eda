"""A SQLite store path that cannot hold a database says which path, why and
what to do, from the library and from the command line (issue 14, point 5);
SQLite itself says only "unable to open database file".

The read-only folder needs a user that the folder's mode binds: root writes
through mode bits, so as root the test checks instead that such a folder is
not refused (there is nothing wrong for root), and the "cannot be created
there" path is covered by a path below a regular file.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

import pytest

from trioplay import StoreError
from trioplay.stores.sqlite import SqliteStore

from .support import cli

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

AS_ROOT = os.geteuid() == 0

PLAY = """
import trioplay

@trioplay.play("one")
async def one(ctx, input):
    await ctx.dataset("d", [{"k": 1}]).run()
"""


async def _open_error(path: Path) -> StoreError:
    store = SqliteStore(path)
    with pytest.raises(StoreError) as raised:
        await store.open()
    with pytest.raises(StoreError, match="not open"):
        await store.list_runs()
    return raised.value


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        yield folder
    finally:
        folder.chmod(0o700)


async def test_a_directory_as_the_store_path(tmp_path: Path) -> None:
    folder = tmp_path / "folder.db"
    folder.mkdir()
    error = await _open_error(folder)
    assert str(error) == (
        f"sqlite:///{folder}: open: {folder} is a directory; name a database file, "
        f"such as sqlite:///{folder / 'trioplay.db'}"
    )
    assert isinstance(error.__cause__, sqlite3.OperationalError)  # what SQLite said


async def test_a_store_path_below_a_regular_file(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    path = blocker / "sub" / "trioplay.db"
    error = await _open_error(path)
    assert str(error) == (
        f"sqlite:///{path}: open: {blocker} is a file, not a directory, so {path} cannot "
        f"be created below it; name a path in a directory, or move {blocker} away"
    )


async def test_a_store_in_a_folder_that_is_not_writable(read_only: Path) -> None:
    path = read_only / "trioplay.db"
    if AS_ROOT:
        # Root writes through the mode bits: nothing is wrong, nothing is refused.
        store = SqliteStore(path)
        await store.open()
        await store.aclose()
        assert path.is_file()
        return
    error = await _open_error(path)
    assert str(error) == (
        f"sqlite:///{path}: open: the directory {read_only} is not writable; SQLite "
        "creates the database and its -wal and -shm files there: name a path in a "
        "writable directory"
    )


def test_the_command_line_says_the_same_before_the_run(tmp_path: Path) -> None:
    play = tmp_path / "one.py"
    play.write_text(PLAY)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    done = cli("run", str(play), "--store", f"sqlite:///{folder}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"error: store sqlite:///{folder}: {folder} is a directory; name a database file, "
        f"such as sqlite:///{folder / 'trioplay.db'}"
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("x\n")
    path = blocker / "s.db"
    done = cli("runs", "list", "--store", f"sqlite:///{path}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"error: store sqlite:///{path}: {blocker} is a file, not a directory, so {path} "
        f"cannot be created below it; name a path in a directory, or move {blocker} away"
    )


def test_the_command_line_on_a_folder_that_is_not_writable(tmp_path: Path, read_only: Path) -> None:
    play = tmp_path / "one.py"
    play.write_text(PLAY)
    path = read_only / "s.db"
    done = cli("run", str(play), "--store", f"sqlite:///{path}", cwd=tmp_path)
    if AS_ROOT:
        assert done.returncode == 0, done.stderr  # root may write there: no refusal
        assert "d: 1 completed" in done.stdout
        return
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"error: store sqlite:///{path}: the directory {read_only} is not writable; SQLite "
        "creates the database and its -wal and -shm files there: name a path in a "
        "writable directory"
    )
