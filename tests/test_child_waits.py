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
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._cli import main
from trioplay._json import canonical_json
from trioplay._keys import child_play_key, child_run_id
from trioplay._trace import ListSink, Recorder
from trioplay._trace._records import ChildFinished
from trioplay.stores.memory import MemoryStore

from .test_store_contract import STORE_FACTORIES, STORE_MARKS

if TYPE_CHECKING:
    from collections.abc import Callable

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


def _root_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str, str]:
    """``trioplay run`` of the family play as run ``root`` on a new SQLite store: it exits 4
    (its child for row a2 waits). Returns the store URL, the child run id and the output."""
    play = tmp_path / "family.py"
    play.write_text(FAMILY_PLAY)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    code, out, err = run_cli(
        capsys, "run", f"{play}:accounts", "--store", store, "--run-id", "root"
    )
    assert code == 4, out + err
    return store, _child("root", "a2", {"account": "a2", "auto": False}), out


def test_acceptance_7_a_waiting_child_makes_the_root_exit_4_then_both_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, child, out = _root_waits(tmp_path, capsys)
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


# -- the engine, on every store --------------------------------------------------------
@pytest.fixture(
    params=[pytest.param(name, marks=STORE_MARKS.get(name, [])) for name in STORE_FACTORIES]
)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], trioplay.Store]:
    kind = request.param
    return lambda: STORE_FACTORIES[kind](tmp_path)


