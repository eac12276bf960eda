"""The command line: demo, run, runs list/show, export, progress and errors.

Most tests call ``main([...])`` in-process (it runs its own ``trio.run``, so
these tests are synchronous); two run ``python -m trioplay`` for real. Play
files are written to ``tmp_path``; every store is a SQLite file there.
"""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trioplay._cli import _demo, main
from trioplay._cli._playfile import split_play_ref
from trioplay._cli._progress import MapProgress, RunOutcome, RunReporter, format_summary
from trioplay._runtime import DEFAULT_STORE_URL
from trioplay._trace import _records as te
from trioplay._trace._records import Raw

REPO = Path(__file__).resolve().parent.parent
SUBPROCESS_TIMEOUT = 120

NUMBERS_PLAY = """
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("lookup")
async def lookup(input, call):
    if input["n"] % 5 == 3:
        raise trioplay.ToolExecutionError("no such number")
    return {"double": input["n"] * 2}


async def double(row, rc):
    return (await rc.tool("lookup", {"n": int(row["n"])}))["double"]


@trioplay.play("numbers")
async def numbers(ctx, input):
    rows = ctx.csv(input["csv"], required=["n"])
    result = await (
        ctx.dataset("nums", rows)
        .with_column("double", double)
        .with_column("meta", lambda row, rc: {"even": row["double"] % 4 == 0, "tags": ["x"]})
        .run(key="n")
    )
    return result.to_dict()
"""


def write_numbers(tmp_path: Path, count: int = 10) -> tuple[Path, Path]:
    play = tmp_path / "numbers.py"
    play.write_text(NUMBERS_PLAY)
    data = tmp_path / "numbers.csv"
    data.write_text("n\n" + "".join(f"{i}\n" for i in range(count)))
    return play, data


def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def summary_value(out: str, label: str) -> int:
    match = re.search(rf"^\s*{re.escape(label)}: ([\d,]+)", out, re.MULTILINE)
    assert match is not None, f"no {label!r} in:\n{out}"
    return int(match.group(1).replace(",", ""))


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


# -- demo -------------------------------------------------------------------------


def test_demo_runs_then_replays_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "out" / "leads.csv"
    args = ["demo", "--rows", "60", "--store", store_url(tmp_path), "--out", str(out_file)]

    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "run demo-60: completed (play enrich-leads, attempt 1)" in out
    assert summary_value(out, "provider calls") > 60
    assert summary_value(out, "replayed receipts") == 0
    assert f"output: {out_file}" in out
    assert "leads_enriched: done, 60/60 rows" in err  # progress goes to stderr
    rows = read_csv(out_file)
    completed = int(re.search(r"leads_enriched: ([\d,]+) completed", out).group(1))  # type: ignore[union-attr]
    assert len(rows) == completed > 50
    assert list(rows[0]) == [*_demo.CSV_COLUMNS, "company", "email", "miss"]
    assert rows[0]["company"]
    assert "@" in rows[0]["email"]

    code, out, _ = run_cli(capsys, *args)
    assert code == 0
    assert "attempt 2" in out
    assert "provider calls: 0\n" in out
    assert summary_value(out, "replayed receipts") > 0
    assert read_csv(out_file) == rows


def test_demo_in_a_subprocess_twice(tmp_path: Path) -> None:
    store = store_url(tmp_path)
    out_file = tmp_path / "demo.csv"
    command = [
        sys.executable, "-m", "trioplay", "demo", "--rows", "200",
        "--store", store, "--out", str(out_file),
    ]  # fmt: skip

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
            check=False,
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert "run demo-200: completed" in first.stdout
    assert summary_value(first.stdout, "provider calls") >= 200
    assert "rows of leads_enriched" in first.stdout
    assert "leads_enriched: done, 200/200 rows" in first.stderr
    assert out_file.exists()

    second = run()
    assert second.returncode == 0, second.stderr
    assert "provider calls: 0\n" in second.stdout
    assert "attempt 2" in second.stdout


