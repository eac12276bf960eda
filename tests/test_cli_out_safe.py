"""``--out`` never destroys, and is refused before the run when it cannot be written
(issue 25, point 1).

An output (``--out``, ``--events``, ``--trace``) that is the same file as the
run store (or its ``-wal``/``-shm``), an input file, the play file or another
output is refused with exit 2 naming both paths, and the protected file is
left byte for byte as it was. "The same file" is checked through symlinks and
hard links. An output that cannot be written (a directory, a path below a
regular file, a folder that refuses new files, a name too long) is refused
before the play's tool is called: the tool counts its calls in a file beside
the play, and the count stays 0.

The tests call ``main([...])`` in-process, in ``tmp_path`` as the current folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trioplay._cli import main

PLAY = """
from pathlib import Path

import trioplay

tools = trioplay.ToolRegistry()
CALLS = Path(__file__).with_name("calls.log")


@tools.tool("twice")
async def twice(input, call):
    with CALLS.open("a") as file:
        file.write(f"{input['n']}\\n")
    return int(input["n"]) * 2


async def resolve(row, rc):
    return await rc.tool("twice", {"n": row["n"]})


@trioplay.play("rows")
async def rows(ctx, input):
    source = ctx.csv(input["csv"]) if "csv" in input else [{"n": i} for i in range(3)]
    await ctx.dataset("d", source).with_column("twice", resolve).run(key="n")