@trioplay.play("signoff")
async def signoff(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.wait_for_event("signed", key=input["doc"], timeout=600)


@trioplay.play("paper")
async def paper(ctx: trioplay.PlayContext, input: Any) -> Any:
    return {"got": await ctx.play(signoff, {"doc": input})}


async def _status(store: trioplay.Store, run_id: str) -> tuple[str, int]:
    record = await store.get_run(run_id)
    assert record is not None, run_id
    return record.status, record.attempt


async def test_a_play_level_child_wait_makes_the_root_wait_then_a_resume_completes_both(
    make_store: Callable[[], trioplay.Store],
) -> None:
    store = make_store()
    key = child_play_key("p", None, None, "signoff", canonical_json({"doc": 7}))
    child = child_run_id("signoff", key)
    async with trioplay.open_runtime(store=store) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(paper, 7, run_id="p")
        waiting = caught.value
        assert waiting.run_id == "p"
        [wait] = waiting.waits
        assert (wait.run_id, wait.name, wait.key_json, wait.status) == (
            child,
            "signed",
            "7",
            "waiting",
        )
        assert waiting.next_deadline == wait.deadline
        assert await _status(store, "p") == ("waiting", 1)
        assert await _status(store, child) == ("waiting", 1)
        [receipt] = await store.get_many([key])
        assert receipt is not None
        assert (receipt.operation, receipt.result_json) == ("play", None)
        assert receipt.status != "completed"  # no success receipt while the child waits

        # A resume before the event: both wait again, the same wait (one, same deadline).
        with pytest.raises(trioplay.RunWaiting) as again:
            await rt.run(paper, 7, run_id="p")
        assert [(w.wait_key, w.deadline) for w in again.value.waits] == [
            (wait.wait_key, wait.deadline)
        ]
        assert await _status(store, child) == ("waiting", 2)

        sent = await rt.send_event(child, "signed", 7, data="yes")
        assert (sent.outcome, sent.dataset, sent.row_key) == ("delivered", None, None)
        assert await rt.run(paper, 7, run_id="p") == {"got": "yes"}
        assert await _status(store, child) == ("completed", 3)  # the same child run, resumed
        assert await _status(store, "p") == ("completed", 3)
        [receipt] = await store.get_many([key])
        assert receipt is not None
        assert (receipt.status, receipt.result_json) == ("completed", '"yes"')
        # Rerun: the parent replays the child's output without opening it.
        assert await rt.run(paper, 7, run_id="p") == {"got": "yes"}
        assert await _status(store, child) == ("completed", 3)


@trioplay.play("approve")
async def approve(ctx: trioplay.PlayContext, input: Any) -> Any:
    """A child whose one row waits for an approval (unless ``auto``); the row failing fails it."""

    async def approval(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        if input["auto"]:
            return "auto"
        return await rc.wait_for_event("approval", key=row["id"], timeout=3600)

    rows = [{"id": input["account"]}]
    asks = ctx.dataset("asks", rows).with_column("ok", approval)
    result = await asks.run(key="id", on_row_error="fail")
    return result.preview[0]["ok"]


class Accounts:
    """A map of five accounts whose rows call ``approve``; a1 and a3 wait; a step after."""

    def __init__(self) -> None:
        self.after = 0

    async def play(self, ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def approved(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.play(approve, {"account": row["id"], "auto": row["id"] not in WAIT})

        rows = [{"id": f"a{i}"} for i in range(5)]
        result = await ctx.dataset("accounts", rows).with_column("ok", approved).run(key="id")

        def after() -> int:
            self.after += 1
            return self.after

        await ctx.step("after", after)
        return result.completed_count


WAIT = ("a1", "a3")


def _approver(parent: str, account: str, auto: bool) -> str:
    input = canonical_json({"account": account, "auto": auto})
    return child_run_id("approve", child_play_key(parent, "accounts", account, "approve", input))


async def test_rc_play_in_a_map_waits_for_its_children_then_a_resume_completes_them(
    make_store: Callable[[], trioplay.Store],
) -> None:
    store = make_store()
    plays = Accounts()
    waiting_children = [_approver("m", account, False) for account in WAIT]
    async with trioplay.open_runtime(store=store) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(plays.play, run_id="m")
        waits = sorted(caught.value.waits, key=lambda wait: wait.run_id)
        assert [(w.run_id, w.dataset, w.row_key, w.name) for w in waits] == sorted(
            (child, "asks", account, "approval")
            for child, account in zip(waiting_children, WAIT, strict=True)
        )
        assert plays.after == 0  # nothing after the map ran on a partial result
        assert await _status(store, "m") == ("waiting", 1)
        for child in waiting_children:
            assert await _status(store, child) == ("waiting", 1)
        rows = await store.read_rows("m", "accounts", limit=10)
        assert sorted(row.key for row in rows) == ["a0", "a2", "a4"]  # the waiting rows: unwritten
        assert all(row.status == "completed" for row in rows)

        for child, account in zip(waiting_children, WAIT, strict=True):
            sent = await rt.send_event(child, "approval", account, data={"by": account})
            assert (sent.outcome, sent.dataset, sent.row_key) == ("delivered", "asks", account)
        assert await rt.run(plays.play, run_id="m") == 2
        assert rt.last_stats is not None
        assert rt.last_stats.children_run == 2  # only the waiting rows' children ran again
        assert plays.after == 1
        rows = await store.read_rows("m", "accounts", limit=10)
        values = {row.key: trioplay._json.loads(row.data_json)["ok"] for row in rows}
        assert values == {
            "a0": "auto",
            "a1": {"by": "a1"},
            "a2": "auto",
            "a3": {"by": "a3"},
            "a4": "auto",
        }
        for child in waiting_children:
            assert await _status(store, child) == ("completed", 2)
        assert await _status(store, "m") == ("completed", 2)


# -- deeper trees, buffered events, deadlines (memory store) -----------------------------
@trioplay.play("middle")
async def middle(ctx: trioplay.PlayContext, input: Any) -> Any:
    async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return await rc.play(signoff, {"doc": row["doc"]})

    rows = [{"doc": doc} for doc in input]
    result = await ctx.dataset("docs", rows).with_column("signed", cell).run(key="doc")
    return sorted(row["signed"] for row in result.preview)


@trioplay.play("top")
async def top(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.play(middle, input)


async def test_a_waiting_grandchild_makes_every_caller_wait_up_to_the_root() -> None:
    recorder = Recorder(sink := ListSink())
    store = MemoryStore()
    mid = child_run_id("middle", child_play_key("t", None, None, "middle", "[1,2]"))
    leaves = [
        child_run_id(
            "signoff", child_play_key(mid, "docs", str(doc), "signoff", f'{{"doc":{doc}}}')
        )
        for doc in (1, 2)
    ]
    async with trioplay.open_runtime(store=store, recorder=recorder) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(top, [1, 2], run_id="t")
        assert caught.value.run_id == "t"
        assert sorted((w.run_id, w.key_json) for w in caught.value.waits) == sorted(
            [(leaves[0], "1"), (leaves[1], "2")]
        )
        for run_id in ("t", mid, *leaves):
            assert (await _status(store, run_id))[0] == "waiting"
        recorder.flush()
        finished = [(e.child, e.status) for e in sink.events if isinstance(e, ChildFinished)]
        assert sorted(finished) == sorted(
            [(mid, "waiting"), *((leaf, "waiting") for leaf in leaves)]
        )

        for doc, leaf in zip((1, 2), leaves, strict=True):
            await rt.send_event(leaf, "signed", doc, data=f"ok {doc}")
        assert await rt.run(top, [1, 2], run_id="t") == ["ok 1", "ok 2"]
        for run_id in ("t", mid, *leaves):
            assert await _status(store, run_id) == ("completed", 2)


@trioplay.play("twice")
async def twice(ctx: trioplay.PlayContext, input: Any) -> Any:
    first = await ctx.wait_for_event("first", key=input, timeout=600)
    second = await ctx.wait_for_event("second", key=input, timeout=600)
    return [first, second]


@trioplay.play("asks-twice")
async def asks_twice(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.play(twice, input)


async def test_an_event_sent_before_the_childs_next_wait_is_taken_on_resume() -> None:
    store = MemoryStore()
    child = child_run_id("twice", child_play_key("a", None, None, "twice", '"k"'))
    async with trioplay.open_runtime(store=store) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(asks_twice, "k", run_id="a")
        assert [(w.run_id, w.name) for w in caught.value.waits] == [(child, "first")]
        assert (await rt.send_event(child, "first", "k", data=1)).outcome == "delivered"
        # The child has no wait on "second" yet: buffered, and taken when it registers.
        assert (await rt.send_event(child, "second", "k", data=2)).outcome == "buffered"
        assert await rt.run(asks_twice, "k", run_id="a") == [1, 2]
        assert await _status(store, child) == ("completed", 2)
        assert await _status(store, "a") == ("completed", 2)


class Clock:
    """A wall clock the test moves by hand: the deadline is a wall-clock instant."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_child_wait_past_its_deadline_fails_the_child_and_its_caller_gets_child_play_failed(
    kind: str, tmp_path: Path
) -> None:
    clock = Clock()
    memory = MemoryStore()

    def store() -> Any:  # each attempt a new process: a new runtime over the same store
        return memory if kind == "memory" else f"sqlite:///{tmp_path / 'waits.db'}"

    plays = Accounts()
    children = [_approver("m", account, False) for account in WAIT]
    async with trioplay.open_runtime(store=store(), wall_clock=clock) as rt:
        with pytest.raises(trioplay.RunWaiting) as caught:
            await rt.run(plays.play, run_id="m")
        deadline = caught.value.next_deadline
        assert deadline == clock.now + 3600
        with pytest.raises(trioplay.RunWaiting):
            await rt.run(paper, 7, run_id="p")
    clock.now = deadline + 1  # restarted past the deadline, no event sent
    async with trioplay.open_runtime(store=store(), wall_clock=clock) as rt:
        assert await rt.run(plays.play, run_id="m") == 0  # the waiting rows failed
        failed = await rt.store.read_rows("m", "accounts", status="failed", limit=10)
        assert sorted(row.key for row in failed) == list(WAIT)
        for row in failed:
            assert "ChildPlayFailed" in (row.error or "")
            assert "EventWaitTimeout" in (row.error or "")
        for child in children:
            assert await _status(rt.store, child) == ("failed", 2)
        assert plays.after == 1  # the map no longer waits: the play went on
        with pytest.raises(trioplay.ChildPlayFailed, match="EventWaitTimeout"):
            await rt.run(paper, 7, run_id="p")
        assert await _status(rt.store, "p") == ("failed", 2)


@trioplay.play("quick-reply")
async def quick_reply(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.wait_for_event("reply", key=input, timeout=600, linger=30)


@trioplay.play("asks-quickly")
async def asks_quickly(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.play(quick_reply, input)


async def test_an_event_sent_to_a_lingering_child_while_the_root_runs_needs_no_resume(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    child = child_run_id("quick-reply", child_play_key("q", None, None, "quick-reply", '"k"'))

    def wall() -> float:
        return 1_800_000_000.0 + trio.current_time()

    async with trioplay.open_runtime(store=store, wall_clock=wall) as rt:

        async def reply() -> None:
            await trio.sleep(5)  # virtual seconds: the child lingers for its event meanwhile
            assert (await rt.send_event(child, "reply", "k", data="soon")).outcome == "delivered"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reply)
            assert await rt.run(asks_quickly, "k", run_id="q") == "soon"
        assert 5 <= trio.current_time() < 30
        assert await _status(store, child) == ("completed", 1)
        assert await _status(store, "q") == ("completed", 1)


def test_cancelling_a_root_cancels_its_waiting_child_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, child, _ = _root_waits(tmp_path, capsys)
    code, out, err = run_cli(capsys, "cancel", "root", "--store", store)
    assert code == 0, err
    assert out == (
        f"cancelled: run root and its waiting child plays {child}; 1 open wait cancelled, "
        "later events are refused\n"
    )
    code, out, err = run_cli(capsys, "runs", "show", "root", "--store", store)
    assert f"    {child} (approve, cancelled)" in out
    code, _, err = run_cli(
        capsys, "send-event", child, "approval", '"a2"', "--data", "1", "--store", store
    )
    assert code == 2
    assert "is cancelled" in err
