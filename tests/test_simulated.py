"""SimulatedProvider: seeded, order-independent, and faithful to its rates."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from trioplay import (
    ProviderTransientError,
    Rate,
    ToolCall,
    ToolExecutionError,
    ToolRegistry,
)
from trioplay.adapters import Latency, SimulatedProvider

if TYPE_CHECKING:
    from pathlib import Path


def call_for(input: dict[str, Any], attempt: int = 1, tool_id: str = "finder") -> ToolCall:
    key = f"{tool_id}:{json.dumps(input, sort_keys=True)}:{attempt}"
    return ToolCall(tool_id=tool_id, idempotency_key=key, attempt=attempt, deadline=math.inf)


def domains(n: int) -> list[dict[str, Any]]:
    return [{"domain": f"company{i}.com"} for i in range(n)]


async def outcome_of(sim: SimulatedProvider, input: dict[str, Any], attempt: int = 1) -> Any:
    """The result, or the exception, of one call (never raises)."""
    try:
        return await sim(input, call_for(input, attempt, sim.tool_id))
    except (ToolExecutionError, ProviderTransientError) as exc:
        return exc


def kind(value: Any) -> str:
    if isinstance(value, ProviderTransientError):
        return value.category
    return type(value).__name__


# --- registration -----------------------------------------------------------


def test_tool_spec_registers_with_the_registry() -> None:
    sim = SimulatedProvider(
        tool_id="finder_a", provider="acme", rate=Rate(10), concurrency=4, latency=0
    )
    registry = ToolRegistry()
    spec = registry.add_tool(sim)
    assert registry.get("finder_a") is spec
    assert (spec.tool_id, spec.provider, spec.rate, spec.concurrency) == (
        "finder_a",
        "acme",
        Rate(10),
        4,
    )
    assert spec.fn is sim
    assert spec.batch is None
    assert spec.batch_max is None
    assert SimulatedProvider(tool_id="b").tool_spec().provider == "b"

    batching = SimulatedProvider(tool_id="c", batch_size=25).tool_spec()
    assert batching.batch is not None
    assert batching.batch_max == 25


@pytest.mark.parametrize(
    "kwargs",
    [
        {"error_rate": 1.5},
        {"transient_rate": -0.1},
        {"error_rate": 0.6, "rate_limit_rate": 0.6},
        {"batch_size": 0},
        {"retry_after": -1.0},
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        SimulatedProvider(tool_id="x", **kwargs)


@pytest.mark.parametrize(
    ("median", "p99"),
    [(-1.0, 1.0), (0.5, 0.1), (0.0, 0.1)],
)
def test_invalid_latency_is_refused(median: float, p99: float) -> None:
    with pytest.raises(ValueError, match=r"Latency|median"):
        Latency(median=median, p99=p99)


# --- payloads and determinism -----------------------------------------------


async def test_default_payload_is_plausible_and_stable() -> None:
    with trio.fail_after(5):
        sim = SimulatedProvider(tool_id="finder", seed=3, latency=0)
        first = await sim({"domain": "acme.com"}, call_for({"domain": "acme.com"}))
        again = await sim({"domain": "acme.com"}, call_for({"domain": "acme.com"}, attempt=2))
        other = await sim({"name": "Acme"}, call_for({"name": "Acme"}))
    assert first["email"] == "info@acme.com"
    assert first["source"] == "finder"
    assert 0.5 <= first["confidence"] < 1.0
    assert again == first
    assert other["email"].startswith("info@example-")
    assert sim.call_count == 3
    assert sim.calls == [
        (call_for({"domain": "acme.com"}).idempotency_key, "ok"),
        (call_for({"domain": "acme.com"}, attempt=2).idempotency_key, "ok"),
        (call_for({"name": "Acme"}).idempotency_key, "ok"),
    ]


async def test_custom_result() -> None:
    with trio.fail_after(5):
        sim = SimulatedProvider(tool_id="t", latency=0, result=lambda i: {"echo": i["q"]})
        assert await sim({"q": 1}, call_for({"q": 1})) == {"echo": 1}


async def test_outcomes_ignore_call_order_and_schedule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inputs = domains(300)
    settings: dict[str, Any] = {
        "tool_id": "finder",
        "seed": 11,
        "latency": Latency(median=0.05, p99=0.5),
        "error_rate": 0.1,
        "transient_rate": 0.1,
        "rate_limit_rate": 0.1,
    }

    async def run(order: list[dict[str, Any]]) -> dict[str, tuple[str, Any]]:
        sim = SimulatedProvider(**settings)
        seen: dict[str, tuple[str, Any]] = {}

        async def one(input: dict[str, Any]) -> None:
            value = await outcome_of(sim, input)
            seen[input["domain"]] = (kind(value), value if isinstance(value, dict) else None)

        async with trio.open_nursery() as nursery:
            for input in order:
                nursery.start_soon(one, input)
        return seen

    with trio.fail_after(30):
        forward = await run(inputs)
        shuffled = inputs[:]
        random.Random(5).shuffle(shuffled)
        backward = await run(shuffled)
    assert forward == backward
    assert len({kind for kind, _ in forward.values()}) == 4

    with trio.fail_after(30):
        settings["seed"] = 12
        reseeded = await run(inputs)
    assert reseeded != forward


async def test_key_order_does_not_matter_but_tool_id_and_attempt_do() -> None:
    with trio.fail_after(5):
        a = SimulatedProvider(tool_id="a", seed=1, latency=0, transient_rate=0.5)
        b = SimulatedProvider(tool_id="b", seed=1, latency=0, transient_rate=0.5)
        inputs = [{"domain": f"d{i}.com", "n": i} for i in range(200)]
        fates_a = [kind(await outcome_of(a, i)) for i in inputs]
        reordered = [kind(await outcome_of(a, dict(reversed(i.items())))) for i in inputs]
        fates_b = [kind(await outcome_of(b, i)) for i in inputs]
        retried = [kind(await outcome_of(a, i, attempt=2)) for i in inputs]
    assert reordered == fates_a
    assert fates_b != fates_a
    assert retried != fates_a


# --- rates ------------------------------------------------------------------


async def test_rates_are_honoured_over_2000_calls() -> None:
    with trio.fail_after(10):
        sim = SimulatedProvider(
            tool_id="finder",
            seed=42,
            latency=0,
            error_rate=0.10,
            transient_rate=0.05,
            rate_limit_rate=0.03,
            retry_after=2.5,
        )
        values = [await outcome_of(sim, input) for input in domains(2000)]
    counts = Counter(kind(value) for value in values)
    # Binomial(2000, p) has a standard deviation under 14 calls here; allow ~4.
    assert abs(counts["ToolExecutionError"] - 200) < 55
    assert abs(counts["upstream"] - 100) < 40
    assert abs(counts["rate_limit"] - 60) < 32
    assert counts["dict"] == 2000 - sum(counts[k] for k in counts if k != "dict")
    assert Counter(outcome for _, outcome in sim.calls) == {
        "ok": counts["dict"],
        "error": counts["ToolExecutionError"],
        "transient": counts["upstream"],
        "rate_limit": counts["rate_limit"],
    }

    limited = next(v for v in values if kind(v) == "rate_limit")
    assert limited.retry_after == 2.5
    assert limited.tool_id == "finder"
    failed = next(v for v in values if isinstance(v, ToolExecutionError))
    assert failed.tool_id == "finder"


def test_latency_distribution_matches_median_and_p99() -> None:
    latency = Latency(median=0.08, p99=0.6)
    rng = random.Random(1)
    samples = sorted(latency.sample(rng) for _ in range(20_000))
    assert statistics.median(samples) == pytest.approx(0.08, rel=0.05)
    assert samples[int(0.99 * len(samples))] == pytest.approx(0.6, rel=0.15)
    assert Latency.fixed(0.25).sample(rng) == 0.25


# --- time -------------------------------------------------------------------


async def test_fixed_latency_takes_exactly_that_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(5):
        sim = SimulatedProvider(tool_id="t", latency=Latency.fixed(0.25), error_rate=1.0)
        start = trio.current_time()
        with pytest.raises(ToolExecutionError):
            await sim({"domain": "a.com"}, call_for({"domain": "a.com"}))
        assert trio.current_time() - start == 0.25


async def test_zero_latency_does_not_even_checkpoint() -> None:
    with trio.fail_after(5):
        sim = SimulatedProvider(tool_id="t", latency=0, transient_rate=0.5)
        with trio.testing.assert_no_checkpoints():
            for input in domains(50):
                await outcome_of(sim, input)


async def test_hang_rate_hangs_until_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(50):
        sim = SimulatedProvider(tool_id="t", latency=0, hang_rate=1.0)
        with trio.move_on_after(45) as scope:
            await sim({"domain": "a.com"}, call_for({"domain": "a.com"}))
        assert scope.cancelled_caught
        assert trio.current_time() == 45
        assert sim.calls == [(call_for({"domain": "a.com"}).idempotency_key, "hang")]


async def test_hang_keys_pick_the_inputs_that_hang(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(50):
        sim = SimulatedProvider(tool_id="t", latency=0.1, hang_keys={"stuck.com"})
        assert (await sim({"domain": "ok.com"}, call_for({"domain": "ok.com"})))["email"]
        with trio.move_on_after(45) as scope:
            await sim({"domain": "stuck.com"}, call_for({"domain": "stuck.com"}, attempt=3))
        assert scope.cancelled_caught
        assert [outcome for _, outcome in sim.calls] == ["ok", "hang"]


# --- batches ----------------------------------------------------------------


async def test_batch_members_fare_as_they_would_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    settings: dict[str, Any] = {
        "tool_id": "finder",
        "seed": 9,
        "latency": Latency(median=0.1, p99=1.0),
        "error_rate": 0.2,
        "rate_limit_rate": 0.2,
    }
    inputs = domains(7)
    calls = [call_for(i) for i in inputs]
    with trio.fail_after(30):
        alone = SimulatedProvider(**settings)
        expected, durations = [], []
        for input in inputs:
            start = trio.current_time()
            expected.append(await outcome_of(alone, input))
            durations.append(trio.current_time() - start)
        batched = SimulatedProvider(**settings, batch_size=3)
        spec = batched.tool_spec()
        assert spec.batch is not None
        start = trio.current_time()
        results = await spec.batch(inputs, calls)
    # 7 inputs make three concurrent requests (3 + 3 + 1) of one member list each.
    assert batched.request_count == 3
    assert batched.call_count == 7
    assert [kind(r) for r in results] == [kind(e) for e in expected]
    assert [r for r in results if isinstance(r, dict)] == [
        e for e in expected if isinstance(e, dict)
    ]
    assert sorted(batched.calls) == sorted(alone.calls)
    # The requests run concurrently, each as long as its slowest member.
    assert trio.current_time() - start == pytest.approx(max(durations))


async def test_one_hanging_member_hangs_its_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sim = SimulatedProvider(tool_id="t", latency=0, hang_keys={"stuck.com"}, batch_size=10)
    inputs = [{"domain": "ok.com"}, {"domain": "stuck.com"}]
    with trio.fail_after(50):
        with trio.move_on_after(45) as scope:
            await sim.batch(inputs, [call_for(i) for i in inputs])
        assert scope.cancelled_caught
    assert [outcome for _, outcome in sim.calls] == ["hang", "hang"]


async def test_empty_batch() -> None:
    with trio.fail_after(5):
        assert await SimulatedProvider(tool_id="t", batch_size=3).batch([], []) == []


# --- log file ---------------------------------------------------------------


async def test_log_file_gets_one_json_line_per_call(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    with trio.fail_after(5):
        a = SimulatedProvider(tool_id="a", latency=0, error_rate=0.3, log_path=log)
        b = SimulatedProvider(tool_id="b", latency=0, batch_size=5, log_path=str(log))
        for input in domains(20):
            await outcome_of(a, input)
        batch_inputs = domains(6)
        await b.batch(batch_inputs, [call_for(i, tool_id="b") for i in batch_inputs])
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 26
    assert all(list(line) == ["idempotency_key", "tool_id", "outcome"] for line in lines)
    assert [(line["idempotency_key"], line["outcome"]) for line in lines[:20]] == a.calls
    assert {line["tool_id"] for line in lines[20:]} == {"b"}
    assert Counter(line["idempotency_key"] for line in lines).most_common(1)[0][1] == 1
