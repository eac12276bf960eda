"""Provider faults: a 429 storm with ``Retry-After`` around any tool.

Latency distributions, errors, single 429s and hangs are
:class:`~trioplay.adapters.SimulatedProvider`'s (seeded per call). What it
cannot do is a *storm*: a stretch of time in which the provider answers
every call with a rate-limit error, whatever the input, as real providers
do when a quota runs out. :class:`RateLimitStorm` wraps a tool for that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from trioplay import ProviderTransientError, ToolSpec

if TYPE_CHECKING:
    from trioplay import ToolCall


class HasToolSpec(Protocol):
    """A tool that carries its registration (``SimulatedProvider``, ``HttpTool``)."""

    def tool_spec(self) -> ToolSpec: ...


@attrs.define(kw_only=True, eq=False)
class RateLimitStorm:
    """``tool``, except that from ``start`` for ``duration`` seconds every call is a 429.

    Times are Trio seconds from the storm's first call. A call during the
    storm raises ``ProviderTransientError("rate_limit",
    retry_after=retry_after)``, which pauses the provider's gate in the
    governor for ``retry_after`` seconds; give the tool ``retries`` so that
    the calls try again after the pause rather than fail their rows.
    ``rejected`` counts the 429s answered. Native batches are not stormed
    (the wrapped tool's batch operation is dropped).
    """

    tool: HasToolSpec
    duration: float
    start: float = 0.0
    retry_after: float = 10.0
    retries: int | None = None
    rejected: int = attrs.field(init=False, default=0)
    _first_call: float | None = attrs.field(init=False, default=None)

    def tool_spec(self) -> ToolSpec:
        spec = self.tool.tool_spec()
        retries = spec.retries if self.retries is None else self.retries
        return attrs.evolve(spec, fn=self, batch=None, batch_max=None, retries=retries)

    def storming(self) -> bool:
        """Whether a call now falls in the storm (the first call starts its clock)."""
        now = trio.current_time()
        if self._first_call is None:
            self._first_call = now
        elapsed = now - self._first_call
        return self.start <= elapsed < self.start + self.duration

    async def __call__(self, input: dict[str, Any], call: ToolCall) -> Any:
        if self.storming():
            self.rejected += 1
            await trio.lowlevel.checkpoint()
            raise ProviderTransientError(
                "rate_limit",
                f"simulated 429 storm on {call.tool_id!r}",
                retry_after=self.retry_after,
                tool_id=call.tool_id,
            )
        return await self._inner(input, call)

    @property
    def _inner(self) -> Any:
        return self.tool.tool_spec().fn
