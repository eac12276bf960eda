"""Issue 4: a state machine drives claims, heartbeats, completions, failures,
releases and lease expiries from several owners, with a controlled clock,
against every store, and checks each answer against a model of the protocol.

Properties: at most one live owner per key (a claim never succeeds over a
live lease); a fenced write by anyone but the current lease holder never
succeeds; a completed receipt never changes unless forced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from trioplay import (
    Claimed,
    ClaimRequest,
    Completion,
    Failure,
    Held,
    Lease,
    Settled,
    Store,
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
