"""Provider faults: a 429 storm with ``Retry-After`` around any tool.

Latency distributions, errors, single 429s and hangs are
:class:`~trioplay.adapters.SimulatedProvider`'s (seeded per call). What it
cannot do is a *storm*: a stretch of time in which the provider answers
every call with a rate-limit error, whatever the input, as real providers
do when a quota runs out. :class:`RateLimitStorm` wraps a tool for that;
:class:`Scheduled` wraps one to change its latency and failure rate over
time (a provider that creeps, then fails).
"""

from __future__ import annotations

import bisect
import random
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


@attrs.define(kw_only=True, eq=False)
class Scheduled:
    """``tool``, slowed and failing on a schedule of Trio seconds from its first call.

    ``latency`` is ``((at, extra), ...)``: from ``at`` on, each call first
    waits ``extra`` seconds more; ``failure_rate`` is ``((at, rate), ...)``:
    from ``at`` on, that share of calls (drawn from ``seed``) raise
    ``ProviderTransientError("upstream")`` after their wait. Both start
    at 0 (no extra, no failure) before their first step. ``((0, 0.1),
    (300, 2.0))``: calls slow down by 2 s five minutes in. Native batches
    are dropped, as :class:`RateLimitStorm` does.
    """

    tool: HasToolSpec
    latency: tuple[tuple[float, float], ...] = ()
    failure_rate: tuple[tuple[float, float], ...] = ()
    seed: int = 0
    failed: int = attrs.field(init=False, default=0)
    _first_call: float | None = attrs.field(init=False, default=None)
    _random: random.Random = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def tool_spec(self) -> ToolSpec:
        return attrs.evolve(self.tool.tool_spec(), fn=self, batch=None, batch_max=None)

    def now(self) -> float:
        """Trio seconds since the first call (the first call starts the schedule)."""
        now = trio.current_time()
        if self._first_call is None:
            self._first_call = now
        return now - self._first_call

    async def __call__(self, input: dict[str, Any], call: ToolCall) -> Any:
        elapsed = self.now()
        extra = _step(self.latency, elapsed)
        if extra > 0:
            await trio.sleep(extra)
        rate = _step(self.failure_rate, elapsed)
        if rate > 0 and self._random.random() < rate:
            self.failed += 1
            raise ProviderTransientError(
                "upstream", f"scheduled failure of {call.tool_id!r}", tool_id=call.tool_id
            )
        return await self.tool.tool_spec().fn(input, call)


def _step(schedule: tuple[tuple[float, float], ...], elapsed: float) -> float:
    """The value of the last step of ``schedule`` at or before ``elapsed`` (0 before the first)."""
    index = bisect.bisect_right([at for at, _ in schedule], elapsed)
    return schedule[index - 1][1] if index else 0.0
