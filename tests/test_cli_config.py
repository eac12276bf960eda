"""Configuring a run from the command line: trioplay.toml, [tool.trioplay], flags,
``trioplay config``. Every test runs the command line in this process
(``support.cli``: ``main(argv)`` in a folder, its output captured)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .support import cli, json_service

FETCH_PLAY = """
import trioplay

@trioplay.play("ping")
async def ping(ctx, input):
    response = await ctx.fetch(input["url"] + "/ping")
    await ctx.dataset("pages", [{"page": 1}, {"page": 2}, {"page": 3}]).with_column(
        "seen", lambda row, rc: row["page"]
    ).run(key="page")
    return response.json
"""


def write_play(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    play = folder / "ping.py"
    play.write_text(FETCH_PLAY)
    return play


def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_a_play_reaches_a_local_service_once_the_config_opens_the_network(
    tmp_path: Path,
) -> None:
    play = write_play(tmp_path / "plays")
    with json_service() as url:
        args = ["run", str(play), "--input", json.dumps({"url": url})]
        refused = cli(*args, "--store", store_url(tmp_path), cwd=tmp_path)
        assert refused.returncode == 1, refused.stderr
        assert "UnsafeOutboundUrl" in refused.stderr
        assert "allow_networks can open it" in refused.stderr

        (tmp_path / "plays" / "trioplay.toml").write_text(
            f'store = "{store_url(tmp_path)}"\nallow_networks = ["127.0.0.0/8"]\n'
        )
        allowed = cli(*args, "--run-id", "from-file", cwd=tmp_path)
        assert allowed.returncode == 0, allowed.stderr
        assert "run from-file: completed" in allowed.stdout

        # A flag replaces the file's value: an unrelated network refuses again.
        flagged = cli(*args, "--run-id", "flag", "--allow-network", "10.0.0.0/8", cwd=tmp_path)
        assert flagged.returncode == 1
        assert "UnsafeOutboundUrl" in flagged.stderr


def test_pyproject_tool_table_and_the_nearest_file_wins(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.trioplay]\nallow_networks = ["10.0.0.0/8"]\n'
        "[tool.trioplay.limits]\npage_size = 7\n"
    )
    play = write_play(tmp_path / "deep" / "er")
    shown = cli("config", str(play), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "# configuration file: pyproject.toml"
    assert re.search(r'^allow_networks = \["10.0.0.0/8"\]\s+# pyproject.toml$', shown.stdout, re.M)
    assert re.search(r"^page_size = 7\s+# pyproject.toml$", shown.stdout, re.M)

    (tmp_path / "deep" / "trioplay.toml").write_text("[fetch_timeouts]\ntotal = 5\n")
    shown = cli("config", str(play), "--limit", "tool_timeout=12.5", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "# configuration file: deep/trioplay.toml"
    assert re.search(r"^page_size = 1000\s+# default$", shown.stdout, re.M)
    assert re.search(r"^total = 5.0\s+# deep/trioplay.toml$", shown.stdout, re.M)
    assert re.search(r"^tool_timeout = 12.5\s+# --limit$", shown.stdout, re.M)
    assert re.search(r"^\[limits\]$", shown.stdout, re.M)


def test_limits_from_the_command_line_reach_the_run(tmp_path: Path) -> None:
    play = tmp_path / "big.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('big')\n"
        "async def big(ctx, input):\n"
        "    rows = [{'n': i, 'pad': 'x' * 2000} for i in range(50)]\n"
        "    result = await ctx.dataset('d', rows).with_column('m', lambda r, rc: 1).run()\n"
        "    return {'retained': result.retained_rows_complete}\n"
    )
    store = store_url(tmp_path)
    done = cli(
        "run", str(play), "--store", store, "--run-id", "r",
        "--limit", "retained_rows_budget_bytes=10_000", "--debug",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "passed retained_rows_budget_bytes=10000" in done.stderr
    shown = cli("runs", "show", "r", "--store", store, cwd=tmp_path)
    assert "completed" in shown.stdout


def test_bad_configuration_names_the_file_the_key_and_what_it_accepts(tmp_path: Path) -> None:
    play = write_play(tmp_path)
    config = tmp_path / "trioplay.toml"

    def error_for(text: str, *flags: str) -> str:
        config.write_text(text)
        result = cli("run", str(play), "--store", "memory://", *flags, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""
        return result.stderr.strip().splitlines()[-1]

    line = error_for("[limits]\npage_sise = 3\n")
    assert line.startswith(
        "error: trioplay.toml: limits.page_sise: unknown key (did you mean page_size?); "
        "the keys of [limits] are: "
    )
    assert "page_size, max_concurrent_rows," in line
    line = error_for("stor = 'x'\n")
    assert line == (
        "error: trioplay.toml: stor: unknown key (did you mean store?); the keys of the "
        "configuration are: "
        "store, allow_networks, limits, fetch_timeouts"
    )
    line = error_for('[limits]\npage_size = "500"\n')
    assert line == (
        "error: trioplay.toml: limits.page_size: expected a whole number, got '500' (a string)"
    )
    line = error_for("[fetch_timeouts]\ntotal = 0\n")
    assert line == (
        "error: trioplay.toml: fetch_timeouts: "
        "FetchTimeouts.total must be a positive number, got 0.0; "
        "accepted: finite seconds above 0, at most 604,800 (a week)"
    )
    line = error_for("allow_networks = ['localhost']\n")
    assert line.startswith("error: trioplay.toml: allow_networks: 'localhost' is not a CIDR block")
    line = error_for("[limits\n")
    assert line.startswith("error: trioplay.toml: not valid TOML (")
    line = error_for("", "--limit", "page_size=0")
    assert line == (
        "error: --limit: limits: Limits.page_size must be a positive number, got 0; "
        "accepted: whole numbers from 1 to 1,000,000"
    )

    result = cli("run", str(play), "--limit", "nope=1", cwd=tmp_path)
    assert result.returncode == 2
    assert "--limit: unknown limit 'nope'; the limits are: page_size," in result.stderr

    (tmp_path / "pyproject.toml").write_text("[tool.trioplay]\nstore = 'memory://'\n")
    line = error_for("")
    assert line == (
        "error: trioplay.toml and [tool.trioplay] in pyproject.toml both configure trioplay; "
        "keep one of them"
    )


def test_reading_commands_take_the_store_from_the_configuration(tmp_path: Path) -> None:
    play = write_play(tmp_path)
    (tmp_path / "trioplay.toml").write_text(f'store = "{store_url(tmp_path)}"\n')
    with json_service() as url:
        ran = cli(
            "run", str(play), "--input", json.dumps({"url": url}),
            "--allow-network", "127.0.0.1/32", "--run-id", "p",
            cwd=tmp_path,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    listed = cli("runs", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:3] == ["p", "ping", "completed"]
    other = tmp_path / "elsewhere.toml"
    other.write_text(f'store = "sqlite:///{tmp_path / "other.db"}"\n')
    missing = cli("runs", "list", "--config", str(other), cwd=tmp_path)
    assert missing.returncode == 2
    assert "other.db does not exist" in missing.stderr