def test_bundled_leads_are_the_generated_ones() -> None:
    with _demo.bundled_csv() as path:
        text = path.read_text(encoding="utf-8")
    assert text == _demo.leads_csv_text(_demo.BUNDLED_ROWS)
    assert _demo.BUNDLED_ROWS >= 1000
    rows = list(_demo.generate_leads(_demo.BUNDLED_ROWS))
    # Every fiftieth lead repeats an earlier one; all the others are distinct.
    assert len({row["domain"] for row in rows}) == _demo.BUNDLED_ROWS - _demo.BUNDLED_ROWS // 50
    # A shorter list is a prefix of a longer one (what `demo --rows N` relies on).
    assert list(_demo.generate_leads(30)) == rows[:30]


def test_the_example_file_runs_the_demo_play(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "leads.csv"
    _demo.write_leads_csv(data, 20)
    code, out, err = run_cli(
        capsys,
        "run",
        str(REPO / "examples" / "enrich_leads.py"),
        "--csv",
        str(data),
        "--store",
        store_url(tmp_path),
    )
    assert code == 0, err
    assert "(play enrich-leads, attempt 1)" in out
    assert "leads_enriched: " in out


# -- run -------------------------------------------------------------------------


def test_run_a_play_file_and_rerun_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    play, data = write_numbers(tmp_path)
    out_file = tmp_path / "nums.csv"
    args = ["run", str(play), "--csv", str(data), "--store", store_url(tmp_path)]

    code, out, err = run_cli(capsys, *args, "--out", str(out_file))
    assert code == 0, err
    assert re.search(
        r"^run numbers-[0-9a-f]{12}: completed \(play numbers, attempt 1\)$", out, re.M
    )
    assert "nums: 8 completed, 2 failed, 0 skipped; sheet holds 8 completed, 2 failed" in out
    assert "provider calls: 10\n" in out
    rows = read_csv(out_file)
    assert [row["n"] for row in rows] == ["0", "1", "2", "4", "5", "6", "7", "9"]
    assert rows[1] == {"n": "1", "double": "2", "meta": '{"even":false,"tags":["x"]}'}

    code, out, _ = run_cli(capsys, *args)
    assert code == 0
    # The two failed rows run again; their recorded failures are replayed.
    assert "nums: 0 completed, 2 failed, 8 skipped" in out
    assert "provider calls: 0\n" in out
    assert "replayed receipts: 2\n" in out


def test_run_id_and_input_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    play, data = write_numbers(tmp_path, 3)
    code, out, err = run_cli(
        capsys,
        "run",
        f"{play}:numbers",
        "--input",
        json.dumps({"csv": str(data), "note": "ignored"}),
        "--run-id",
        "my-run",
        "--store",
        store_url(tmp_path),
    )
    assert code == 0, err
    assert out.startswith("run my-run: completed")


def test_tools_may_be_a_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    play = tmp_path / "fn_tools.py"
    play.write_text(
        "import trioplay\n"
        "def tools():\n"
        "    registry = trioplay.ToolRegistry()\n"
        "    async def echo(input, call):\n"
        "        return input\n"
        "    registry.add('echo', echo)\n"
        "    return registry\n"
        "async def play(ctx, input):\n"
        "    return await ctx.tool('echo', {'x': 1})\n"
    )
    code, out, err = run_cli(capsys, "run", str(play), "--store", store_url(tmp_path))
    assert code == 0, err
    assert "provider calls: 1\n" in out


def test_out_with_several_datasets_writes_one_file_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "two.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('two')\n"
        "async def two(ctx, input):\n"
        "    await ctx.dataset('a', [{'k': 1}, {'k': 2}]).with_column('x', lambda r, rc: 1).run()\n"
        "    await ctx.dataset('b', [{'k': 3}]).with_column('y', lambda r, rc: 2).run()\n"
    )
    out_file = tmp_path / "export" / "result.jsonl"
    code, out, err = run_cli(
        capsys, "run", str(play), "--store", store_url(tmp_path), "--out", str(out_file)
    )
    assert code == 0, err
    a = (tmp_path / "export" / "result.a.jsonl").read_text().splitlines()
    b = (tmp_path / "export" / "result.b.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in a] == [{"k": 1, "x": 1}, {"k": 2, "x": 1}]
    assert [json.loads(line) for line in b] == [{"k": 3, "y": 2}]
    assert "(2 rows of a)" in out
    assert "(1 row of b)" in out


def test_a_failing_run_exits_1_with_summary_and_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "boom.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('boom')\n"
        "async def boom(ctx, input):\n"
        "    await ctx.dataset('d', [{'k': 1}]).with_column('x', lambda r, rc: 1).run()\n"
        "    raise RuntimeError('it broke')\n"
    )
    code, out, err = run_cli(capsys, "run", str(play), "--store", store_url(tmp_path))
    assert code == 1
    assert re.search(r"^run boom-\w+: failed", out, re.M)
    assert "d: 1 completed, 0 failed" in out
    assert "error: RuntimeError: it broke" in err
    assert "Traceback" not in err

    code, _, err = run_cli(capsys, "run", str(play), "--store", store_url(tmp_path), "--debug")
    assert code == 1
    assert "Traceback" in err


