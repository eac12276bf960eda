"""What the tool adapters share: their registry entry, and native batches served in requests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

from trioplay import ToolSpec

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from trioplay import Rate, ToolCall

    Request = Callable[
        [Sequence[dict[str, Any]], Sequence[ToolCall], list[Any], int], Awaitable[None]
    ]


async def in_requests(
    inputs: list[dict[str, Any]], calls: list[ToolCall], size: int | None, request: Request
) -> list[Any]:
    """One result or exception per input, in order, from requests of at most ``size`` members.

    ``request(inputs, calls, results, offset)`` serves one slice and puts its
    members' outcomes in ``results`` from ``offset`` on, instead of raising
    for a provider failure. One request serves the whole batch when it fits
    (``size=None``: always); more run concurrently, so this nursery ends in
    an exception group only when it is cancelled (which Trio unwraps) or on
    a bug.
    """
    if len(inputs) != len(calls):
        raise ValueError(f"batch of {len(inputs)} inputs came with {len(calls)} calls")
    results: list[Any] = [None] * len(inputs)
    if not inputs:
        return results
    size = size or len(inputs)
    if len(inputs) <= size:
        await request(inputs, calls, results, 0)
        return results
    async with trio.open_nursery() as nursery:
        for start in range(0, len(inputs), size):
            end = start + size
            nursery.start_soon(request, inputs[start:end], calls[start:end], results, start)
    return results


class _Tool(Protocol):
    tool_id: str
    provider: str | None
    rate: Rate | None
    concurrency: int | None

    async def __call__(self, input: dict[str, Any], call: ToolCall) -> Any: ...

    async def batch(self, inputs: list[dict[str, Any]], calls: list[ToolCall]) -> list[Any]: ...


def registry_entry(tool: _Tool, *, batches: bool, batch_max: int | None) -> ToolSpec:
    """The :class:`~trioplay.ToolSpec` of an adapter that is its own tool function.

    Its provider is its tool id unless it names one; ``tool.batch`` is its
    native batch operation when it ``batches``.
    """
    return ToolSpec(
        tool_id=tool.tool_id,
        fn=tool,
        provider=tool.provider or tool.tool_id,
        rate=tool.rate,
        concurrency=tool.concurrency,
        batch=tool.batch if batches else None,
        batch_max=batch_max,
    )
