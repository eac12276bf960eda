"""Issue 14, point 5: smaller things a new user meets on the command line.
Every test runs the command line in this process (``support.cli``). The
store path messages are in
test_store_paths.py, with the library's."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import cli

BOOM = """
import trioplay

@trioplay.play("boom")
async def boom(ctx, input):
    raise RuntimeError("it broke")
"""


def test_debug_before_the_command_shows_the_traceback(tmp_path: Path) -> None:
    play = tmp_path / "boom.py"
    play.write_text(BOOM)
    store = f"sqlite:///{tmp_path / 's.db'}"
    for argv in (["--debug", "run", str(play)], ["run", str(play), "--debug"]):
        done = cli(*argv, "--store", store, cwd=tmp_path)
        assert done.returncode == 1
        assert "Traceback" in done.stderr, argv
        assert "RuntimeError: it broke" in done.stderr
    done = cli("run", str(play), "--store", store, cwd=tmp_path)
    assert "Traceback" not in done.stderr


def test_a_decorated_sync_function_is_not_listed_as_a_play(tmp_path: Path) -> None:
    play = tmp_path / "sync.py"
    play.write_text("import trioplay\n@trioplay.play('p')\ndef p(ctx, input):\n    return 1\n")
    done = cli("run", str(play), "--store", "memory://", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {play}:p is decorated with @trioplay.play but is not async: "
        "a play is an async def (ctx, input); plays in it: none"
    )


def test_system_exit_while_importing_a_play_file_is_reported(tmp_path: Path) -> None:
    play = tmp_path / "exits.py"
    play.write_text("raise SystemExit(3)\n")
    done = cli("run", str(play), "--store", "memory://", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {play}: importing it raised SystemExit(3); a play file must not exit"
    )


def test_a_long_csv_field_names_the_setting_that_raises_the_limit(tmp_path: Path) -> None:
    play = tmp_path / "wide.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('wide')\n"
        "async def wide(ctx, input):\n"
        "    rows = ctx.csv(input['csv'])\n"
        "    return (await ctx.dataset('w', rows).run()).completed_count\n"
    )
    data = tmp_path / "wide.csv"
    data.write_text("id,text\n1,short\n2," + "x" * 200_000 + "\n")
    args = ["run", str(play), "--csv", str(data), "--store", f"sqlite:///{tmp_path / 's.db'}"]
    refused = cli(*args, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: {data}, line 3: a field is longer than 131,072 characters "
        "(csv_field_limit); raise it with --limit csv_field_limit=N or "
        "Limits(csv_field_limit=N)"
    )
    raised = cli(*args, "--limit", "csv_field_limit=250_000", cwd=tmp_path)
    assert raised.returncode == 0, raised.stderr
    assert "w: 2 completed" in raised.stdout


@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "show", "r"]])
def test_memory_store_is_refused_where_it_cannot_hold_anything(
    tmp_path: Path, command: list[str]
) -> None:
    done = cli(*command, "--store", "memory://", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: memory:// holds nothing between commands: every command starts with an "
        "empty one (use sqlite:///FILE)"
    )


def test_memory_store_on_run_says_the_results_go_away(tmp_path: Path) -> None:
    play = tmp_path / "ok.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('ok')\n"
        "async def ok(ctx, input):\n"
        "    await ctx.dataset('d', [{'k': 1}]).run()\n"
    )
    done = cli("run", str(play), "--store", "memory://", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(
        "warning: memory:// keeps nothing: the run's results go when this command ends "
        "and a rerun starts over (use sqlite:///FILE to keep them)\n"
    )
