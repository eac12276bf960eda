"""What run writes besides the store (issue 25, points 1 and 4): an empty input still
writes a header-only file and says so; an --events file that cannot be written is
exit 2 naming it. The tests call ``main([...])`` in-process, in ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import pytest

from trioplay._cli import main

PLAY = """
import trioplay


async def upper(row, rc):
    return row["domain"].upper()


@trioplay.play("e")
async def e(ctx, input):
    rows = ctx.csv(input["csv"]) if "csv" in input else []
    await ctx.dataset("d", rows).with_column("up", upper).run(key="domain")
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.py").write_text(PLAY)
    (tmp_path / "empty.csv").write_text("domain,name\n")
    return tmp_path


def test_an_empty_csv_writes_its_header_and_the_computed_columns(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "e.py", "--csv", "empty.csv", "--store", "sqlite:///s.db", "--out", "o.csv"]
    assert main(argv) == 0
    assert (here / "o.csv").read_text() == "domain,name,up\n"
    out = capsys.readouterr().out
    assert "  o.csv: d had no input rows, so it holds the CSV header only" in out.splitlines()


def test_an_empty_list_writes_the_computed_columns(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "e.py", "--store", "sqlite:///s.db", "--out", "o.csv"]) == 0
    assert (here / "o.csv").read_text() == "up\n"
    assert "so it holds the CSV header only" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--events", "--trace"])
def test_a_recording_on_a_full_device_is_exit_2_naming_it(
    here: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    # /dev/full accepts the open and fails the writes: the check before the
    # run cannot see it, and the error comes when the recording is written.
    argv = ["run", "e.py", "--csv", "empty.csv", "--store", "sqlite:///s.db", flag, "/dev/full"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "error: cannot write /dev/full: No space left on device; free some space, "
        "or name a path on another file system"
    ), err
