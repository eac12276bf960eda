"""The habits a command line is expected to have (issue 25, point 4): ``--version``,
``--json`` for ``runs list``, ``runs show`` and the run summary, "did you mean"
for a mistyped command or ``--limit`` name, run ids and limits checked at once,
a configuration file that is not UTF-8 named with its byte offset.

The tests call ``main([...])`` in-process, in ``tmp_path`` as the current folder.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from trioplay._cli import main
from trioplay._cli._progress import MapProgress, OutputFile, RunOutcome, format_summary
from trioplay._cli._summary import summary_data

PLAY = """
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("twice")
async def twice(input, call):
    if input["n"] == 2:
        raise trioplay.ToolExecutionError("two is refused")
    return input["n"] * 2


async def resolve(row, rc):
    return await rc.tool("twice", {"n": row["n"]})


@trioplay.play("rows")
async def rows(ctx, input):
    source = [{"n": n} for n in range(input.get("count", 4))]
    await ctx.dataset("d", source).with_column("twice", resolve).run(key="n")
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.py").write_text(PLAY)
    return tmp_path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


STORE = "sqlite:///store.db"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "--version")
    assert (code, out, err) == (0, f"trioplay {version('trioplay')}\n", "")


# -- --json -------------------------------------------------------------------


def test_the_run_summary_as_json_carries_the_numbers_of_the_text(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, err = cli(capsys, "run", "rows.py", "--store", STORE, "--run-id", "r",
                          "--out", "out.csv")  # fmt: skip
    assert code == 0, err
    code, out, err = cli(capsys, "run", "rows.py", "--store", STORE, "--run-id", "r",
                         "--out", "out.csv", "--json")  # fmt: skip
    assert code == 0, err
    data = json.loads(out)  # the whole of stdout is one JSON document
    assert data["run_id"] == "r"
    assert (data["status"], data["play"], data["attempt"]) == ("completed", "rows", 2)
    [dataset] = data["datasets"]
    assert dataset == {
        "name": "d", "completed": 0, "failed": 1, "skipped": 3, "duplicates": 0,
        "unconfirmed": 0, "sheet": {"completed": 3, "failed": 1},
        "failures": [
            {"type": "ToolExecutionError", "count": 1, "example": "two is refused", "key": "2"}
        ],
    }  # fmt: skip
    assert (data["provider_calls"], data["replayed"], data["failed_calls"]) == (0, 1, 0)
    assert data["outputs"] == [{"path": "out.csv", "dataset": "d", "rows": 3}]
    assert data["error"] is None
    assert isinstance(data["elapsed"], float)
    assert "run r: completed (play rows, attempt 1)" in text


def test_the_summary_json_and_text_say_the_same_numbers() -> None:
    outcome = RunOutcome(
        run_id="r", play="p", attempt=3, status="failed", error="boom",
        stats={"provider_calls": 1234, "replayed": 56, "failed_calls": 7, "fetches": 2},
        started_at=1.0, finished_at=4.25,
    )  # fmt: skip
    state = MapProgress(name="m", started_at=0.0, completed=1500, failed=7, skipped=12,
                        duplicates=3, unconfirmed=2)  # fmt: skip
    sheets = {"m": {"completed": 2000, "failed": 9}, "other": {"completed": 5, "failed": 0}}
    outputs = [OutputFile("o.csv", "m", 1500)]
    text = format_summary(outcome, [state], sheets=sheets, outputs=outputs)
    data = summary_data(outcome, [state], sheets=sheets, outputs=outputs)
    assert json.loads(json.dumps(data)) == data
    numbers = {int(n.replace(",", "")) for n in re.findall(r"\b\d[\d,]*\b", text)}
    said: set[int] = set()

    def collect(value: Any) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            said.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    collect(data)
    assert numbers <= said | {3, 2, 4}  # "attempt 3", "(3 duplicate keys)", "3.2 s"
    assert [d["name"] for d in data["datasets"]] == ["m", "other"]
    assert data["datasets"][1] == {"name": "other", "sheet": {"completed": 5, "failed": 0}}
    assert data["stats"]["fetches"] == 2
    assert (data["error"], data["elapsed"]) == ("boom", 3.25)


def test_runs_list_and_show_as_json(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "rows.py", "--store", STORE, "--run-id", "r")
    assert code == 0, err
    code, out, err = cli(capsys, "runs", "list", "--store", STORE, "--json")
    assert code == 0, err
    [run] = json.loads(out)
    assert {key: run[key] for key in ("run_id", "play", "status", "attempt", "rows")} == {
        "run_id": "r", "play": "rows", "status": "completed", "attempt": 1, "rows": 4,
    }  # fmt: skip
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", run["updated_at"])

    code, out, err = cli(capsys, "runs", "show", "r", "--store", STORE, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["run_id"] == "r"
    assert shown["input"] == {}
    assert shown["datasets"] == {"d": {"completed": 3, "failed": 1}}
    assert shown["receipts"] == {"completed": 3, "failed": 1}
    assert shown["stats"]["provider_calls"] == 4
    assert (shown["attempts"], shown["error"]) == (1, None)

    code, out, err = cli(capsys, "runs", "list", "--store", "sqlite:///other.db", "--json")
    assert code == 2  # no such store: an error, not an empty list


# -- did you mean ---------------------------------------------------------------


def test_a_mistyped_command_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "rnu", "x.py")
    assert code == 2
    assert "invalid choice: 'rnu' (did you mean 'run'?" in err
    code, _, err = cli(capsys, "runs", "lsit")
    assert code == 2
    assert "(did you mean 'list'?" in err
    code, _, err = cli(capsys, "export", "r", "d", "--out", "x", "--status", "complete")
    assert code == 2
    assert "(did you mean 'completed'?" in err


def test_a_mistyped_limit_name_gets_a_suggestion(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "run", "rows.py", "--limit", "page_sise=10")
    assert code == 2
    assert "--limit: unknown limit 'page_sise' (did you mean page_size?); the limits are:" in err


# -- checked at once ------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "problem"),
    [
        ("", "a run id must not be empty"),
        ("a/b", "a run id must not contain '/'"),
        ("a\nb", "a run id must not contain control characters, such as '\\n'"),
        ("a\x00b", "such as '\\x00'"),
    ],
)
def test_run_ids_are_checked(
    here: Path, capsys: pytest.CaptureFixture[str], run_id: str, problem: str
) -> None:
    for argv in (
        ["run", "rows.py", "--store", STORE, "--run-id", run_id],
        ["runs", "show", run_id, "--store", STORE],
        ["export", run_id, "d", "--store", STORE, "--out", "o.csv"],
    ):
        code, _, err = cli(capsys, *argv)
        assert code == 2, err
        assert problem in err
    assert not (here / "store.db").exists()


def test_a_page_size_past_its_maximum_is_refused_at_once(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "run", "rows.py", "--store", STORE,
                         "--limit", f"page_size={10**30}")  # fmt: skip
    assert code == 2
    assert out == ""
    assert err == (
        f"error: --limit: limits: Limits.page_size must be at most 1,000,000, got {10**30}; "
        "accepted: whole numbers from 1 to 1,000,000\n"
    )
    assert not (here / "store.db").exists()


def test_a_configuration_file_that_is_not_utf8_is_named_with_the_byte(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "trioplay.toml").write_bytes(b'store = "sqlite:///caf\xe9.db"\n')
    code, _, err = cli(capsys, "config")
    assert code == 2
    assert err == (
        "error: trioplay.toml: not UTF-8: byte 0xe9 at offset 22 (line 1) cannot be decoded; "
        "save the file as UTF-8\n"
    )
