"""A run id names one play and one input: reusing it for another is refused, resuming works."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import trioplay
from trioplay._cli import main
from trioplay._json import canonical_json
from trioplay.stores.memory import MemoryStore

from .support import registry


async def double(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
    return {"x": input["n"] * 2}


async def resolve(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("double", {"n": row["n"]}))["x"]


def counting_play(name: str) -> Any:
    @trioplay.play(name)
    async def counting(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
        rows = [{"n": n} for n in range(input["count"])]
        return (await ctx.dataset("nums", rows).with_column("x", resolve).run(key="n")).to_dict()

    return counting


numbers, letters = counting_play("numbers"), counting_play("letters")


def input_digest(input: Any) -> str:
    # What `printf %s '{"count":3}' | sha256sum` prints, cut to 12 digits.
    return hashlib.sha256(canonical_json(input).encode()).hexdigest()[:12]


@pytest.mark.parametrize(
    ("play", "input"), [(numbers, {"count": 5}), (letters, {"count": 3})], ids=["input", "play"]
)
async def test_a_run_id_reused_for_another_play_or_input_is_refused(
    play: Any, input: dict[str, Any]
) -> None:
    store = MemoryStore()
    async with trioplay.open_runtime(store=store, tools=registry(double=double)) as rt:
        await rt.run(numbers, {"count": 3}, run_id="r")
        before = await store.get_run("r")
        with pytest.raises(trioplay.RunIdConflict) as caught:
            await rt.run(play, input, run_id="r")
        assert await store.get_run("r") == before  # not begun again, nothing overwritten
        assert await store.count_rows("r", "nums") == {"completed": 3}
        # The same play and input resume the run, as before.
        await rt.run(numbers, {"count": 3}, run_id="r")
        resumed = await store.get_run("r")
    message = str(caught.value)
    assert "run 'r' was started with play 'numbers' and input" in message
    assert input_digest({"count": 3}) in message
    assert '{"count":3}' in message
    assert input_digest(input) in message
    assert "another run id" in message
    assert "the same play and the same input" in message
    error = caught.value
    assert (error.run_id, error.stored_play, error.play) == ("r", "numbers", play_name(play))
    assert resumed is not None
    assert (resumed.status, resumed.attempt) == ("completed", 2)


def play_name(play: Any) -> str:
    return str(play.__trioplay_name__)


def test_the_command_line_refuses_a_reused_run_id_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "p.py"
    play.write_text(
        "import trioplay\n"
        "@trioplay.play('p')\n"
        "async def p(ctx, input):\n"
        "    await ctx.dataset('d', [{'n': n} for n in range(input['n'])]).run(key='n')\n"
    )
    store = f"sqlite:///{tmp_path / 's.db'}"
    run = ["run", str(play), "--run-id", "x", "--store", store]
    assert main([*run, "--input", '{"n": 2}']) == 0
    capsys.readouterr()
    assert main([*run, "--input", '{"n": 3}']) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before anything ran: no summary
    assert "error: run 'x' was started with play 'p' and input" in err
    assert input_digest({"n": 2}) in err
    assert main([*run, "--input", '{"n": 2}']) == 0  # resumes
    out, _ = capsys.readouterr()
    assert "run x: completed (play p, attempt 2)" in out
    assert main(["runs", "show", "x", "--store", store]) == 0
    out, _ = capsys.readouterr()
    assert 'input:    {"n":2}' in out
