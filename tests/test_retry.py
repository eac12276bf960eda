"""A bug in tool code can be retried once fixed (issue 25, point 2): recorded failures
say whether they are probably bugs, ``retry_failures`` forgets the chosen ones, and
the next run calls exactly those again. The store operations it uses are checked
against every store that has them."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
import trio

import trioplay
from trioplay import Completion, Failure, Receipt, RecordedFailure, retry_failures
from trioplay._errors import ToolExecutionError, error_from_record, error_to_record
from trioplay._retry import PROVIDER_ERRORS, recorded_failures
from trioplay.stores.memory import MemoryStore

from .test_store_contract import STORE_FACTORIES, STORE_MARKS, claim_one, receipt

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from trioplay import FailureStore, Store


class Lookup:
    """A tool with a bug for n % 3 == 0 (until fixed) that refuses n == 4, counting calls."""

    def __init__(self) -> None:
        self.fixed = False
        self.calls: Counter[int] = Counter()

    async def __call__(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        n = input["n"]
        self.calls[n] += 1
        if n == 4:
            raise trioplay.ToolExecutionError("4: not found")
        if n == 7 and not self.fixed:
            return {1, 2}  # not JSON: a bug too
        if n % 3 == 0 and not self.fixed:
            return None + 1  # type: ignore[operator]
        return n * 2


async def looked(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return await rc.tool("lookup", {"n": row["n"]})


@trioplay.play("bugs")
async def bugs(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    first = [{"n": n} for n in range(8)]
    second = [{"n": n} for n in range(10, 13)]
    a = await ctx.dataset("a", first).with_column("v", looked).run(key="n")
    b = await ctx.dataset("b", second).with_column("v", looked).run(key="n")
    return [a.completed_count, a.failed_count, b.completed_count, b.failed_count]


async def run(store: Store, tool: Lookup) -> Any:
    tools = trioplay.ToolRegistry()
    tools.add("lookup", tool)
    async with trioplay.open_runtime(store=store, tools=tools) as rt:
        return await rt.run(bugs, {}, run_id="r")


async def test_a_fixed_bug_is_called_again_after_retry_and_nothing_else_is() -> None:
    store, tool = MemoryStore(), Lookup()
    with trio.fail_after(10):
        # a: 0, 3, 6 raise TypeError, 7 returns a set, 4 is refused; b: 12 raises.
        assert await run(store, tool) == [3, 5, 2, 1]
        # Replayed: nothing is called again (the counts are this attempt's rows).
        assert await run(store, tool) == [0, 5, 0, 1]
        assert sum(tool.calls.values()) == 11
        failures = {f.key: f for f in await recorded_failures(store, "r")}
        shown = sorted((f.tool, f.type, f.dataset, f.probably_a_bug) for f in failures.values())
        assert shown == [
            ("lookup", "ToolExecutionError", "a", False),
            ("lookup", "TypeError", "a", True),
            ("lookup", "TypeError", "a", True),
            ("lookup", "TypeError", "a", True),
            ("lookup", "TypeError", "a", True),  # the set: json.dumps raised TypeError
            ("lookup", "TypeError", "b", True),
        ]

        tool.fixed = True
        forgotten = await retry_failures(store, "r", dataset="a", error="TypeError")
        assert len(forgotten) == 4
        assert {f.dataset for f in forgotten} == {"a"}
        before = tool.calls.copy()
        assert await run(store, tool) == [4, 1, 0, 1]  # a's bugs complete; 4 and b's stay
        assert tool.calls - before == Counter({0: 1, 3: 1, 6: 1, 7: 1})

        # b's, then: one call more, for 12 only.
        [forgot] = await retry_failures(store, "r", tool="lookup", error="TypeError")
        assert forgot.dataset == "b"
        before = tool.calls.copy()
        assert await run(store, tool) == [0, 1, 1, 0]
        assert tool.calls - before == Counter({12: 1})
        # The provider's refusal stays recorded, never called again.
        assert await retry_failures(store, "r", error="TypeError") == []
        assert tool.calls[4] == 1


def test_provider_errors_and_their_kin_are_not_bugs() -> None:
    for name in ("ToolExecutionError", "ProviderTransientError", "ToolTimeout", "FetchError",
                 "FetchTimeout", "UnsafeOutboundUrl"):  # fmt: skip
        assert name in PROVIDER_ERRORS
    for name in ("TypeError", "KeyError", "PlayDefinitionError", "unknown"):
        assert name not in PROVIDER_ERRORS


def test_what_the_tool_raised_survives_the_receipt() -> None:
    error = ToolExecutionError("tool 'x' raised KeyError: 'a'", tool_id="x", raised="KeyError")
    record = json.loads(json.dumps(error_to_record(error)))
    assert record["raised"] == "KeyError"
    back = error_from_record(record)
    assert isinstance(back, ToolExecutionError)
    assert (back.raised, back.tool_id, str(back)) == ("KeyError", "x", str(error))
    assert error_to_record(ToolExecutionError("refused")).get("raised") is None


@pytest.mark.parametrize(
    ("error_json", "kind"),
    [
        ('{"type":"ToolExecutionError","message":"m","raised":"KeyError"}', "KeyError"),
        ('{"type":"ToolExecutionError","message":"m"}', "ToolExecutionError"),
        ("not json", "unknown"),
        ("[1]", "unknown"),
        (None, "unknown"),
    ],
)
def test_a_recorded_failure_reads_any_error_json(error_json: str | None, kind: str) -> None:
    stored = Receipt("k", "tool", "t", "failed", run_id="r", error_json=error_json)
    assert RecordedFailure.of(stored).type == kind


# -- the store operations, on every store that has them ------------------------

FAILURE_STORES = ["memory"]


@pytest.fixture(
    params=[pytest.param(name, marks=STORE_MARKS.get(name, [])) for name in FAILURE_STORES]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    opened = STORE_FACTORIES[request.param](tmp_path)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


async def fail(store: Store, key: str, run_id: str = "run-1") -> None:
    claimed = await claim_one(store, key, run_id=run_id)
    error = json.dumps({"type": "ToolExecutionError", "message": key})
    assert await store.fail_many([Failure(key, claimed.lease_id, error)], now=1_001.0) == [True]


@pytest.mark.deadline(10)
async def test_failed_receipts_are_listed_by_key_and_forgotten_back_to_pending(
    store: Store,
) -> None:
    failures: FailureStore = store  # type: ignore[assignment]
    assert isinstance(store, trioplay.FailureStore)
    for key in ("k3", "k1", "k2"):
        await fail(store, key)
    await fail(store, "other", run_id="run-2")
    done = await claim_one(store, "done")
    await store.complete_many([Completion("done", done.lease_id, "1")], now=1_001.0)

    listed = await failures.list_failed_receipts("run-1")
    assert [r.key for r in listed] == ["k1", "k2", "k3"]
    assert [
        r.key for r in await failures.list_failed_receipts("run-1", after_key="k1", limit=1)
    ] == ["k2"]
    # Only failed receipts of the run are forgotten; the rest are left as they are.
    keys = ["k1", "k3", "k3", "done", "other", "missing"]
    assert sorted(await failures.forget_failed_receipts("run-1", keys, now=1_002.0)) == ["k1", "k3"]
    forgotten = await receipt(store, "k1")
    assert (forgotten.status, forgotten.error_json, forgotten.lease_id) == ("pending", None, None)
    assert forgotten.attempts == 1
    assert (await receipt(store, "k2")).status == "failed"
    assert (await receipt(store, "done")).status == "completed"
    assert (await receipt(store, "other")).status == "failed"
    assert [r.key for r in await failures.list_failed_receipts("run-1")] == ["k2"]
    # The next claim runs it again.
    again = await claim_one(store, "k1")
    assert again.attempt == 2
