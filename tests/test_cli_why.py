"""The run summary says why rows failed, and stall lines read as sentences (issue 25,
point 3). The CLI tests call ``main([...])`` in-process, in ``tmp_path``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from trioplay._cli import _Session, main
from trioplay._cli._stall import describe_stall

PLAY = """
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("finder")
async def finder(input, call):
    n = input["n"]
    if n % 4 == 1:
        raise trioplay.ToolExecutionError(f"{n}: not found")
    if n % 4 == 2:
        raise trioplay.FetchError(f"{n}: upstream closed")
    return n


async def found(row, rc):
    return await rc.tool("finder", {"n": row["n"]})


@trioplay.play("why")
async def why(ctx, input):
    rows = [{"n": n, "name": f"d{n}.example"} for n in range(10)]
    await ctx.dataset("leads", rows).with_column("v", found).run(key="name")
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "why.py").write_text(PLAY)
    return tmp_path


def test_the_summary_names_the_failure_types_with_counts_and_an_example(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "why.py", "--store", "sqlite:///s.db", "--run-id", "r"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    at = lines.index("  leads: 5 completed, 5 failed, 0 skipped; sheet holds 5 completed, 5 failed")
    assert lines[at + 1] == (
        "    5 failed: 3 ToolExecutionError (1: not found) e.g. d1.example; "
        "2 FetchError (2: upstream closed) e.g. d2.example"
    ), text
    # A rerun replays the failures, and says the same.
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [leads] = data["datasets"]
    assert leads["failures"] == [
        {"type": "ToolExecutionError", "count": 3, "example": "1: not found", "key": "d1.example"},
        {"type": "FetchError", "count": 2, "example": "2: upstream closed", "key": "d2.example"},
    ]
    assert sum(kind["count"] for kind in leads["failures"]) == leads["sheet"]["failed"] == 5


def test_a_dataset_without_failures_has_no_failure_line(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "ok.py").write_text(
        "import trioplay\n"
        "@trioplay.play('ok')\n"
        "async def ok(ctx, input):\n"
        "    await ctx.dataset('d', [{'k': 1}]).run()\n"
    )
    assert main(["run", "ok.py", "--store", "sqlite:///s.db"]) == 0
    assert " failed: " not in capsys.readouterr().out
    assert main(["run", "ok.py", "--store", "sqlite:///s.db", "--json"]) == 0
    [dataset] = json.loads(capsys.readouterr().out)["datasets"]
    assert "failures" not in dataset


REPORT = {
    "map": "s", "page_offset": 0, "resolver_active": 1, "fetch_active": 0,
    "oldest_fetch_ms": 0, "terminal_admission_waiting": 0, "terminal_commit_waiting": 0,
    "terminal_write_active": 0, "terminal_queued": 0, "terminal_committed": 0,
    "oldest_unsettled_ms": 50000, "oldest_phase": "resolver",
    "last_terminal_commit_ms": 50000, "governor_waiting": 0, "oldest_governor_ms": 0,
    "oldest_tool": "slow", "oldest_provider": "slow", "oldest_row_key": "0",
    "store_active": 0, "oldest_store_ms": 0, "oldest_store_operation": None, "loop_lag_ms": 0,
}  # fmt: skip


def test_a_stall_line_on_the_terminal_is_one_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = logging.getLogger("trioplay.stall")
    line = json.dumps(REPORT, separators=(",", ":"))
    with _Session(debug=False).logging():
        log.warning("[runtime.map_stall] %s", line)
    err = capsys.readouterr().err
    assert err == (
        "trioplay.stall: s: no row committed for 50 s; 1 row unresolved, "
        "the oldest (row 0) for 50 s, in tool slow\n"
    )
    with _Session(debug=True).logging():  # --debug shows the JSON, as logged
        log.warning("[runtime.map_stall] %s", line)
    assert capsys.readouterr().err == f"trioplay.stall: [runtime.map_stall] {line}\n"


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"oldest_phase": "governor", "oldest_governor_ms": 12000, "oldest_provider": "acme"},
         "waiting 12 s for a slot or rate turn of tool slow (provider acme)"),
        ({"oldest_phase": "store", "oldest_store_operation": "claim_many",
          "oldest_store_ms": 61000, "oldest_row_key": None},
         "waiting on the store: claim_many unanswered for 1:01"),
        ({"oldest_phase": "loop", "loop_lag_ms": 2500},
         "the event loop was blocked for 2,500 ms"),
        ({"oldest_phase": "writer_commit", "oldest_tool": None},
         "waiting for the writer's commit"),
        ({"oldest_tool": None}, "in the row's own code"),
    ],
)  # fmt: skip
def test_each_phase_reads_as_what_the_oldest_row_waits_on(
    changes: dict[str, object], where: str
) -> None:
    sentence = describe_stall({**REPORT, **changes})
    assert "{" not in sentence
    assert where in sentence, sentence
