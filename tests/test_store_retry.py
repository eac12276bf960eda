"""Issue 24, point 2: a store that goes away for a moment is ridden out (``Limits.store_retry``).

In virtual time, over the memory store: an outage that refuses calls the way
a restarting PostgreSQL server does (``StoreOutage(hang=False,
retryable=True)``). Within the budget the run completes, every row once and
every provider call once; past it the run fails saying how long it tried;
a failure the store does not mark retryable fails at once, as before.
``tests/test_postgres_faults.py`` does the same against a real server.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trioplay
from trioplay._store_retry import retrying
from trioplay.adapters.faults import StoreOutage
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, registry

ROWS = 60


async def _resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    await trio.sleep(row["i"] * 0.25)  # calls spread over 15 s
    return (await rc.tool("finder", {"domain": row["domain"]}))["email"]


@trioplay.play("blip")
async def _play(ctx: trioplay.PlayContext, _input: Any) -> Any:
    rows = [{"i": i, "domain": f"d{i}.example"} for i in range(ROWS)]
    result = await ctx.dataset("s", rows).with_column("email", _resolver).run(key="domain")
    return result.completed_count


async def _run(outage: float, budget: float) -> tuple[Any, CountingTool, MemoryStore, int]:
    inner = MemoryStore()
    store = StoreOutage(inner, start=3.0, duration=outage, hang=False, retryable=True)
    tool = CountingTool()
    limits = trioplay.Limits(store_retry=budget, writer_max_flush=0.05)
    async with trioplay.open_runtime(store=store, tools=registry(finder=tool), limits=limits) as rt:
        try:
            outcome: Any = await rt.run(_play, {}, run_id="r")
        except trioplay.StoreError as exc:
            outcome = exc
    return outcome, tool, inner, store.refused


@pytest.mark.deadline(600)
async def test_an_outage_within_the_budget_is_ridden_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    completed, tool, inner, refused = await _run(outage=8.0, budget=30.0)
    assert refused >= 5  # calls were refused during the 8 s, and made again
    assert completed == ROWS
    assert tool.calls == ROWS  # nobody paid twice
    assert await inner.count_rows("r", "s") == {"completed": ROWS}
    record = await inner.get_run("r")
    assert record is not None
    assert record.status == "completed"


@pytest.mark.deadline(600)
async def test_past_the_budget_the_run_fails_saying_how_long_it_tried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error, _, _, _ = await _run(outage=100.0, budget=10.0)
    assert isinstance(error, trioplay.StoreError)
    message = str(error)
    assert message.startswith("simulated store outage: ")
    assert " refused; tried " in message
    assert message.endswith("(store_retry=10s) and the store did not come back")
    spent = float(message.split(" times for ")[1].split("s ")[0])
    assert 10.0 <= spent <= 10.5
    assert not error.retryable  # given up: not to be retried further up


@pytest.mark.deadline(600)
async def test_a_failure_not_marked_retryable_fails_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = StoreOutage(MemoryStore(), start=3.0, duration=8.0, hang=False)
    async with trioplay.open_runtime(store=store, tools=registry(finder=CountingTool())) as rt:
        started = trio.current_time()
        with pytest.raises(trioplay.StoreError, match="refused") as caught:
            await rt.run(_play, {}, run_id="r")
    assert "tried" not in str(caught.value)
    assert trio.current_time() - started < 4.0


@pytest.mark.deadline(600)
async def test_no_budget_no_retry(autojump_clock: trio.testing.MockClock) -> None:
    error, _, _, refused = await _run(outage=8.0, budget=0.0)
    assert isinstance(error, trioplay.StoreError)
    assert str(error).startswith("simulated store outage: ")
    assert "tried" not in str(error)
    assert refused >= 1


class _Confirmable:
    """A store whose one write loses its connection mid-commit, then twice more."""

    url = "test://"

    def __init__(self) -> None:
        self.writes = 0
        self.reads = 0

    async def complete_many(self) -> list[bool]:
        self.writes += 1

        async def confirm() -> list[bool]:
            self.reads += 1
            if self.reads < 3:  # still down: a read that did nothing, to be made again
                raise trioplay.StoreError("connection lost", retryable=True)
            return [True]  # the read shows the write took effect

        raise trioplay.StoreError(
            "connection lost; the COMMIT was sent but never confirmed",
            outcome_unknown=True,
            retryable=True,
            retry_with=confirm,
        )


async def test_a_write_of_unknown_outcome_is_confirmed_by_reading_back_not_repeated(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = _Confirmable()
    store: Any = retrying(inner, 10.0)  # type: ignore[arg-type]
    assert await store.complete_many() == [True]
    assert (inner.writes, inner.reads) == (1, 3)
