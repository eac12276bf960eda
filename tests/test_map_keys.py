"""A bad key is a row error: a missing or empty key fails its row (isolated
under ``on_row_error="isolate"``), names the file and the line, and lists the
fields a row has when the key field is not one of them. The CLI tests run
the command line in this process (``support.cli``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, cli, registry

PLAY = """
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("lookup")
async def lookup(input, call):
    return {"name": input["domain"].upper()}


async def name(row, rc):
    return (await rc.tool("lookup", {"domain": row.get("domain") or "?"}))["name"]


@trioplay.play("keys")
async def keys(ctx, input):
    rows = ctx.csv(input["csv"]) if input["csv"].endswith(".csv") else ctx.jsonl(input["csv"])
    result = await (
        ctx.dataset("leads", rows)
        .with_column("name", name)
        .run(key=input.get("key", "domain"), on_row_error=input.get("mode", "isolate"))
    )
    return result.to_dict()
"""


def setup(tmp_path: Path) -> Path:
    play = tmp_path / "keys.py"
    play.write_text(PLAY)
    data = tmp_path / "leads.csv"
    lines = ["domain,owner"] + [f"d{i}.example,o{i}" for i in range(30)]
    lines[20] = ",nobody"  # line 21 of the file: an empty key
    data.write_text("\n".join(lines) + "\n")
    return play


def run(tmp_path: Path, play: Path, **input: Any) -> Any:
    return cli(
        "run", str(play), "--input", json.dumps(input), "--store",
        f"sqlite:///{tmp_path / 'store.db'}", "--run-id", input.get("run", "r"),
        cwd=tmp_path,
    )  # fmt: skip


def test_an_empty_key_fails_its_row_only_and_names_file_and_line(tmp_path: Path) -> None:
    play = setup(tmp_path)
    done = run(tmp_path, play, csv="leads.csv")
    assert done.returncode == 0, done.stderr
    assert "leads: 29 completed, 1 failed, 0 skipped" in done.stdout
    assert "provider calls: 29" in done.stdout
    failed = cli(
        "export", "r", "leads", "--status", "failed", "--out", "-", "--format", "jsonl",
        "--store", f"sqlite:///{tmp_path / 'store.db'}",
        cwd=tmp_path,
    )  # fmt: skip
    assert failed.returncode == 0, failed.stderr
    [row] = [json.loads(line) for line in failed.stdout.splitlines()]
    assert row == {
        "domain": "",
        "owner": "nobody",
        "_error": "PlayInputError: leads.csv, line 21, column 'domain': dataset 'leads': "
        "the key field 'domain' is empty",
    }

    # A rerun runs the failed row again, and it fails the same way.
    again = run(tmp_path, play, csv="leads.csv")
    assert again.returncode == 0, again.stderr
    assert "leads: 0 completed, 1 failed, 29 skipped; sheet holds 29 completed, 1 failed" in (
        again.stdout
    )


def test_a_missing_key_field_lists_the_fields_there_are(tmp_path: Path) -> None:
    play = setup(tmp_path)
    jsonl = tmp_path / "leads.jsonl"
    jsonl.write_text('{"domain": "a.example"}\n\n{"Domain": "b.example", "owner": "x"}\n')
    done = run(tmp_path, play, csv=str(jsonl), run="j")
    assert done.returncode == 0, done.stderr
    assert "leads: 1 completed, 1 failed" in done.stdout

    failed = run(tmp_path, play, csv="leads.csv", key="Domain", mode="fail", run="f")
    assert failed.returncode != 0
    last = failed.stderr.strip().splitlines()[-1]
    # Every row fails alike; which one fails first depends on scheduling.
    assert re.match(
        r"error: leads\.csv, line \d+, column 'Domain': dataset 'leads': the key "
        r"field 'Domain' is missing; the row's fields: 'domain', 'owner'",
        last,
    ), failed.stderr


async def test_a_bad_key_in_a_list_of_rows_names_its_position() -> None:
    tool = CountingTool()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"domain": "a.example"}, {"domain": None}, {"domain": "c.example"}]
        result = await ctx.dataset("s", rows).run(key="domain")
        return [row async for row in result.rows(status="failed")]

    async with trioplay.open_runtime(store=MemoryStore(), tools=registry(finder=tool)) as rt:
        failed = await rt.run(play, {}, run_id="r")
    assert failed == [
        {
            "domain": None,
            "_error": "PlayInputError: dataset 's' row 1: the key field 'domain' is empty",
        }
    ]

    @trioplay.play("q")
    async def strict(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"domain": "a.example"}, {"name": "x"}]
        return await ctx.dataset("s", rows).run(key="domain", on_row_error="fail")

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        missing = r"row 1: the key field 'domain' is missing; the row's fields: 'name'"
        with pytest.raises(trioplay.PlayInputError, match=missing):
            await rt.run(strict, {}, run_id="q")
