"""Small doubles shared by the engine tests."""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio
import trioplay


class CountingTool:
    """An async tool that records every execution and answers from its input."""

    def __init__(self, *, delay: float = 0.0, fail_on: set[str] | None = None) -> None:
        self.executions: Counter[str] = Counter()
        self.idempotency_keys: list[str] = []
        self.delay = delay
        self.fail_on = fail_on or set()

    async def __call__(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        self.executions[str(input.get("domain"))] += 1
        self.idempotency_keys.append(call.idempotency_key)
        if self.delay:
            await trio.sleep(self.delay)
        if input.get("domain") in self.fail_on:
            raise trioplay.ToolExecutionError("no such domain", tool_id=call.tool_id)
        return {"email": f"info@{input['domain']}"}

    @property
    def calls(self) -> int:
        return sum(self.executions.values())


def registry(**tools: Any) -> trioplay.ToolRegistry:
    reg = trioplay.ToolRegistry()
    for name, fn in tools.items():
        reg.add(name, fn)
    return reg


def leads(n: int) -> list[dict[str, str]]:
    return [{"domain": f"d{i}.example"} for i in range(n)]


async def find_email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("finder", {"domain": row["domain"]}))["email"]
