"""A native batch served as provider requests of a bounded size, side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from trioplay import ToolCall

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