# -- usage and input errors ---------------------------------------------------------


def test_missing_csv_file_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play, _ = write_numbers(tmp_path)
    missing = tmp_path / "nowhere" / "leads.csv"
    code, out, err = run_cli(
        capsys, "run", str(play), "--csv", str(missing), "--store", store_url(tmp_path)
    )
    assert code == 2
    assert out == ""
    assert err.strip().splitlines()[-1] == f"error: {missing}: file not found"
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--input", "{not json"], "error: --input is not valid JSON (Expecting property name"),
        (["--input", "[1, 2]", "--csv", "x.csv"], "error: --csv needs --input to be a JSON object"),
        (["--store", "bogus://nowhere"], "error: unknown store URL 'bogus://nowhere'"),
    ],
)
def test_bad_options_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    play, _ = write_numbers(tmp_path)
    base = ["run", str(play), "--store", store_url(tmp_path)]
    code, _, err = run_cli(capsys, *base, *argv)
    assert code == 2
    assert err.startswith(message), err


def test_unknown_play_name_lists_the_plays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play, _ = write_numbers(tmp_path)
    code, _, err = run_cli(capsys, "run", f"{play}:nope", "--store", store_url(tmp_path))
    assert code == 2
    assert err == f"error: {play} has no play 'nope'; plays in it: numbers\n"


def test_several_plays_need_a_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    play = tmp_path / "many.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('first-play')\n"
        "async def first(ctx, input): return 1\n"
        "@trioplay.play\n"
        "async def second(ctx, input): return 2\n"
    )
    code, _, err = run_cli(capsys, "run", str(play), "--store", store_url(tmp_path))
    assert code == 2
    assert "several plays (first (first-play), second)" in err
    assert f"{play}:NAME" in err
    # ... by attribute or by play name.
    code, out, _ = run_cli(capsys, "run", f"{play}:first-play", "--store", store_url(tmp_path))
    assert code == 0
    assert out.startswith("run first-play-")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "has no play: decorate an async function with @trioplay.play"),
        ("def play(ctx, input): return 1\n", "play.py:play is not a play: a play is an async"),
        ("import nonexistent_module_xyz\n", "importing it failed: ModuleNotFoundError"),
        ("tools = 3\nasync def play(ctx, input): return 1\n", "`tools` must be a trioplay"),
    ],
)
def test_bad_play_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, message: str
) -> None:
    play = tmp_path / "play.py"
    play.write_text(source)
    code, _, err = run_cli(capsys, "run", str(play), "--store", store_url(tmp_path))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_missing_play_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "run", str(tmp_path / "absent.py"))
    assert code == 2
    assert err == f"error: play file not found: {tmp_path / 'absent.py'}\n"


