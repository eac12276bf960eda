"""A child play whose rows wait for an outside event makes its caller wait, up to the root
(issue 23 point 6, acceptance 7).

The root ends ``waiting`` (``RunWaiting`` names the child's waits, the CLI exits 4 and
prints the ``send-event`` command for the child run); an event sent to the child run,
then resuming the root, completes both: the child resumes as the same run, and the
caller's ``play`` receipt then holds its output.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from trioplay._cli import main
from trioplay._json import canonical_json
from trioplay._keys import child_play_key, child_run_id

FAMILY_PLAY = """
import trioplay


@trioplay.play("approve")
async def approve(ctx, input):
    if input["auto"]:
        return "auto"
    return await ctx.wait_for_event("approval", key=input["account"], timeout=3600)


@trioplay.play("accounts")
async def accounts(ctx, input):
    async def approved(row, rc):
        return await rc.play(approve, {"account": row["id"], "auto": row["id"] != "a2"})

    rows = [{"id": "a1"}, {"id": "a2"}, {"id": "a3"}]
    result = await ctx.dataset("accounts", rows).with_column("ok", approved).run(key="id")
    return result.completed_count
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _child(parent: str, row: str, input: object) -> str:
    key = child_play_key(parent, "accounts", row, "approve", canonical_json(input))
    return child_run_id("approve", key)


def test_acceptance_7_a_waiting_child_makes_the_root_exit_4_then_both_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "family.py"
    play.write_text(FAMILY_PLAY)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    child = _child("root", "a2", {"account": "a2", "auto": False})
    code, out, err = run_cli(
        capsys, "run", f"{play}:accounts", "--store", store, "--run-id", "root"
    )
    assert code == 4, out + err
    assert "accounts: 2 completed, 0 failed, 0 skipped, 1 waiting" in out
    assert "run root: waiting (play accounts, attempt 1)" in out  # the root, not its child
    assert "waiting: run root waits for 1 event" in out
    [command] = [line.split("   #")[0].strip() for line in out.splitlines() if "send-event" in line]
    assert command == (
        f"trioplay send-event {child} approval '\"a2\"' --data JSON --store {shlex.quote(store)}"
    )
    assert command + f"   # child run {child}, the play" in out  # whose wait it is
    assert f"then resume it: trioplay resume root --store {shlex.quote(store)}" in out

    # runs show draws the child waiting under its parent.
    code, out, err = run_cli(capsys, "runs", "show", "root", "--store", store)
    assert code == 0, err
    assert "  root (accounts, waiting)  <- this run" in out
    assert f"    {child} (approve, waiting)" in out

    argv = shlex.split(command.replace("--data JSON", """--data '{"ok": true}'"""))[1:]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert out.startswith(f'delivered: event approval "a2" to run {child}, the play ')

    code, out, err = run_cli(capsys, "resume", "root", "--store", store)
    assert code == 0, out + err
    assert "run root: completed (play accounts, attempt 2)" in out
    assert "accounts: 1 completed, 0 failed, 2 skipped" in out
    code, out, err = run_cli(capsys, "export", "root", "accounts", "--store", store, "--out", "-")
    assert code == 0, err
    assert out == 'id,ok\na1,auto\na2,"{""ok"":true}"\na3,auto\n'  # a2 has the child's output
    code, out, err = run_cli(capsys, "runs", "show", "root", "--store", store)
    assert "  root (accounts, completed)  <- this run" in out
    assert f"    {child} (approve, completed)" in out
