"""The command line of waiting runs (issue 22): exit 4 and its summary, ``send-event``,
``resume`` and ``cancel``, and bad input that exits 2 with nothing written.

``main([...])`` runs in-process. Until the SQL stores keep waits, the runs
here that wait use ``memory://`` (one command, one store).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pytest

from trioplay._cli import main
from trioplay._cli._waiting import sent_line, waiting_lines
from trioplay._errors import RunWaiting
from trioplay._records import SendResult, WaitRecord

APPROVALS_PLAY = """
import trioplay


async def approval(row, rc):
    if int(row["id"]) % 3 != 1:
        return None
    return await rc.wait_for_event("approval", key=row["id"], timeout=3600)


@trioplay.play("approvals")
async def approvals(ctx, input):
    rows = [{"id": str(i)} for i in range(input.get("rows", 6))]
    result = await ctx.dataset("leads", rows).with_column("approval", approval).run(key="id")
    return result.completed_count
"""

SIMPLE_PLAY = """
import trioplay


@trioplay.play("simple")
async def simple(ctx, input):
    return await ctx.step("one", lambda: 1)
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_waiting_run_exits_4_naming_its_waits_and_the_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "approvals.py"
    play.write_text(APPROVALS_PLAY)
    code, out, err = run_cli(capsys, "run", str(play), "--store", "memory://", "--run-id", "appr")
    assert code == 4, err
    assert "run appr: waiting (play approvals, attempt 1)" in out
    assert "leads: 4 completed, 0 failed, 0 skipped, 2 waiting" in out
    assert "waiting: run appr waits for 2 events (the next deadline is " in out
    for key in ("1", "4"):
        command = f"trioplay send-event appr approval '\"{key}\"' --data JSON --store memory://"
        assert f"  {command}   # dataset leads, row {key}" in out
        assert shlex.split(command)[4] == f'"{key}"'  # a shell gives the key as JSON
    assert "then resume it: trioplay resume appr --store memory://" in out
    assert "error:" not in err
    code, out, err = run_cli(
        capsys, "run", str(play), "--store", "memory://", "--run-id", "appr", "--json"
    )
    assert code == 4, err
    summary = json.loads(out)
    assert summary["status"] == "waiting"
    assert summary["datasets"][0]["waiting"] == 2
    assert sorted((w["key"], w["row"]) for w in summary["waiting"]["waits"]) == [
        ("1", "1"),
        ("4", "4"),
    ]
    assert summary["waiting"]["waits"][0]["command"].startswith("trioplay send-event appr ")


def test_waiting_lines_list_ten_waits_then_a_count() -> None:
    waits = tuple(
        WaitRecord(
            wait_key=f"w{i}", run_id="r", dataset="d", row_key=str(i), name="n",
            key_json=str(i), token="t", deadline=1e9 + i, status="waiting", created_at=0.0,
        )
        for i in range(12)
    )  # fmt: skip
    lines = waiting_lines(RunWaiting("r", waits, 1e9), None)
    assert lines[0] == (
        "waiting: run r waits for 12 events (the next deadline is 2001-09-09 01:46:40 UTC); "
        "deliver one with:"
    )
    assert lines[1] == "  trioplay send-event r n 0 --data JSON   # dataset d, row 0"
    assert lines[11] == "  ... and 2 more (`trioplay runs show r`)"
    assert lines[-1] == "then resume it: trioplay resume r"


def test_the_line_send_event_prints() -> None:
    delivered = SendResult("delivered", "e1", "w", "leads", "r2")
    assert sent_line(delivered, "run", 'event approval "r2"') == (
        'delivered: event approval "r2" to run run, dataset leads, row r2 (event id e1); '
        "`trioplay resume run` lets it go on"
    )
    assert sent_line(SendResult("buffered", "e2"), "run", "x").startswith("buffered: x for run run")
    assert sent_line(SendResult("duplicate", "e3"), "run", "x").startswith("duplicate: event id e3")


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.glob("store.db*"))
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["approval", "r2", "--data", "1"], "KEY is not JSON (Expecting value at line 1 column 1)"),
        (["approval", '"r2"', "--data", "{oops"], "--data is not JSON ("),
        (["approval", '"r2"'], "--data an event needs data"),
        (["", '"r2"', "--data", "1"], "NAME must be a non-empty string"),
        (["approval", '"r2"', "--data", "1", "--id", ""], "--id must be a non-empty string"),
        (["approval", '"r2"', "--data", '"' + "x" * 1_100_000 + '"'], "--data is 1,100,002 bytes"),
        (["approval", '"r2"', "--data", "1", "--token", "t"], "--token addresses one wait"),
        (["approval"], "give NAME and KEY"),
        (["--data", "1", "--token", ""], "--token must be a non-empty string"),
        (["--data", "1", "--token", "forged"], "token "),
    ],
)
def test_bad_send_event_input_exits_2_and_the_store_sees_no_write(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    play = tmp_path / "simple.py"
    play.write_text(SIMPLE_PLAY)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    code, _, err = run_cli(capsys, "run", str(play), "--store", store, "--run-id", "r")
    assert code == 0, err
    before = _fingerprint(tmp_path)
    code, out, err = run_cli(capsys, "send-event", "r", *arguments, "--store", store)
    if message == "token ":  # refused by the store, which saw no write
        message = "token names no wait of run 'r'"
    assert code == 2, err
    assert message in err
    assert out == ""
    assert _fingerprint(tmp_path) == before


def test_send_event_to_a_store_that_is_not_there_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'none.db'}"
    code, _, err = run_cli(capsys, "send-event", "r", "a", "1", "--data", "1", "--store", store)
    assert code == 2
    assert "no store at" in err
    assert not list(tmp_path.iterdir())