def test_argparse_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "frobnicate")
    assert code == 2
    assert "invalid choice" in err
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    assert "function `tools()`" in out
    assert "module-level `tools`" in out
    code, _, err = run_cli(capsys, "demo", "--rows", "0")
    assert code == 2


def test_split_play_ref() -> None:
    assert split_play_ref("plays/a.py:enrich") == (Path("plays/a.py"), "enrich")
    assert split_play_ref("plays/a.py") == (Path("plays/a.py"), None)
    assert split_play_ref("a.py:enrich-leads") == (Path("a.py"), "enrich-leads")


# -- runs list / show / export ---------------------------------------------------------


def test_runs_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    play, data = write_numbers(tmp_path)
    store = store_url(tmp_path)
    args = ["run", str(play), "--csv", str(data), "--run-id", "r-1", "--store", store]
    assert run_cli(capsys, *args)[0] == 0
    assert run_cli(capsys, *args)[0] == 0

    code, out, _ = run_cli(capsys, "runs", "list", "--store", store)
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["RUN", "ID", "PLAY", "STATUS", "ATTEMPT", "UPDATED", "ROWS"]
    assert row.split()[:4] == ["r-1", "numbers", "completed", "2"]
    assert row.split()[-1] == "10"

    code, out, _ = run_cli(capsys, "runs", "show", "r-1", "--store", store)
    assert code == 0
    assert "status:   completed" in out
    assert "attempts: 2" in out
    assert "  nums: 8 completed, 2 failed" in out
    assert "receipts: 8 completed, 2 failed" in out
    assert "stats (last attempt): provider calls 0, replayed 2," in out


def test_runs_commands_on_a_store_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_url(tmp_path)
    code, _, err = run_cli(capsys, "runs", "list", "--store", store)
    assert code == 2
    assert err.startswith(f"error: no store at {store}")
    assert not (tmp_path / "store.db").exists()


def test_runs_on_the_default_store_points_to_the_demo_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "runs", "list")
    assert code == 2
    missing = "(the file .trioplay/trioplay.db does not exist)"
    assert err == f"error: no store at {DEFAULT_STORE_URL} {missing}\n"

    assert run_cli(capsys, "demo", "--rows", "20")[0] == 0
    code, _, err = run_cli(capsys, "runs", "list")
    assert code == 2
    assert err.endswith(
        "; `trioplay demo` keeps its runs in sqlite:///.trioplay/demo.db:"
        " add --store sqlite:///.trioplay/demo.db\n"
    )
    code, out, _ = run_cli(capsys, "runs", "list", "--store", "sqlite:///.trioplay/demo.db")
    assert code == 0
    assert "demo-20" in out


def test_runs_show_and_export_unknown_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play, data = write_numbers(tmp_path, 2)
    store = store_url(tmp_path)
    run_cli(capsys, "run", str(play), "--csv", str(data), "--run-id", "r", "--store", store)
    code, _, err = run_cli(capsys, "runs", "show", "nope", "--store", store)
    assert (code, err) == (
        2,
        f"error: no run 'nope' in {store} (`trioplay runs list` lists them)\n",
    )
    code, _, err = run_cli(
        capsys, "export", "r", "other", "--out", str(tmp_path / "x.csv"), "--store", store
    )
    assert (code, err) == (2, "error: run 'r' has no dataset 'other'; its datasets: nums\n")
    assert not (tmp_path / "x.csv").exists()


