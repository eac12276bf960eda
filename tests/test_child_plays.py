"""Child plays (issue 23): durable calls of a play by a play, guards, limits, cancellation."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._json import canonical_json
from trioplay._keys import child_play_key, child_run_id
from trioplay._runtime import default_run_id
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, registry
from .test_cancellation import runtime_tasks
from .test_store_contract import STORE_FACTORIES, STORE_MARKS

if TYPE_CHECKING:
    from collections.abc import Callable


@pytest.fixture(
    params=[pytest.param(name, marks=STORE_MARKS.get(name, [])) for name in STORE_FACTORIES]
)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], trioplay.Store]:
    kind = request.param
    return lambda: STORE_FACTORIES[kind](tmp_path)


@trioplay.play("score")
async def score(ctx: trioplay.PlayContext, input: Any) -> Any:
    """The child: a map over the input's domains, one tool call a row."""

    async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

    domains = [{"domain": f"{input['account']}-{i}.example"} for i in range(3)]
    result = await ctx.dataset("people", domains).with_column("email", email).run(key="domain")
    return {"account": input["account"], "people": result.completed_count}


@trioplay.play("leads")
async def leads(ctx: trioplay.PlayContext, input: Any) -> Any:
    """The parent: one child per account row."""

    async def scored(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        return (await rc.play(score, {"account": row["account"]}))["people"]

    accounts = [{"account": f"a{i}"} for i in range(input["accounts"])]
    result = (
        await ctx.dataset("accounts", accounts).with_column("people", scored).run(key="account")
    )
    return {"done": result.completed_count + result.skipped_count, "failed": result.failed_count}


def child_id(parent_run: str, dataset: str | None, row: str | None, play: str, input: Any) -> str:
    return child_run_id(play, child_play_key(parent_run, dataset, row, play, canonical_json(input)))


async def test_rerun_replays_the_child_output_without_opening_the_child(
    make_store: Callable[[], trioplay.Store],
) -> None:
    finder = CountingTool()
    store = make_store()
    async with trioplay.open_runtime(store=store, tools=registry(finder=finder)) as rt:
        assert await rt.run(leads, {"accounts": 2}) == {"done": 2, "failed": 0}
        assert finder.calls == 6
        parent = default_run_id("leads", canonical_json({"accounts": 2}))
        children = [
            child_id(parent, "accounts", f"a{i}", "score", {"account": f"a{i}"}) for i in range(2)
        ]
        for run_id in children:
            record = await store.get_run(run_id)
            assert record is not None
            assert (record.status, record.attempt) == ("completed", 1)
            assert (record.parent_run_id, record.root_run_id, record.depth) == (parent, parent, 1)

        assert await rt.run(leads, {"accounts": 2}) == {"done": 2, "failed": 0}
        assert finder.calls == 6
        assert rt.last_stats is not None
        assert rt.last_stats.provider_calls == 0
        for run_id in children:
            record = await store.get_run(run_id)
            assert record is not None
            assert record.attempt == 1  # the child was not opened again


@trioplay.play("chain")
async def chain(ctx: trioplay.PlayContext, input: Any) -> Any:
    """Calls ``chain-<n+1>`` until ``stop``: each link a play of its own (no cycle)."""
    n = input["n"]
    if n == input["stop"]:
        return n
    return await ctx.play(LINKS[n + 1], {"n": n + 1, "stop": input["stop"]})


def _link(n: int) -> Any:
    async def link(ctx: trioplay.PlayContext, input: Any) -> Any:
        return await chain(ctx, input)

    return trioplay.play(f"link-{n}")(link)


LINKS = [_link(n) for n in range(12)]


async def test_depth_is_refused_before_anything_of_the_child_is_written(
    make_store: Callable[[], trioplay.Store],
) -> None:
    store = make_store()
    limits = trioplay.Limits(max_play_depth=2)
    # link-2 runs at depth 2 and refuses link-3: no run of link-3, no receipt of its call.
    link1 = child_id("deep", None, None, "link-1", {"n": 1, "stop": 3})
    link2 = child_id(link1, None, None, "link-2", {"n": 2, "stop": 3})
    refused_key = child_play_key(link2, None, None, "link-3", canonical_json({"n": 3, "stop": 3}))
    async with trioplay.open_runtime(store=store, limits=limits) as rt:
        assert await rt.run(LINKS[0], {"n": 0, "stop": 2}) == 2  # depth 2: allowed
        with pytest.raises(trioplay.PlayDepthExceeded) as caught:
            await rt.run(LINKS[0], {"n": 0, "stop": 3}, run_id="deep")
        record = await store.get_run(link2)
        assert record is not None
        assert record.depth == 2
        assert await store.get_run(child_run_id("link-3", refused_key)) is None
        assert await store.get_many([refused_key]) == [None]
        assert all(run.play != "link-3" for run in await store.list_runs(limit=100))
    assert caught.value.lineage == ("link-0", "link-1", "link-2", "link-3")
    assert "Limits.max_play_depth=2" in str(caught.value)


@trioplay.play("a")
async def play_a(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.play(input["next"][0], {"next": input["next"][1:]}) if input["next"] else "a"


@trioplay.play("b")
async def play_b(ctx: trioplay.PlayContext, input: Any) -> Any:
    return await ctx.play(input["next"][0], {"next": input["next"][1:]}) if input["next"] else "b"


async def test_cycles_are_refused_with_their_path() -> None:
    async with trioplay.open_runtime(store=MemoryStore(), plays=[play_a, play_b]) as rt:
        with pytest.raises(trioplay.PlayCycleError) as direct:
            await rt.run(play_a, {"next": ["a"]})
        assert direct.value.path == ("a", "a")
        with pytest.raises(trioplay.PlayCycleError) as indirect:
            await rt.run(play_a, {"next": ["b", "a"]})
        assert indirect.value.path == ("a", "b", "a")
        assert "a → b → a" in str(indirect.value)
        # Calling b, then b again from a fresh root of b: no cycle, the lineage is per tree.
        assert await rt.run(play_a, {"next": ["b"]}) == "b"


@trioplay.play("top")
async def top(ctx: trioplay.PlayContext, _input: Any) -> Any:
    return [await ctx.play("left", None), await ctx.play("right", None)]


@trioplay.play("left")
async def left(ctx: trioplay.PlayContext, _input: Any) -> Any:
    return await ctx.play("bottom", "from left")


@trioplay.play("right")
async def right(ctx: trioplay.PlayContext, _input: Any) -> Any:
    return await ctx.play("bottom", "from right")


@trioplay.play("bottom")
async def bottom(ctx: trioplay.PlayContext, input: Any) -> Any:
    return input


async def test_a_diamond_is_no_cycle() -> None:
    async with trioplay.open_runtime(store=MemoryStore(), plays=[top, left, right, bottom]) as rt:
        assert await rt.run(top, None) == ["from left", "from right"]


async def test_a_cycle_inside_a_map_fails_the_map_once() -> None:
    started: list[str] = []

    @trioplay.play("mapper")
    async def mapper(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def call(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            started.append(row["k"])
            return await rc.play("b", {"next": ["mapper"]})

        rows = [{"k": str(i)} for i in range(20)]
        await ctx.dataset("rows", rows).with_column("x", call).run(key="k")
        return "never"

    async with trioplay.open_runtime(
        store=MemoryStore(), plays=[mapper, play_b], limits=trioplay.Limits(max_concurrent_rows=1)
    ) as rt:
        with pytest.raises(trioplay.PlayCycleError) as caught:
            await rt.run(mapper, None, run_id="m")
        # The map failed as a whole: not one failed row per row.
        failed = await rt.store.read_rows("m", "rows", status="failed", after_position=-1, limit=50)
    assert caught.value.path == ("mapper", "b", "mapper")
    assert started
    assert failed == []


async def test_a_resolver_runs_at_most_max_inline_children_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    in_flight = peak = 0

    @trioplay.play("slow")
    async def slow(ctx: trioplay.PlayContext, input: Any) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(1)
        in_flight -= 1
        return input

    @trioplay.play("fan")
    async def fan(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def fifty(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            results: dict[int, Any] = {}

            async def one(i: int) -> None:
                results[i] = await rc.play(slow, i)

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
            return [results[i] for i in range(50)]

        result = await ctx.dataset("d", [{"k": "x"}]).with_column("v", fifty).run(key="k")
        return result.completed_count

    limits = trioplay.Limits(max_inline_children=4)
    async with trioplay.open_runtime(store=MemoryStore(), limits=limits) as rt:
        start = trio.current_time()
        assert await rt.run(fan, None) == 1
        elapsed = trio.current_time() - start
    assert peak == 4
    assert elapsed == pytest.approx(13, abs=0.5)  # ceil(50 / 4) rounds of one virtual second


async def test_per_row_and_per_run_caps_raise_their_errors() -> None:
    @trioplay.play("leaf")
    async def leaf(ctx: trioplay.PlayContext, input: Any) -> Any:
        return input

    @trioplay.play("many")
    async def many(ctx: trioplay.PlayContext, input: Any) -> Any:
        async def calls(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return [await rc.play(leaf, [row["k"], i]) for i in range(input["per_row"])]

        rows = [{"k": str(i)} for i in range(input["rows"])]
        result = await ctx.dataset("d", rows).with_column("v", calls).run(key="k")
        return [row["_error"] async for row in result.rows(status="failed")]

    limits = trioplay.Limits(max_children_per_row=3, max_children_per_run=5)
    async with trioplay.open_runtime(store=MemoryStore(), limits=limits) as rt:
        errors = await rt.run(many, {"rows": 1, "per_row": 4})
        assert len(errors) == 1
        assert "ChildLimitExceeded" in errors[0]
        assert "max_children_per_row=3" in errors[0]
        errors = await rt.run(many, {"rows": 3, "per_row": 2})
        assert len(errors) == 1
        assert "max_children_per_run=5" in errors[0]


async def test_nested_maps_three_deep_share_two_row_slots(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_tool(input: Any, call: trioplay.ToolCall) -> Any:
        await trio.sleep(1)
        return input

    def level(name: str, below: str | None) -> Any:
        @trioplay.play(name)
        async def body(ctx: trioplay.PlayContext, input: Any) -> Any:
            async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
                if below is None:
                    return await rc.tool("slow", [input, row["k"]])
                return await rc.play(below, [input, row["k"]])

            rows = [{"k": str(i)} for i in range(3)]
            result = await ctx.dataset(name, rows).with_column("v", cell).run(key="k")
            return result.completed_count

        return body

    plays = [level("outer", "middle"), level("middle", "inner"), level("inner", None)]
    limits = trioplay.Limits(max_concurrent_rows=2)
    with trio.fail_after(120):
        async with trioplay.open_runtime(
            store=MemoryStore(), limits=limits, plays=plays, tools=registry(slow=slow_tool)
        ) as rt:
            assert await rt.run(plays[0], "root") == 3
            runs = await rt.store.list_runs(limit=100)
    assert sorted(run.depth for run in runs) == [0] + [1] * 3 + [2] * 9
    assert all(run.status == "completed" for run in runs)


async def test_a_failed_child_raises_in_its_caller_and_is_resumed_by_a_rerun(
    make_store: Callable[[], trioplay.Store],
) -> None:
    finder = CountingTool()
    store = make_store()
    broken = {"a0-1.example"}

    @trioplay.play("parent")
    async def parent(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.play(strict_score, {"account": "a0"})

    @trioplay.play("strict-score")
    async def strict_score(ctx: trioplay.PlayContext, input: Any) -> Any:
        async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            if row["domain"] in broken:
                raise RuntimeError("resolver bug")
            return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

        domains = [{"domain": f"{input['account']}-{i}.example"} for i in range(3)]
        result = await ctx.dataset("people", domains).with_column("email", email).run(key="domain")
        if result.failed_count:
            raise RuntimeError("resolver bug")
        return result.completed_count + result.skipped_count

    key = child_play_key("p", None, None, "strict-score", canonical_json({"account": "a0"}))
    async with trioplay.open_runtime(store=store, tools=registry(finder=finder)) as rt:
        with pytest.raises(trioplay.ChildPlayFailed) as caught:
            await rt.run(parent, None, run_id="p")
        child = caught.value.child_run_id
        assert child == child_run_id("strict-score", key)
        assert caught.value.cause == "RuntimeError: resolver bug"
        assert isinstance(caught.value.__cause__, RuntimeError)
        record = await store.get_run(child)
        assert record is not None
        assert record.status == "failed"
        [receipt] = await store.get_many([key])
        assert receipt is not None
        assert receipt.status != "completed"
        calls_before = finder.calls
        assert calls_before == 2

        broken.clear()
        # The rerun resumes the child: its completed rows are skipped, the failed one runs.
        assert await rt.run(parent, None, run_id="p") == 3
        record = await store.get_run(child)
        assert record is not None
        assert (record.status, record.attempt) == ("completed", 2)
        assert finder.calls == calls_before + 1


async def test_bad_calls_are_refused_with_what_to_do() -> None:
    kept: list[trioplay.RowContext] = []

    @trioplay.play("bad")
    async def bad(ctx: trioplay.PlayContext, input: Any) -> Any:
        if input == "not a play":
            return await ctx.play(42, None)
        if input == "sync":
            return await ctx.play(lambda ctx, input: None, None)
        if input == "unknown":
            return await ctx.play("nobody", None)
        if input == "not json":
            return await ctx.play(bottom, {1, 2})

        async def keep(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            kept.append(rc)
            return 1

        await ctx.dataset("d", [{"k": "1"}]).with_column("v", keep).run(key="k")
        return "kept"

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        with pytest.raises(trioplay.PlayDefinitionError, match="is not a play"):
            await rt.run(bad, "not a play")
        with pytest.raises(trioplay.PlayDefinitionError, match="is not a play"):
            await rt.run(bad, "sync")
        with pytest.raises(trioplay.PlayDefinitionError, match="no play named 'nobody'"):
            await rt.run(bad, "unknown")
        with pytest.raises(trioplay.PlayInputError, match="JSON"):
            await rt.run(bad, "not json")
        assert await rt.run(bad, "after") == "kept"
        with pytest.raises(trioplay.RunEnded):
            await kept[0].play(bottom, None)
        # A child run id taken by another play or input.
        taken = child_id("taken", None, None, "bottom", "x")
        await rt.store.begin_attempt(taken, "other", "null", now=0.0)

        @trioplay.play("caller")
        async def caller(ctx: trioplay.PlayContext, _input: Any) -> Any:
            return await ctx.play(bottom, "x")

        with pytest.raises(trioplay.RunIdConflict, match="another play"):
            await rt.run(caller, None, run_id="taken")


@pytest.mark.parametrize(
    "store_kind",
    [pytest.param(name, marks=STORE_MARKS.get(name, [])) for name in STORE_FACTORIES],
)
async def test_cancelling_the_parent_mid_child_leaves_nothing_behind(
    store_kind: str, tmp_path: Path
) -> None:
    hanging = trio.Event()

    async def hang(input: Any, call: trioplay.ToolCall) -> Any:
        if input == "hang":
            hanging.set()
            await trio.sleep_forever()
        return input

    @trioplay.play("stuck")
    async def stuck(ctx: trioplay.PlayContext, input: Any) -> Any:
        async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("hang", row["k"])

        rows = [{"k": "fine"}, {"k": "hang"}]
        return (await ctx.dataset("inner", rows).with_column("v", cell).run(key="k")).to_dict()

    @trioplay.play("outer")
    async def outer(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.play(stuck, row["k"])

        return (
            await ctx.dataset("rows", [{"k": "x"}]).with_column("v", cell).run(key="k")
        ).to_dict()

    store = STORE_FACTORIES[store_kind](tmp_path)
    child = child_id("parent", "rows", "x", "stuck", "x")
    async with trioplay.open_runtime(store=store, tools=registry(hang=hang)) as rt:
        before = runtime_tasks()
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(functools.partial(rt.run, outer, None, run_id="parent"))
                await hanging.wait()
                scope.cancel()
        assert scope.cancelled_caught
        assert runtime_tasks() == before
        for run_id in ("parent", child):
            record = await rt.store.get_run(run_id)
            assert record is not None
            assert record.status == "interrupted"
            held = await rt.store.count_receipts(run_id)
            assert held.get("running", 0) == 0, (run_id, held)
        # Nothing holds a page either: another owner claims each map's page at once.
        for run_id, dataset in (("parent", "rows"), (child, "inner")):
            page = await rt.store.claim_page(
                run_id, dataset, 0, owner="another", lease_ttl=60, now=rt.wall_clock()
            )
            assert page.status == "claimed", (run_id, page)


async def test_a_child_start_and_end_are_told_with_its_depth() -> None:
    told: list[trioplay.RuntimeEvent] = []
    finder = CountingTool()
    async with trioplay.open_runtime(
        store=MemoryStore(), tools=registry(finder=finder), on_event=told.append
    ) as rt:
        await rt.run(leads, {"accounts": 1}, run_id="r")
        child = child_id("r", "accounts", "a0", "score", {"account": "a0"})
        children = [(e.type, e.run_id, e.data) for e in told if e.type.startswith("child.")]
        assert children == [
            (
                "child.started",
                "r",
                {"child": child, "play": "score", "depth": 1, "map": "accounts", "row": "a0"},
            ),
            ("child.finished", "r", {"child": child, "status": "completed", "error": None}),
        ]
        # The child's own run is told under its own id.
        assert ("run.finished", child) in [(e.type, e.run_id) for e in told]
        told.clear()
        await rt.run(leads, {"accounts": 1}, run_id="r")  # replayed: the child does not start
        assert not [e for e in told if e.type.startswith("child.")]


async def test_runs_show_draws_the_tree_of_a_run(tmp_path: Path) -> None:
    from trioplay._cli._runs import _format_details, _run_details
    from trioplay._cli._stores import opened
    from trioplay.stores.sqlite import SqliteStore

    path = tmp_path / "tree.db"
    async with trioplay.open_runtime(
        store=SqliteStore(path), tools=registry(finder=CountingTool())
    ) as rt:
        await rt.run(leads, {"accounts": 2}, run_id="leads")
        await rt.run(bottom, "alone", run_id="alone")
    children = {
        child_id("leads", "accounts", f"a{i}", "score", {"account": f"a{i}"}) for i in range(2)
    }
    shown = min(children)
    async with opened(SqliteStore(path)) as store:
        details = await _run_details(store, shown)
        alone = await _run_details(store, "alone")
    assert (details["parent_run_id"], details["depth"]) == ("leads", 1)
    tree = [(run["run_id"], run["depth"]) for run in details["tree"]]
    assert tree[0] == ("leads", 0)
    assert sorted(tree[1:]) == sorted((child, 1) for child in children)
    drawn = _format_details(details).splitlines()
    lines = drawn[drawn.index("tree:") + 1 :]
    assert lines[0] == "  leads (leads, completed)"
    assert sorted(lines[1:]) == sorted(
        f"    {child} (score, completed)" + ("  <- this run" if child == shown else "")
        for child in children
    )
    assert alone["tree"] == []
    assert "tree:" not in _format_details(alone)


@pytest.mark.deadline(600)  # virtual seconds
async def test_a_row_waiting_on_a_stalled_child_names_the_child_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(input: Any, call: trioplay.ToolCall) -> Any:
        await trio.sleep(130)
        return input

    @trioplay.play("stalled-child")
    async def stalled(ctx: trioplay.PlayContext, input: Any) -> Any:
        await ctx.tool("slow", input)  # at play level: none of the caller row's business
        return input

    @trioplay.play("waiting-parent")
    async def parent(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.play(stalled, row["k"])

        return (
            await ctx.dataset("rows", [{"k": "x"}]).with_column("v", cell).run(key="k")
        ).to_dict()

    told: list[trioplay.RuntimeEvent] = []
    limits = trioplay.Limits(stall_log_interval=50, tool_timeout=600)
    async with trioplay.open_runtime(
        store=MemoryStore(), tools=registry(slow=slow), limits=limits, on_event=told.append
    ) as rt:
        await rt.run(parent, None, run_id="p")
    child = child_id("p", "rows", "x", "stalled-child", "x")
    stalls = [e.data for e in told if e.type == "map.stall"]
    assert len(stalls) == 2  # at 50 s and 100 s
    for line in stalls:
        assert (line["oldest_phase"], line["oldest_tool"], line["oldest_provider"]) == (
            "child",
            child,
            "play",
        )
        assert line["oldest_row_key"] == "x"


async def test_the_trace_nests_a_child_under_its_caller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from trioplay._trace import ListSink, Recorder
    from trioplay._trace._spans import Span, Spans

    kept = ListSink()
    recorder = Recorder(kept)
    async with trioplay.open_runtime(
        store=MemoryStore(), tools=registry(finder=CountingTool()), recorder=recorder
    ) as rt:
        await rt.run(leads, {"accounts": 1}, run_id="r")
    recorder.close()
    spans: list[Span] = []
    reader = Spans(spans.append)
    for event in kept.events:
        reader.feed(event)
    child = child_id("r", "accounts", "a0", "score", {"account": "a0"})
    by_kind = {(span.kind, span.key): span for span in spans}
    caller, call, inner = (
        by_kind[("run", ("run", "r"))],
        by_kind[("child", ("child", child))],
        by_kind[("run", ("run", child))],
    )
    assert (call.group, call.args["depth"], call.args["row"]) == ("run", 1, "a0")
    assert caller.start <= call.start <= inner.start <= inner.end <= call.end <= caller.end
    phases = [s.name for s in spans if s.kind == "phase" and s.key == ("row", ("accounts", "a0"))]
    assert "child" in phases


async def test_rows_waiting_on_children_never_starve_them_of_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Three rows' estimated bytes fill the budget: the callers' rows hold them while
    # their children's rows need some too.
    @trioplay.play("kid")
    async def kid(ctx: trioplay.PlayContext, input: Any) -> Any:
        async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return row["k"]

        rows = [{"k": str(i)} for i in range(3)]
        return (await ctx.dataset("kid", rows).with_column("v", cell).run(key="k")).completed_count

    @trioplay.play("top")
    async def top(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def cell(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.play(kid, row["k"])

        rows = [{"k": str(i)} for i in range(10)]
        return (await ctx.dataset("top", rows).with_column("v", cell).run(key="k")).completed_count

    limits = trioplay.Limits(active_rows_budget_bytes=200 * 1024, max_concurrent_rows=4)
    with trio.fail_after(100):
        async with trioplay.open_runtime(store=MemoryStore(), limits=limits) as rt:
            assert await rt.run(top, None) == 10