"""

AS_ROOT = os.geteuid() == 0


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the current folder, with the play ``rows.py`` and ``in.csv`` in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.py").write_text(PLAY)
    (tmp_path / "in.csv").write_text("n\n1\n2\n3\n")
    return tmp_path


def calls(folder: Path) -> int:
    log = folder / "calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["run", "rows.py", "--store", "sqlite:///store.db", *argv])
    return code, capsys.readouterr().err


def snapshot(*paths: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in paths}


def first_run(capsys: pytest.CaptureFixture[str], here: Path, *argv: str) -> None:
    """A completed run, so that the store and its files exist; the calls are forgotten."""
    code, err = run(capsys, *argv)
    assert code == 0, err
    (here / "calls.log").unlink()


# -- outputs that are a file the command reads or writes ------------------------


@pytest.mark.parametrize("name", ["store.db", "store.db-wal", "store.db-shm", "./store.db"])
def test_out_onto_the_store_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    first_run(capsys, here, "--csv", "in.csv")
    files = [path for path in here.glob("store.db*") if path.exists()]
    before = snapshot(*files)
    code, err = run(capsys, "--csv", "in.csv", "--out", name)
    assert code == 2, err
    assert err.startswith(f"error: --out {name} is the store's file ")
    assert "store.db" in err.split(" is the store's file ", 1)[1]
    assert snapshot(*files) == before
    assert calls(here) == 0


def test_out_onto_the_input_file_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(here / "in.csv")
    code, err = run(capsys, "--csv", "in.csv", "--out", "in.csv")
    assert code == 2, err
    assert err == (
        "error: --out in.csv is the input file in.csv (--csv): writing it would destroy it; "
        "name another file\n"
    )
    assert snapshot(here / "in.csv") == before
    assert calls(here) == 0


def test_a_file_named_in_the_input_json_is_protected_too(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(here / "in.csv")
    code, err = run(capsys, "--input", '{"csv": "in.csv"}', "--out", f"{here}/in.csv")
    assert code == 2, err
    assert f"--out {here}/in.csv is the input file in.csv (--input)" in err
    assert snapshot(here / "in.csv") == before
    assert calls(here) == 0


def test_through_a_symlink_or_a_hard_link_is_the_same_file(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "sym.csv").symlink_to(here / "in.csv")
    os.link(here / "in.csv", here / "hard.csv")
    before = snapshot(here / "in.csv")
    for link in ("sym.csv", "hard.csv"):
        code, err = run(capsys, "--csv", "in.csv", "--out", link)
        assert code == 2, err
        assert f"--out {link} is the input file in.csv (--csv)" in err
    assert snapshot(here / "in.csv") == before
    assert (here / "sym.csv").is_symlink()
    assert calls(here) == 0


def test_out_onto_the_play_file_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(here / "rows.py")
    code, err = run(capsys, "--out", "rows.py")
    assert code == 2, err
    assert err == (
        "error: --out rows.py is the play file rows.py: writing it would destroy it; "
        "name another file\n"
    )
    assert snapshot(here / "rows.py") == before
    assert calls(here) == 0


@pytest.mark.parametrize("flag", ["--events", "--trace"])
def test_out_onto_the_events_or_trace_target_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    first_run(capsys, here, flag, "recorded.txt")
    before = snapshot(here / "recorded.txt")
    code, err = run(capsys, flag, "recorded.txt", "--out", "recorded.txt")
    assert code == 2, err
    assert err == (
        f"error: --out recorded.txt is the {flag} file recorded.txt: writing it would destroy "
        "it; name another file\n"
    )
    assert snapshot(here / "recorded.txt") == before
    assert calls(here) == 0


def test_events_and_trace_may_not_be_one_file(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(capsys, "--events", "e.json", "--trace", "e.json")
    assert code == 2, err
    assert "--trace e.json is the --events file e.json" in err
    assert calls(here) == 0


def test_export_onto_its_store_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first_run(capsys, here, "--run-id", "r")
    before = snapshot(here / "store.db")
    code = main(["export", "r", "d", "--store", "sqlite:///store.db", "--out", "store.db"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: --out store.db is the store's file store.db")
    assert snapshot(here / "store.db") == before


def test_demo_out_onto_its_store_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = here / "demo.db"
    store.write_bytes(b"")  # the demo's store, before the demo creates it
    code = main(["demo", "--rows", "3", "--store", f"sqlite:///{store}", "--out", str(store)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--out {store} is the store's file {store}" in err
    assert store.read_bytes() == b""


def test_timeline_out_onto_its_events_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first_run(capsys, here, "--events", "e.jsonl")
    before = snapshot(here / "e.jsonl")
    code = main(["timeline", "e.jsonl", "--out", "e.jsonl"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--out e.jsonl is the events file e.jsonl" in err
    assert snapshot(here / "e.jsonl") == before


# -- outputs that cannot be written, refused before any call ------------------------


def test_out_that_is_a_directory_is_refused_before_any_call(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "folder").mkdir()
    code, err = run(capsys, "--out", "folder")
    assert code == 2, err
    assert err == "error: --out folder is a directory; name a file, such as folder/rows.csv\n"
    assert calls(here) == 0
    assert list((here / "folder").iterdir()) == []


@pytest.mark.parametrize("flag", ["--out", "--events", "--trace"])
def test_an_output_below_a_regular_file_is_refused_before_any_call(
    here: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    (here / "a-file").write_text("x\n")
    code, err = run(capsys, flag, "a-file/sub/out.txt")
    assert code == 2, err
    assert err == (
        f"error: {flag} a-file/sub/out.txt: a-file is a file, not a directory, so "
        "a-file/sub/out.txt cannot be created below it; name a path in a directory, "
        "or move a-file away\n"
    )
    assert ".partial" not in err
    assert calls(here) == 0
    assert (here / "a-file").read_text() == "x\n"


@pytest.mark.parametrize("flag", ["--out", "--events"])
def test_an_output_name_too_long_for_its_partial_file_is_refused_before_any_call(
    here: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    # 250 bytes fit in a name (255), but the file is written as .NAME.partial first.
    name = "n" * 246 + ".csv"
    code, err = run(capsys, flag, name)
    assert code == 2, err
    assert err.startswith(f"error: {flag} {name}: its name is too long")
    assert ".partial" not in err
    assert calls(here) == 0
    assert sorted(path.name for path in here.iterdir() if path.name.startswith(".")) == []


def test_an_output_in_a_read_only_folder_is_refused_before_any_call(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = here / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        code, err = run(capsys, "--out", "read-only/out.csv")
    finally:
        folder.chmod(0o700)
    if AS_ROOT:
        # Root writes through the mode bits: nothing is wrong, nothing is refused.
        assert code == 0, err
        assert (folder / "out.csv").is_file()
        return
    assert code == 2, err
    assert err.startswith("error: --out read-only/out.csv: the directory read-only is not ")
    assert calls(here) == 0


def test_a_store_whose_files_cannot_be_created_is_refused_with_advice(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The database's name fits; its -wal beside it does not.
    name = "s" * 253
    code = main(["run", "rows.py", "--store", f"sqlite:///{name}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: store sqlite:///{name}: ")
    assert "too long" in err
    assert calls(here) == 0


def test_an_empty_input_writes_a_file_and_says_so(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "empty.csv").write_text("n\n")
    code = main(["run", "rows.py", "--store", "sqlite:///store.db", "--csv", "empty.csv",
                 "--out", "out.csv"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    # The header: the input's columns (its CSV header), then the computed one.
    assert (here / "out.csv").read_text() == "n,twice\n"
    assert "  output: out.csv (0 rows of d)" in out
    assert "  out.csv: d had no input rows, so it holds the CSV header only\n" in out


def test_no_row_of_the_status_asked_for_writes_the_header_only(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(capsys, "--csv", "in.csv", "--run-id", "r")
    assert code == 0, err
    code = main(["export", "r", "d", "--store", "sqlite:///store.db", "--status", "failed",
                 "--out", "failed.csv"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (here / "failed.csv").read_text() == "n,twice\n"
    assert out == "failed.csv: 0 rows of d (run r); it holds the CSV header only\n"


async def test_an_output_that_fails_to_open_names_the_path_given_never_the_partial(
    tmp_path: Path,
) -> None:
    """If a folder refuses the file after the check (it changed meanwhile), the error
    is still a usage error about the path the user gave."""
    from trioplay._cli._common import UsageError
    from trioplay._cli._export import open_output

    (tmp_path / "a-file").write_text("x\n")
    path = str(tmp_path / "a-file" / "events.jsonl")
    with pytest.raises(UsageError) as raised:
        async with open_output(path, keep_on_error=True):
            pass
    assert str(raised.value).startswith(f"cannot write {path}: ")
    assert ".partial" not in str(raised.value)


def test_a_store_file_that_cannot_be_written_is_refused_with_advice(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = here / "store.db"
    first_run(capsys, here)
    store.chmod(0o444)
    try:
        code, err = run(capsys, "--run-id", "again")
    finally:
        store.chmod(0o644)
    if AS_ROOT:
        assert code == 0, err  # root writes through the mode bits: nothing is refused
        return
    assert code == 2, err
    assert err == (
        "error: store sqlite:///store.db: the database store.db cannot be written (its mode, "
        "or a read-only file system); SQLite would open it read-only and fail at the first "
        "write: make it writable, or name another store\n"
    )
    assert calls(here) == 0


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("e" * 300, "its name is too long: the file is first written under a name 9 bytes"),
        ("f" * 300 + "/out.csv", f"the name {'f' * 300} is too long: names in . hold at most"),
        ("new/" + "f" * 300 + "/out.csv", f"the name {'f' * 300} is too long"),
    ],
)
def test_a_name_too_long_anywhere_in_the_path_is_said_plainly(
    here: Path, capsys: pytest.CaptureFixture[str], path: str, said: str
) -> None:
    code, err = run(capsys, "--events", path)
    assert code == 2, err
    assert err.startswith(f"error: --events {path}: {said}")
    assert ".partial" not in err
    assert calls(here) == 0