def test_export_csv_jsonl_and_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    play, data = write_numbers(tmp_path)
    store = store_url(tmp_path)
    run_cli(capsys, "run", str(play), "--csv", str(data), "--run-id", "r", "--store", store)

    def export(name: str, *extra: str) -> Path:
        path = tmp_path / name
        code, out, err = run_cli(
            capsys, "export", "r", "nums", "--out", str(path), "--store", store, *extra
        )
        assert code == 0, err
        assert out.startswith(f"{path}: ")
        return path

    completed = read_csv(export("done.csv"))
    assert [row["n"] for row in completed] == ["0", "1", "2", "4", "5", "6", "7", "9"]
    assert list(completed[0]) == ["n", "double", "meta"]

    failed_file = export("failed.jsonl", "--status", "failed")
    failed = [json.loads(line) for line in failed_file.read_text().splitlines()]
    assert failed == [
        {"n": "3", "_error": "ToolExecutionError: no such number"},
        {"n": "8", "_error": "ToolExecutionError: no such number"},
    ]

    everything = read_csv(export("all.txt", "--status", "all", "--format", "csv"))
    assert list(everything[0]) == ["n", "double", "meta", "_status", "_error"]
    assert [(row["n"], row["_status"]) for row in everything][2:5] == [
        ("2", "completed"),
        ("3", "failed"),
        ("4", "completed"),
    ]
    assert everything[3]["double"] == ""
    assert everything[3]["_error"].startswith("ToolExec")
    assert not list(tmp_path.glob(".*.partial"))


def test_export_csv_header_is_the_union_of_keys_across_pages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "wide.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('wide')\n"
        "async def wide(ctx, input):\n"
        "    rows = [{'id': i, **({'late': f'v{i}'} if i >= 1500 else {})} for i in range(1600)]\n"
        "    sheet = ctx.dataset('w', rows).with_column('x', lambda r, rc: r['id'] * 2)\n"
        "    await sheet.run(key='id')\n"
    )
    store = store_url(tmp_path)
    assert run_cli(capsys, "run", str(play), "--run-id", "w", "--store", store)[0] == 0
    path = tmp_path / "w.csv"
    assert run_cli(capsys, "export", "w", "w", "--out", str(path), "--store", store)[0] == 0
    rows = read_csv(path)
    assert len(rows) == 1600
    assert list(rows[0]) == ["id", "x", "late"]
    assert rows[0] == {"id": "0", "x": "0", "late": ""}
    assert rows[1599] == {"id": "1599", "x": "3198", "late": "v1599"}