def test_resume_and_cancel_name_an_unknown_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "simple.py"
    play.write_text(SIMPLE_PLAY)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    assert run_cli(capsys, "run", str(play), "--store", store, "--run-id", "r")[0] == 0
    code, _, err = run_cli(capsys, "resume", "nope", "--store", store)
    assert code == 2
    assert "no run 'nope'" in err
    code, out, err = run_cli(capsys, "resume", "r", str(play), "--store", store)
    assert code == 0, err
    assert "run r: completed (play simple, attempt 2)" in out


def test_runs_list_and_show_tell_the_waits_and_the_unclaimed_events() -> None:
    import trio

    import trioplay
    from trioplay._cli._runs import _format_details, _run_details, _runs_listed
    from trioplay.stores.memory import MemoryStore

    async def waits(ctx: trioplay.PlayContext, _input: object) -> object:
        first = await ctx.wait_for_event("approval", key={"doc": 1}, timeout=600)
        return [first, await ctx.wait_for_event("approval", key={"doc": 2}, timeout=600)]

    async def main() -> tuple[list[dict[str, object]], dict[str, object]]:
        store = MemoryStore()
        async with trioplay.open_runtime(store=store, wall_clock=lambda: 1e9) as rt:
            try:
                await rt.run(waits, run_id="w")
            except trioplay.RunWaiting:
                pass
            await rt.send_event("w", "approval", {"doc": 9}, data="early", event_id="e9")
        listed = await _runs_listed(store, limit=10, lease_ttl=60.0, now=1e9)
        return listed, await _run_details(store, "w")

    listed, details = trio.run(main)
    [run] = listed
    assert (run["status"], run["next_deadline_at"]) == ("waiting", 1e9 + 600)
    assert details["waits"] == [
        {
            "name": "approval",
            "key": {"doc": 1},
            "status": "waiting",
            "dataset": None,
            "row": None,
            "deadline": "2001-09-09T01:56:40+00:00",
            "settled_at": None,
            "reason": None,
            "wait_key": details["waits"][0]["wait_key"],  # type: ignore[index]
        }
    ]
    [event] = details["unclaimed_events"]  # type: ignore[misc]
    assert (event["key"], event["event_id"]) == ({"doc": 9}, "e9")
    text = _format_details(details)
    assert "waits: 1 (1 open)" in text
    assert '  approval {"doc":1}: waiting (the play), deadline 2001-09-09 01:56:40 UTC' in text
    assert "unclaimed events: 1" in text
    assert '  approval {"doc":9}: data, sent 2001-09-09 01:46:40 UTC (id e9)' in text


def test_a_play_whose_wait_has_no_bound_exits_2_naming_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "unbounded.py"
    play.write_text(
        "async def play(ctx, input):\n    return await ctx.wait_for_event('approval')\n"
    )
    code, _, err = run_cli(capsys, "run", str(play), "--store", "memory://")
    assert code == 2
    assert "error: timeout is required: every wait is bounded" in err


ACCEPTANCE_PLAY = """
import trioplay

tools = trioplay.ToolRegistry()


@tools.tool("enrich")
async def enrich(input, call):
    return {"score": len(input["id"])}


async def before(row, rc):
    return (await rc.tool("enrich", {"id": row["id"]}))["score"]


async def approval(row, rc):
    if row["id"] not in ("r2", "r500", "r997"):
        return None
    return await rc.wait_for_event("approval", key=row["id"], timeout=3600)


@trioplay.play("approvals")
async def approvals(ctx, input):
    rows = [{"id": f"r{i}"} for i in range(1000)]
    result = await (
        ctx.dataset("leads", rows)
        .with_column("before", before)
        .with_column("approval", approval)
        .run(key="id", page_size=100)
    )
    await ctx.step("after", lambda: "ran")
    return result.completed_count
"""


def test_acceptance_1_on_sqlite_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "approvals.py"
    play.write_text(ACCEPTANCE_PLAY)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    code, out, err = run_cli(capsys, "run", str(play), "--store", store, "--run-id", "a")
    assert code == 4, err
    assert "leads: 997 completed, 0 failed, 0 skipped, 3 waiting" in out
    commands = [line.split("   #")[0].strip() for line in out.splitlines() if "send-event" in line]
    assert len(commands) == 3
    for command in commands:
        argv = shlex.split(command.replace("--data JSON", """--data '{"ok": true}'"""))[1:]
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, err
        assert out.startswith("delivered: event approval ")
    code, out, err = run_cli(capsys, "resume", "a", "--store", store)
    assert code == 0, err
    assert "leads: 3 completed, 0 failed, 997 skipped" in out
    assert "provider calls: 0\n" in out
    code, out, err = run_cli(capsys, "resume", "a", "--store", store)
    assert code == 0, err
    assert "leads: 0 completed, 0 failed, 1,000 skipped" in out
    # runs show lists the delivered waits; cancel refuses later events.
    code, out, _ = run_cli(capsys, "runs", "show", "a", "--store", store)
    assert "waits: 3 (0 open)" in out
    code, out, err = run_cli(
        capsys, "send-event", "a", "approval", '"r2"', "--data", "1", "--store", store
    )
    assert code == 2
    assert "is completed" in err
