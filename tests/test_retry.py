"""A bug in tool code can be retried once fixed (issue 25, point 2): recorded failures
say whether they are probably bugs, ``retry_failures`` forgets the chosen ones, and
the next run calls exactly those again. The store operations it uses are in the
contract suite (``tests/test_store_contract.py``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
import trio

import trioplay
from trioplay import Receipt, RecordedFailure, retry_failures
from trioplay._errors import ToolExecutionError, error_from_record, error_to_record
from trioplay._retry import PROVIDER_ERRORS, recorded_failures
from trioplay.stores.memory import MemoryStore

if TYPE_CHECKING:
    from trioplay import Store


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