# -- Ctrl-C ------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery differs on Windows")
def test_ctrl_c_exits_130_and_records_the_run(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    play = tmp_path / "hang.py"
    play.write_text(
        "import pathlib, trio, trioplay\n"
        "tools = trioplay.ToolRegistry()\n"
        "@tools.tool('slow')\n"
        "async def slow(input, call):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    await trio.sleep_forever()\n"
        "async def resolve(row, rc):\n"
        "    return await rc.tool('slow', row)\n"
        "@trioplay.play('hang')\n"
        "async def hang(ctx, input):\n"
        "    await ctx.dataset('d', [{'i': i} for i in range(5)]).with_column('x', resolve).run()\n"
    )
    store = store_url(tmp_path)
    command = [
        sys.executable,
        "-m",
        "trioplay",
        "run",
        str(play),
        "--run-id",
        "h",
        "--store",
        store,
    ]
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the play never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # else leaving the block waits for it for ever
            _, err = proc.communicate()
            pytest.fail(f"the run did not stop within 30 s of SIGINT; its stderr:\n{err}")
    assert proc.returncode == 130, err
    assert "interrupted: run h stopped; the same command resumes it" in err
    listing = subprocess.run(
        [sys.executable, "-m", "trioplay", "runs", "list", "--store", store],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=True,
    )
    assert listing.stdout.splitlines()[1].split()[:2] == ["h", "hang"]


# -- progress and summary ---------------------------------------------------------------


def event(kind: str, at: float, **data: Any) -> Raw:
    """The raw record (what a recorder hands its sinks) of a ``RuntimeEvent`` ``kind``."""
    if kind == "run.started":
        return (te.RunStarted, at, "r", data["play"], data["attempt"])
    if kind == "map.started":
        return (te.MapStarted, at, "r", data["map"], data["total"])
    counts = [data.get(name, 0) for name in ("completed", "failed", "skipped", "duplicates")]
    if kind == "map.progress":
        return (te.MapProgress, at, data["map"], *counts, 0, data["total"], "r")
    assert kind == "map.finished"
    return (te.MapFinished, at, data["map"], "completed", *counts, 0, data["total"], "r")


def progress_events(total: int = 10_000) -> list[Raw]:
    events = [event("run.started", 0.0, play="p", attempt=1)]
    events.append(event("map.started", 0.0, map="leads", total=total))
    for step in range(1, 21):  # every 0.25 s for 5 s, 200 rows per step, 1 in 40 failing
        done = step * 200
        events.append(
            event(
                "map.progress",
                step * 0.25,
                map="leads",
                completed=done - done // 40,
                failed=done // 40,
                skipped=0,
                duplicates=0,
                total=total,
            )
        )
    return events


def test_plain_progress_lines_come_at_most_every_two_seconds() -> None:
    stream = io.StringIO()
    reporter = RunReporter(stream, interactive=False)
    for item in progress_events():
        reporter.write([item])
    reporter.write(
        [event("map.finished", 5.0, map="leads", completed=3900, failed=100, total=10_000)]
    )
    assert stream.getvalue().splitlines() == [
        "leads: 200/10,000 rows (195 ok, 5 failed) 800 rows/s, eta 12 s",
        "leads: 1,800/10,000 rows (1,755 ok, 45 failed) 800 rows/s, eta 10 s",
        "leads: 3,400/10,000 rows (3,315 ok, 85 failed) 800 rows/s, eta 8.2 s",
        "leads: done, 4,000/10,000 rows (3,900 ok, 100 failed) in 5.0 s, 800 rows/s",
    ]


def test_progress_bar_on_a_terminal_lives_only_while_the_map_runs() -> None:
    stream = io.StringIO()
    reporter = RunReporter(stream, interactive=True)
    for item in progress_events(4000):
        reporter.write([item])
    assert reporter._progress is not None  # live while the map runs
    [task] = reporter._progress.tasks
    assert task.fields == {
        "rows": "4,000/4,000 rows",
        "ok": "3,900",
        "failed": "100",
        "rate": "800 rows/s",
        "eta": "eta 0.0 s",
    }
    reporter.write_line("a log line")
    reporter.write(
        [event("map.finished", 5.0, map="leads", completed=3900, failed=100, total=4000)]
    )
    assert reporter._progress is None
    text = stream.getvalue()
    assert "a log line" in text
    assert "leads: done, 4,000/4,000 rows (3,900 ok, 100 failed) in 5.0 s, 800 rows/s" in text
    reporter.close()  # idempotent


def test_summary_lists_maps_calls_and_outputs() -> None:
    from trioplay._cli._progress import OutputFile

    outcome = RunOutcome(
        run_id="r",
        play="p",
        attempt=2,
        status="completed",
        stats={"provider_calls": 0, "replayed": 1234},
        started_at=1.0,
        finished_at=3.5,
    )
    state = MapProgress(name="leads", started_at=1.0, completed=0, failed=2, skipped=98)
    text = format_summary(
        outcome,
        [state],
        sheets={"leads": {"completed": 98, "failed": 2}},
        outputs=[OutputFile("out/x.csv", "leads", 98)],
    )
    assert text.splitlines() == [
        "run r: completed (play p, attempt 2)",
        "  leads: 0 completed, 2 failed, 98 skipped; sheet holds 98 completed, 2 failed",
        "  provider calls: 0",
        "  replayed receipts: 1,234",
        "  elapsed: 2.5 s",
        "  output: out/x.csv (98 rows of leads)",
    ]
