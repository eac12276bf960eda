"""Issue 25, acceptance 2: a tool raising ``TypeError`` fails its row and the summary
names the retry command; after the code is fixed and ``trioplay retry`` run, the next
run completes those rows with exactly one new call each, and no other recorded
receipt is called again. The tests call ``main([...])`` in-process, in ``tmp_path``."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest

from trioplay._cli import main

PLAY = """
from pathlib import Path

import trioplay

tools = trioplay.ToolRegistry()
HERE = Path(__file__).parent


@tools.tool("lookup")
async def lookup(input, call):
    n = input["n"]
    with (HERE / "calls.txt").open("a") as calls:
        calls.write(f"{n}\\n")
    if n == 4:
        raise trioplay.ToolExecutionError("4: not found")
    if n % 3 == 0 and not (HERE / "fixed").exists():
        return None + n  # the bug
    return n * 2


async def looked(row, rc):
    return await rc.tool("lookup", {"n": row["n"]})


@trioplay.play("bugs")
async def bugs(ctx, input):
    rows = [{"n": n} for n in range(8)]
    await ctx.dataset("d", rows).with_column("v", looked).run(key="n")
"""

RUN = ["run", "bugs.py", "--store", "sqlite:///s.db", "--run-id", "r"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bugs.py").write_text(PLAY)
    return tmp_path


def calls(here: Path) -> Counter[int]:
    path = here / "calls.txt"
    return Counter(int(line) for line in path.read_text().split()) if path.exists() else Counter()


def test_a_fixed_bug_is_retried_with_one_call_per_row_and_nothing_else(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(RUN) == 0
    out = capsys.readouterr().out
    assert "  d: 4 completed, 4 failed, 0 skipped; sheet holds 4 completed, 4 failed" in out
    [bug] = [line for line in out.splitlines() if "probably a bug" in line]
    assert bug.startswith(
        "  probably a bug in tool lookup: 3 recorded failures with TypeError (tool 'lookup' raised "
        "TypeError: unsupported operand type(s) for +: 'NoneType'...); once fixed: "
    ), bug
    match = re.search(r"once fixed: (trioplay retry .*), then run again$", bug)
    assert match is not None, bug
    command = shlex.split(match.group(1))
    assert command == [
        "trioplay", "retry", "r", "--tool", "lookup", "--error", "TypeError",
        "--store", "sqlite:///s.db",
    ]  # fmt: skip
    # The provider's refusal (4) is not a bug: no line for it.
    assert "ToolExecutionError (" not in bug
    first = calls(here)
    assert first == Counter(range(8))

    # Rerun before the fix: every failure replays, nothing is called.
    assert main(RUN) == 0
    capsys.readouterr()
    assert calls(here) == first

    (here / "fixed").touch()
    assert main(command[1:]) == 0
    out, err = capsys.readouterr()
    assert out == (
        "run r: forgot 3 recorded failed calls (3 TypeError in tool lookup); "
        "the next run of it calls them again\n"
    ), err

    assert main([*RUN, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [d] = data["datasets"]
    assert (d["completed"], d["failed"], d["skipped"]) == (3, 1, 4)
    assert d["sheet"] == {"completed": 7, "failed": 1}
    assert data["bugs"] == []  # forgotten and fixed
    # Exactly one new call for each row that had the bug, none for any other.
    assert calls(here) - first == Counter({0: 1, 3: 1, 6: 1})
    assert data["provider_calls"] == 3


def test_retry_says_what_there_is_when_nothing_matches(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(RUN) == 0
    capsys.readouterr()
    store = ["--store", "sqlite:///s.db"]
    assert main(["retry", "r", "--error", "KeyError", *store]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: no recorded failure of run 'r' matches --error KeyError; its recorded "
        "failures: 3 TypeError in tool lookup (dataset d); "
        "1 ToolExecutionError in tool lookup (dataset d)\n"
    )
    assert main(["retry", "nope", *store]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    # With no filter, every recorded failure of the run: the refusal too.
    assert main(["retry", "r", *store]) == 0
    assert "forgot 4 recorded failed calls" in capsys.readouterr().out
    assert main(["retry", "r", *store]) == 2
    assert "run 'r' has no recorded failure to forget" in capsys.readouterr().err


def test_the_json_summary_carries_the_bugs(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, "--json"]) == 0
    [bug] = json.loads(capsys.readouterr().out)["bugs"]
    assert bug == {
        "tool": "lookup",
        "type": "TypeError",
        "count": 3,
        "example": "tool 'lookup' raised TypeError: unsupported operand type(s) for +: "
        "'NoneType' and 'int'",
        "retry": "trioplay retry r --tool lookup --error TypeError --store sqlite:///s.db",
    }
