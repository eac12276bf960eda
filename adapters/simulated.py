"""A simulated enrichment provider for demos, scenarios and benchmarks.

Real providers are slow, flaky, rate limited and sometimes never answer. A
:class:`SimulatedProvider` is all of those on demand, reproducibly: what a call
does depends only on the seed, the tool id, the call's input and its attempt
number, never on when or in which order calls arrive. Two runs with the same
seed see the same failures on the same rows, however the scheduler interleaves
them, which is what makes a stall scenario or a benchmark repeatable.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from trioplay import ProviderTransientError, ToolExecutionError, ToolSpec, canonical_json

from ._common import in_requests, registry_entry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from trioplay import Rate, ToolCall

Outcome = Literal["ok", "error", "transient", "rate_limit", "hang"]

# z such that P(Z < z) = 0.99 for a standard normal Z.
_Z99 = 2.3263478740408408


def _non_negative(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be zero or positive, got {value!r}")


def _at_least_one(
    _instance: object, attribute: attrs.Attribute[int | None], value: int | None
) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


def _probability(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be between 0 and 1, got {value!r}")


@attrs.frozen
class Latency:
    """How long a simulated call takes: log-normal, given its median and 99th percentile.

    Service latencies are skewed: most calls are near the median and a few
    take many times longer. ``Latency(median=0.08, p99=0.6)`` (the default)
    means half the calls finish within 80 ms and one in a hundred takes more
    than 600 ms. ``Latency.fixed(s)`` always takes ``s`` seconds; with
    ``Latency.fixed(0)`` a call does not sleep (nor checkpoint) at all.
    """

    median: float = attrs.field(default=0.08, validator=_non_negative)
    p99: float = attrs.field(default=0.6, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.p99 < self.median:
            raise ValueError(f"Latency p99 ({self.p99}) is below its median ({self.median})")
        if self.median == 0 and self.p99 != 0:
            raise ValueError("a log-normal Latency needs a positive median; use Latency.fixed(0)")

    @classmethod
    def fixed(cls, seconds: float) -> Latency:
        """Every call takes exactly ``seconds``."""
        return cls(median=seconds, p99=seconds)

    def sample(self, rng: random.Random) -> float:
        """One latency in seconds, drawn from ``rng`` (not drawn at all when fixed)."""
        if self.p99 == self.median:
            return self.median
        sigma = math.log(self.p99 / self.median) / _Z99
        return rng.lognormvariate(math.log(self.median), sigma)


def _to_latency(value: Latency | float) -> Latency:
    return value if isinstance(value, Latency) else Latency.fixed(value)


def _to_keys(keys: Iterable[str]) -> frozenset[str]:
    # A bare string would otherwise become a set of its characters.
    return frozenset((keys,) if isinstance(keys, str) else keys)


@attrs.frozen
class _Plan:
    outcome: Outcome
    latency: float
    canonical: str


@attrs.define(kw_only=True, eq=False)
class SimulatedProvider:
    """A seeded stand-in for an enrichment provider; register it with ``add_tool``.

    ::

        finder = SimulatedProvider(tool_id="finder_a", seed=7, transient_rate=0.05,
                                   rate_limit_rate=0.01, latency=Latency(0.08, 0.6))
        registry.add_tool(finder)

    Each call draws its fate from a random generator seeded with a SHA-256 of
    ``(seed, tool_id, canonical JSON of the input, attempt)``: a permanent
    failure (``error_rate``, :class:`trioplay.ToolExecutionError`), a
    transient one (``transient_rate``, ``ProviderTransientError("upstream")``),
    a rate-limit response (``rate_limit_rate``, ``ProviderTransientError(
    "rate_limit", retry_after=...)``), a hang that never returns
    (``hang_rate``), or success. The tool id is part of the seed so that two
    providers sharing a seed in a waterfall do not fail on the same rows; the
    attempt is part of it so that a retry can succeed where the first try
    failed. Inputs with a top-level string value in ``hang_keys`` always hang.
    Failures take their latency like successes do; a hang logs at once.

    A successful call returns ``result(input)`` or, by default, a plausible
    payload ``{"email": "info@<domain>", "confidence": ..., "source": tool_id}``
    that depends on the input only, so every attempt agrees.

    With ``batch_size`` set the tool declares a native batch operation: one
    simulated request serves up to ``batch_size`` inputs (longer lists are
    split into concurrent requests). Each member fares exactly as it would
    alone; the request takes as long as its slowest member and hangs if any
    member hangs.

    Every answered call is recorded in ``calls`` as ``(idempotency_key,
    outcome)`` and, when ``log_path`` is set, appended to that file as one JSON
    line, written with a single ``write`` on an append-only descriptor so that
    several processes can share the file and a SIGKILL loses nothing already
    answered. ``call_count`` counts calls (batch members included),
    ``request_count`` provider requests (one per batch).
    """

    tool_id: str
    provider: str | None = None
    seed: int = 0
    latency: Latency = attrs.field(factory=Latency, converter=_to_latency)
    error_rate: float = attrs.field(default=0.0, validator=_probability)
    transient_rate: float = attrs.field(default=0.0, validator=_probability)
    rate_limit_rate: float = attrs.field(default=0.0, validator=_probability)
    hang_rate: float = attrs.field(default=0.0, validator=_probability)
    hang_keys: frozenset[str] = attrs.field(default=(), converter=_to_keys)
    retry_after: float = attrs.field(default=1.0, validator=_non_negative)
    result: Callable[[dict[str, Any]], Any] | None = None
    rate: Rate | None = None
    concurrency: int | None = None
    batch_size: int | None = attrs.field(default=None, validator=_at_least_one)
    log_path: str | os.PathLike[str] | None = None

    calls: list[tuple[str, Outcome]] = attrs.field(init=False, factory=list)
    call_count: int = attrs.field(init=False, default=0)
    request_count: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        total = self.error_rate + self.transient_rate + self.rate_limit_rate + self.hang_rate
        if total > 1.0:
            raise ValueError(f"the failure rates of {self.tool_id!r} add up to {total:g}, above 1")

    def tool_spec(self) -> ToolSpec:
        """The registry entry: this object as the tool, :meth:`batch` with ``batch_size``."""
        return registry_entry(self, batches=self.batch_size is not None, batch_max=self.batch_size)

    async def __call__(self, input: dict[str, Any], call: ToolCall) -> Any:
        plan = self._plan(input, call.attempt)
        self.request_count += 1
        if plan.outcome == "hang":
            self._record([(call.idempotency_key, "hang")])
            await trio.sleep_forever()
        if plan.latency > 0:
            await trio.sleep(plan.latency)
        self._record([(call.idempotency_key, plan.outcome)])
        answer = self._answer(input, plan)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def batch(self, inputs: list[dict[str, Any]], calls: list[ToolCall]) -> list[Any]:
        """The native batch operation: one result or exception per input, in order."""
        return await in_requests(inputs, calls, self.batch_size, self._request)

    async def _request(
        self,
        inputs: Sequence[dict[str, Any]],
        calls: Sequence[ToolCall],
        results: list[Any],
        offset: int,
    ) -> None:
        plans = [self._plan(input, call.attempt) for input, call in zip(inputs, calls, strict=True)]
        self.request_count += 1
        if any(plan.outcome == "hang" for plan in plans):
            self._record([(call.idempotency_key, "hang") for call in calls])
            await trio.sleep_forever()
        latency = max((plan.latency for plan in plans), default=0.0)
        if latency > 0:
            await trio.sleep(latency)
        self._record(
            [(call.idempotency_key, plan.outcome) for call, plan in zip(calls, plans, strict=True)]
        )
        for index, (input, plan) in enumerate(zip(inputs, plans, strict=True)):
            results[offset + index] = self._answer(input, plan)

    def _plan(self, input: dict[str, Any], attempt: int) -> _Plan:
        canonical = canonical_json(input)
        if self.hang_keys and any(
            isinstance(value, str) and value in self.hang_keys for value in input.values()
        ):
            return _Plan("hang", 0.0, canonical)
        rng = random.Random(_digest(self.seed, self.tool_id, canonical, attempt))
        draw = rng.random()
        outcome: Outcome = "ok"
        failures: tuple[tuple[Outcome, float], ...] = (
            ("error", self.error_rate),
            ("transient", self.transient_rate),
            ("rate_limit", self.rate_limit_rate),
            ("hang", self.hang_rate),
        )
        for candidate, rate in failures:
            if draw < rate:
                outcome = candidate
                break
            draw -= rate
        return _Plan(outcome, self.latency.sample(rng), canonical)

    def _answer(self, input: dict[str, Any], plan: _Plan) -> Any:
        """The payload of a successful call, or the exception a failed one raises."""
        if plan.outcome == "error":
            return ToolExecutionError(
                f"simulated provider {self.tool_id!r} rejected the input", tool_id=self.tool_id
            )
        if plan.outcome == "transient":
            return ProviderTransientError(
                "upstream", f"simulated {self.tool_id!r} upstream failure", tool_id=self.tool_id
            )
        if plan.outcome == "rate_limit":
            return ProviderTransientError(
                "rate_limit",
                f"simulated {self.tool_id!r} rate limit (429)",
                retry_after=self.retry_after,
                tool_id=self.tool_id,
            )
        if self.result is not None:
            return self.result(input)
        return self._default_payload(input, plan.canonical)

    def _default_payload(self, input: dict[str, Any], canonical: str) -> dict[str, Any]:
        fingerprint = _digest(self.seed, self.tool_id, canonical)
        domain = input.get("domain")
        if not isinstance(domain, str) or not domain:
            domain = f"example-{fingerprint % 10**8:08d}.com"
        confidence = 0.5 + (fingerprint % 10_000) / 20_000
        return {
            "email": f"info@{domain}",
            "confidence": round(confidence, 3),
            "source": self.tool_id,
        }

    def _record(self, entries: list[tuple[str, Outcome]]) -> None:
        self.calls.extend(entries)
        self.call_count += len(entries)
        if self.log_path is None:
            return
        lines = [
            {"idempotency_key": key, "tool_id": self.tool_id, "outcome": outcome}
            for key, outcome in entries
        ]
        text = "".join(
            json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n" for line in lines
        )
        # Blocking, but a single small append to the page cache; one write()
        # per request keeps lines from several processes whole.
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)


def _digest(*parts: object) -> int:
    text = "\x1f".join(str(part) for part in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "big")
