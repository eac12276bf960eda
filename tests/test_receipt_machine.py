"""State machines over the receipts protocol.

Issue 4: a state machine drives claims, heartbeats, completions, failures,
releases and lease expiries from several owners, with a controlled clock,
against every store, and checks each answer against a model of the protocol.
Properties: at most one live owner per key (a claim never succeeds over a
live lease); a fenced write by anyone but the current lease holder never
succeeds; a completed receipt never changes unless forced.

Issue 11: a second machine runs a play (a map whose rows call a tool, some
rows sharing a call) again and again against one store, in virtual time,
while store faults come and go: completion writes that fail, heartbeats that
fail, a second owner taking a key over while our provider works, payloads
that do not parse. Properties: every caller resolves (the run ends, every
resolver returns or raises); no caller receives a value its receipt does not
hold (the value of another owner, or one never recorded); no row is
committed as completed unless the receipt of its call is completed and holds
the row's value.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import trioplay
from trioplay import (
    Claimed,
    ClaimOutcome,
    ClaimRequest,
    Completion,
    Failure,
    Held,
    Lease,
    Settled,
    Store,
    StoreError,
)
from trioplay.stores.memory import MemoryStore
from trioplay.stores.sqlite import SqliteStore

from .test_postgres import scratch_store

TTL = 10.0
KEYS = ("k1", "k2")
OWNERS = ("a", "b", "c")


class Portal:
    """A Trio loop in a thread, so a synchronous state machine can await stores."""

    def __init__(self) -> None:
        ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            ready.set()
            await self._stop.wait()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async def bounded() -> Any:
            with trio.fail_after(10):
                return await fn(*args, **kwargs)

        return trio.from_thread.run(bounded, trio_token=self._token)

    def close(self) -> None:
        assert self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(10)


@attrs.define
class Model:
    """What a store must hold for one key."""

    status: str | None = None
    lease_id: str | None = None
    expires_at: float | None = None
    result: str | None = None


def machine_for(make_store: Callable[[], Store]) -> type[RuleBasedStateMachine]:
    class ReceiptMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.portal = Portal()
            self.store = make_store()
            self.portal.call(self.store.open)
            self.now = 1_000.0
            self.model = {key: Model() for key in KEYS}
            self.leases: dict[tuple[str, str], str] = {}  # (owner, key) -> last lease won

        def teardown(self) -> None:
            self.portal.call(self.store.aclose)
            self.portal.close()

        @rule(seconds=st.sampled_from([0.5, 3.0, TTL / 2, TTL, 2 * TTL]))
        def advance(self, seconds: float) -> None:
            self.now += seconds

        @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS), force=st.booleans())
        def claim(self, owner: str, key: str, force: bool) -> None:
            request = ClaimRequest(key=key, operation="tool", name="t", run_id="r", force=force)
            (outcome,) = self.portal.call(
                self.store.claim_many, [request], owner=owner, lease_ttl=TTL, now=self.now
            )
            model = self.model[key]
            live = model.status == "running" and (model.expires_at or 0) > self.now
            if model.status in ("completed", "failed") and not force:
                assert isinstance(outcome, Settled), outcome
                assert outcome.receipt.status == model.status
                assert outcome.receipt.result_json == model.result
            elif live:
                # A live lease is never duplicated, forced or not.
                assert isinstance(outcome, Held), outcome
                assert outcome.receipt.lease_id == model.lease_id
            else:
                assert isinstance(outcome, Claimed), outcome
                assert outcome.lease_id != model.lease_id
                assert outcome.lease_expires_at == self.now + TTL
                self.model[key] = Model("running", outcome.lease_id, self.now + TTL, None)
                self.leases[owner, key] = outcome.lease_id

        def _lease(self, owner: str, key: str) -> Lease | None:
            lease_id = self.leases.get((owner, key))
            return Lease(key, lease_id) if lease_id else None

        def _holds(self, lease: Lease) -> bool:
            model = self.model[lease.key]
            return model.status == "running" and model.lease_id == lease.lease_id

        @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS))
        def heartbeat(self, owner: str, key: str) -> None:
            lease = self._lease(owner, key)
            if lease is None:
                return
            (expiry,) = self.portal.call(
                self.store.heartbeat_many, [lease], lease_ttl=TTL, now=self.now
            )
            if self._holds(lease):
                assert expiry == self.now + TTL
                self.model[key].expires_at = expiry
            else:
                assert expiry is None

        @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS))
        def complete(self, owner: str, key: str) -> None:
            lease = self._lease(owner, key)
            if lease is None:
                return
            value = f'{{"by":"{owner}","at":{self.now}}}'
            (ok,) = self.portal.call(
                self.store.complete_many, [Completion(key, lease.lease_id, value)], now=self.now
            )
            assert ok == self._holds(lease)  # fenced: only the current holder writes
            if ok:
                self.model[key].status = "completed"
                self.model[key].result = value

        @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS))
        def fail(self, owner: str, key: str) -> None:
            lease = self._lease(owner, key)
            if lease is None:
                return
            (ok,) = self.portal.call(
                self.store.fail_many, [Failure(key, lease.lease_id, '{"m":1}')], now=self.now
            )
            assert ok == self._holds(lease)
            if ok:
                self.model[key].status = "failed"

        @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS))
        def release(self, owner: str, key: str) -> None:
            lease = self._lease(owner, key)
            if lease is None:
                return
            (ok,) = self.portal.call(self.store.release_many, [lease], now=self.now)
            assert ok == self._holds(lease)
            if ok:
                self.model[key] = Model("pending")

        @invariant()
        def store_matches_the_model(self) -> None:
            receipts = self.portal.call(self.store.get_many, list(KEYS))
            for key, receipt in zip(KEYS, receipts, strict=True):
                model = self.model[key]
                if model.status is None:
                    assert receipt is None
                    continue
                assert receipt is not None
                assert receipt.status == model.status
                if model.status == "running":
                    assert receipt.lease_id == model.lease_id
                if model.status == "completed":
                    assert receipt.result_json == model.result

    return ReceiptMachine


def sqlite_store(tmp_path: Path) -> Callable[[], Store]:
    counter = iter(range(10**9))
    return lambda: SqliteStore(tmp_path / f"machine-{next(counter)}.db")


def postgres_store(_tmp_path: Path) -> Callable[[], Store]:
    return scratch_store  # a schema of its own per example, dropped on close


STORES: dict[str, Callable[[Path], Callable[[], Store]]] = {
    "memory": lambda _tmp: MemoryStore,
    "sqlite": sqlite_store,
    "postgres": postgres_store,
}


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(kind, marks=[pytest.mark.postgres] if kind == "postgres" else [])
        for kind in STORES
    ],
)
def test_receipt_protocol_state_machine(kind: str, tmp_path: Path) -> None:
    machine = machine_for(STORES[kind](tmp_path))
    run_state_machine_as_test(
        machine, settings=settings(max_examples=30, stateful_step_count=40, deadline=None)
    )


# -- issue 11: a play under store faults ---------------------------------------

FAULT_TTL = 10.0  # heartbeats every 5 s
CALL_KEYS = ("a", "b", "c")
# Five rows, three calls: rows sharing a call follow one another.
ROWS = [{"row": f"r{i}", "k": CALL_KEYS[i % len(CALL_KEYS)]} for i in range(5)]
OTHER_OWNER = "elsewhere/1/1"  # a process on another host


class FaultStore(MemoryStore):
    """A memory store whose faults the machine switches on and off between runs."""

    def __init__(self) -> None:
        super().__init__()
        self.completions_fail = False
        self.heartbeats_fail = False
        self.corrupt: set[str] = set()  # receipt keys whose payload reads back unparseable

    async def complete_many(self, items: Sequence[Completion], *, now: float) -> list[bool]:
        if self.completions_fail:
            await trio.lowlevel.checkpoint()
            raise StoreError("memory://: complete_many: disk full")
        return await super().complete_many(items, now=now)

    async def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_ttl: float, now: float
    ) -> list[float | None]:
        if self.heartbeats_fail:
            await trio.lowlevel.checkpoint()
            raise StoreError("memory://: heartbeat_many: no answer")
        return await super().heartbeat_many(leases, lease_ttl=lease_ttl, now=now)

    async def claim_many(
        self, requests: Sequence[ClaimRequest], *, owner: str, lease_ttl: float, now: float
    ) -> list[ClaimOutcome]:
        outcomes = await super().claim_many(requests, owner=owner, lease_ttl=lease_ttl, now=now)
        return [
            Settled(attrs.evolve(outcome.receipt, result_json='{"corrupt'))
            if isinstance(outcome, Settled)
            and outcome.receipt.key in self.corrupt
            and outcome.receipt.status == "completed"
            else outcome
            for outcome in outcomes
        ]

    async def receipt(self, key: str) -> Any:
        """The receipt as stored (the checks read past the faults)."""
        (receipt,) = await super().get_many([key])
        return receipt


class PlayUnderFaults(RuleBasedStateMachine):
    """Runs a map of ``ROWS`` again and again against one store, under faults.

    A run either resumes the last run id (its failed rows run again) or
    starts another (its rows replay the receipts); ``new_calls`` changes the
    calls' inputs, so they need new receipts and execute.
    """

    def __init__(self) -> None:
        super().__init__()
        self.store = FaultStore()
        self.wall = 1_000.0  # the wall clock goes on across runs (each has a MockClock of its own)
        self.run_id = 0
        self.generation = 0
        self.takeover: dict[str, float] = {}  # call key -> how long its provider works
        self.violations: list[str] = []

    def receipt_key(self, call_key: str) -> str:
        return f"t-{self.generation}-{call_key}"

    @rule(call_key=st.sampled_from(CALL_KEYS), works=st.sampled_from([2.0, 3 * FAULT_TTL]))
    def another_owner_takes_over(self, call_key: str, works: float) -> None:
        # In the next run, while our provider works for ``works`` seconds on
        # this call, another owner takes its receipt over (believing us dead)
        # and records its own result: a heartbeat then finds the lease gone,
        # or, first, our fenced completion does.
        self.takeover[call_key] = works

    @rule(call_key=st.sampled_from(CALL_KEYS), on=st.booleans())
    def payload_corrupt(self, call_key: str, on: bool) -> None:
        key = self.receipt_key(call_key)
        if on:
            self.store.corrupt.add(key)
        else:
            self.store.corrupt.discard(key)

    @rule()
    def new_calls(self) -> None:
        self.generation += 1

    @rule(resume=st.booleans(), completions_fail=st.booleans(), heartbeats_fail=st.booleans())
    def run(self, resume: bool, completions_fail: bool, heartbeats_fail: bool) -> None:
        """Run the play: resume the last run id, or start another; the store's
        completion writes and heartbeats fail during this run, or not."""
        if not resume:
            self.run_id += 1
        self.store.completions_fail = completions_fail
        self.store.heartbeats_fail = heartbeats_fail
        clock = trio.testing.MockClock(autojump_threshold=0)
        started = self.wall
        ended = trio.run(self._run, clock=clock)
        self.wall = started + ended + FAULT_TTL * 10  # every lease of this run has expired
        self.takeover = {}

    async def _run(self) -> float:
        store = self.store
        takeover = dict(self.takeover)
        start = self.wall
        run_id = f"run-{self.run_id}"
        resolvers = {"started": 0, "ended": 0}

        def wall() -> float:
            return start + trio.current_time()

        async def tool(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
            works = takeover.pop(input["k"], None)  # once per run
            if works is None:
                await trio.sleep(1)
            else:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(other_owner, input["key"])
                    await trio.sleep(works)
            return {"key": input["key"], "by": "us", "attempt": call.attempt}

        async def other_owner(key: str) -> None:
            event("another owner takes over")
            await trio.sleep(1)
            held = await store.receipt(key)
            assert held is not None
            assert held.status == "running"
            request = ClaimRequest(
                key=key, operation="tool", name="t", run_id="other", takeover_lease=held.lease_id
            )
            (outcome,) = await MemoryStore.claim_many(
                store, [request], owner=OTHER_OWNER, lease_ttl=FAULT_TTL, now=wall()
            )
            assert isinstance(outcome, Claimed)
            value = json.dumps({"key": key, "by": "other"}, separators=(",", ":"))
            (done,) = await MemoryStore.complete_many(
                store, [Completion(key, outcome.lease_id, value)], now=wall()
            )
            assert done

        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            resolvers["started"] += 1
            try:
                key = self.receipt_key(row["k"])
                value = await rc.tool("t", {"k": row["k"], "key": key}, key=key)
                await self._check_received(key, value)
                return value
            finally:
                resolvers["ended"] += 1

        @trioplay.play("faults")
        async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
            return await ctx.dataset("s", ROWS).with_column("v", resolver).run(key="row")

        tools = trioplay.ToolRegistry()
        tools.add("t", tool)
        limits = trioplay.Limits(lease_ttl=FAULT_TTL)
        with trio.fail_after(3600):  # virtual seconds: every caller resolves
            async with trioplay.open_runtime(
                store=store, tools=tools, limits=limits, wall_clock=wall
            ) as rt:
                try:
                    result = await rt.run(play, {}, run_id=run_id)
                except (trioplay.TrioplayError, ValueError) as exc:
                    # The run may fail under faults; what it left behind is checked.
                    event(f"run failed: {type(exc).__name__}")
                else:
                    event(f"run completed, {result.failed_count} rows failed")
        assert resolvers["started"] == resolvers["ended"]
        await self._check_sheet(run_id)
        return trio.current_time()

    async def _check_received(self, key: str, value: Any) -> None:
        """A caller's value must be what its receipt holds: recorded, and not another owner's."""
        receipt = await self.store.receipt(key)
        if receipt is None or receipt.status != "completed":
            self.violations.append(f"{key}: a value reached its caller, receipt {receipt}")
        elif json.loads(receipt.result_json or "null") != value:
            self.violations.append(
                f"{key}: caller got {value}, receipt holds {receipt.result_json}"
            )

    async def _check_sheet(self, run_id: str) -> None:
        """Every row committed as completed stands on a completed receipt holding its value."""
        for row in await self.store.read_rows(run_id, "s", status="completed"):
            value = json.loads(row.data_json)["v"]
            receipt = await self.store.receipt(value["key"])
            if receipt is None or receipt.status != "completed":
                self.violations.append(f"row {row.key} committed, its receipt is {receipt}")
            elif json.loads(receipt.result_json or "null") != value:
                self.violations.append(
                    f"row {row.key} committed {value}, its receipt holds {receipt.result_json}"
                )

    @invariant()
    def no_violation(self) -> None:
        assert self.violations == []


def test_a_play_under_store_faults_keeps_its_promises() -> None:
    run_state_machine_as_test(
        PlayUnderFaults, settings=settings(max_examples=25, stateful_step_count=15, deadline=None)
    )
