"""A state machine over the waits protocol (issue 22), against a model.

Hypothesis drives registrations (alone and in batches), sends (fresh ids and
resends, payloads and rejects, by slot and by token), polls, cancellations
and a wall clock that jumps, against each store, and checks every answer
against a model written here without the store rules (``stores/_rules.py``):
a plain list of waits and a plain list of events. Properties, beside the
answers matching the model: every event settles at most one wait and every
settled wait names an event that names it back with the same payload; no
event stays buffered beside a waiting wait it could settle; a deadline and a
token never change once written; a settled wait never changes again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import event as note
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from trioplay import (
    EventConflict,
    EventRefused,
    InvalidWait,
    SendRequest,
    WaitRecord,
    WaitRequest,
)

from .test_receipt_machine import STORES, Portal

WAIT_KINDS = list(STORES)

RUN = "run-1"
NAMES = ("approval", "approval", "approval", "callback")
KEYS = ('"a"', '"b"')
WAIT_KEYS = tuple(f"w{i}" for i in range(6))
PAYLOADS = ('{"v":1}', '{"v":2}', "null")


@attrs.define
class ModelWait:
    key: str
    name: str
    key_json: str
    token: str
    deadline: float
    created_at: float
    status: str = "waiting"
    payload: str | None = None
    reason: str | None = None
    event_id: str | None = None
    settled_at: float | None = None


@attrs.define
class ModelEvent:
    event_id: str
    name: str
    key_json: str
    payload: str | None
    reject: str | None
    sent_at: float
    consumed_by: str | None = None


class WaitModel:
    """Waits and events, the simplest way: scan the lists every time."""

    def __init__(self) -> None:
        self.waits: dict[str, ModelWait] = {}
        self.events: list[ModelEvent] = []  # send order
        self.run_status = "running"

    def expire(self, wait: ModelWait, now: float) -> None:
        if wait.status == "waiting" and now > wait.deadline:
            wait.status, wait.settled_at = "timed_out", now

    @staticmethod
    def settle(wait: ModelWait, event: ModelEvent, now: float) -> None:
        wait.status = "rejected" if event.reject is not None else "delivered"
        wait.payload, wait.reason, wait.event_id = event.payload, event.reject, event.event_id
        wait.settled_at = now
        event.consumed_by = wait.key

    def register(self, requests: list[WaitRequest], now: float) -> list[ModelWait]:
        new = []
        for request in requests:
            known = self.waits.get(request.wait_key)
            if known is not None:
                self.expire(known, now)
            else:
                wait = ModelWait(
                    request.wait_key,
                    request.name,
                    request.key_json,
                    request.token,
                    request.deadline,
                    now,
                )
                self.waits[wait.key] = wait
                new.append(wait)
        for wait in sorted(new, key=lambda w: w.key):  # one batch: one created_at
            for event in self.events:
                same_slot = (event.name, event.key_json) == (wait.name, wait.key_json)
                if same_slot and event.consumed_by is None and event.sent_at <= wait.deadline:
                    self.settle(wait, event, now)
                    break
            else:
                self.expire(wait, now)
        return [self.waits[r.wait_key] for r in requests]

    def send(self, request: SendRequest, now: float) -> tuple[str, str | None]:
        """The outcome and the wait settled; raises as the store must."""
        if request.token is not None:
            owner = next((w for w in self.waits.values() if w.token == request.token), None)
            if owner is None:
                raise InvalidWait("token", "forged")
            request = attrs.evolve(request, name=owner.name, key_json=owner.key_json)
        stored = next((e for e in self.events if e.event_id == request.event_id), None)
        if stored is not None:
            content = (stored.name, stored.key_json, stored.payload, stored.reject)
            if content != (request.name, request.key_json, request.payload_json, request.reject):
                raise EventConflict(RUN, request.event_id)
            return "duplicate", stored.consumed_by
        if self.run_status in ("completed", "cancelled"):
            raise EventRefused(RUN, self.run_status)
        event = ModelEvent(
            request.event_id,
            request.name,
            request.key_json,
            request.payload_json,
            request.reject,
            now,
        )
        self.events.append(event)
        takers = [
            w
            for w in self.waits.values()
            if (w.name, w.key_json) == (event.name, event.key_json)
            and w.status == "waiting"
            and w.deadline >= now
        ]
        if not takers:
            return "buffered", None
        wait = min(takers, key=lambda w: (w.created_at, w.key))
        self.settle(wait, event, now)
        return "delivered", wait.key


def same(record: WaitRecord | None, model: ModelWait) -> None:
    assert record is not None, model
    assert (record.wait_key, record.name, record.key_json, record.token) == (
        model.key,
        model.name,
        model.key_json,
        model.token,
    )
    assert (record.deadline, record.created_at, record.status) == (
        model.deadline,
        model.created_at,
        model.status,
    ), (record, model)
    assert (record.payload_json, record.reason, record.event_id, record.settled_at) == (
        model.payload,
        model.reason,
        model.event_id,
        model.settled_at,
    ), (record, model)


wait_specs = st.tuples(
    st.sampled_from(WAIT_KEYS),
    st.sampled_from(NAMES),
    st.sampled_from(KEYS),
    st.sampled_from([-5.0, 0.0, 10.0, 30.0, 100.0]),  # deadline, from now
)


def machine_for(make_store: Callable[[], Any]) -> type[RuleBasedStateMachine]:
    class WaitMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.portal = Portal()
            self.store = make_store()
            self.portal.call(self.store.open)
            self.now = 1_000.0
            self.model = WaitModel()
            self.tokens = 0
            self.sent: list[SendRequest] = []

        @initialize()
        def begin(self) -> None:
            self.portal.call(self.store.begin_attempt, RUN, "play", "{}", now=self.now)

        def teardown(self) -> None:
            self.portal.call(self.store.aclose)
            self.portal.close()

        @rule(seconds=st.sampled_from([0.0, 0.0, 1.0, 10.0, 30.0]))
        def advance(self, seconds: float) -> None:
            self.now += seconds

        @rule(specs=st.lists(wait_specs, min_size=1, max_size=3))
        def register(self, specs: list[tuple[str, str, str, float]]) -> None:
            requests = []
            for key, name, key_json, ahead in specs:
                known = self.model.waits.get(key)
                if known is not None:  # a wait key names one slot: a rerun meets the same wait
                    name, key_json = known.name, known.key_json
                self.tokens += 1
                requests.append(
                    WaitRequest(
                        key,
                        RUN,
                        "ds",
                        f"row-{key}",
                        name,
                        key_json,
                        self.now + ahead,
                        f"t{self.tokens}",
                    )
                )
            records = self.portal.call(self.store.register_waits, requests, now=self.now)
            expected = self.model.register(requests, self.now)
            assert len(records) == len(requests)
            for record, model in zip(records, expected, strict=True):
                same(record, model)

        @rule(
            name=st.sampled_from(NAMES),
            key_json=st.sampled_from(KEYS),
            payload=st.sampled_from((*PAYLOADS, None)),
            by_token=st.sampled_from([None] * 6 + ["known", "forged"]),
        )
        def send(self, name: str, key_json: str, payload: str | None, by_token: Any) -> None:
            token = None
            if by_token == "forged":
                token = "no-such-token"
            elif by_token == "known" and self.model.waits:
                token = sorted(self.model.waits.values(), key=lambda w: w.key)[-1].token
            self.sent.append(
                SendRequest(
                    RUN,
                    "" if token else name,
                    "" if token else key_json,
                    payload,
                    f"e{len(self.sent)}",
                    reject="refused" if payload is None else None,
                    token=token,
                )
            )
            self._send(self.sent[-1])

        @precondition(lambda self: self.sent)
        @rule(data=st.data(), alter=st.sampled_from([False, False, False, True]))
        def resend(self, data: st.DataObject, alter: bool) -> None:
            request = data.draw(st.sampled_from(self.sent))
            if alter:
                other = (
                    PAYLOADS[(PAYLOADS.index(request.payload_json) + 1) % len(PAYLOADS)]
                    if request.payload_json in PAYLOADS
                    else PAYLOADS[0]
                )
                request = attrs.evolve(request, payload_json=other, reject=None)
            self._send(request)

        def _send(self, request: SendRequest) -> None:
            try:
                expected = self.model.send(request, self.now)
            except (InvalidWait, EventConflict, EventRefused) as error:
                note(f"send: {type(error).__name__}")
                with pytest.raises(type(error)):
                    self.portal.call(self.store.send_event, request, now=self.now)
                return
            result = self.portal.call(self.store.send_event, request, now=self.now)
            note(f"send: {result.outcome}")
            assert (result.outcome, result.wait_key) == expected, (result, expected)

        @rule(keys=st.lists(st.sampled_from(WAIT_KEYS), min_size=1, max_size=4))
        def poll(self, keys: list[str]) -> None:
            records = self.portal.call(self.store.poll_waits, keys, now=self.now)
            for key, record in zip(keys, records, strict=True):
                model = self.model.waits.get(key)
                if model is None:
                    assert record is None
                    continue
                self.model.expire(model, self.now)
                same(record, model)

        @precondition(lambda self: self.model.run_status == "running")
        @rule(how=st.sampled_from([None] * 20 + ["cancel", "complete"]))
        def end_run(self, how: str | None) -> None:
            if how is None:
                return
            if how == "complete":
                self.portal.call(
                    functools.partial(self.store.finish_attempt, attempt=1),
                    RUN,
                    "completed",
                    now=self.now,
                )
                self.model.run_status = "completed"
                return
            count = self.portal.call(self.store.cancel_run, RUN, now=self.now)
            open_waits = [w for w in self.model.waits.values() if w.status == "waiting"]
            assert count == len(open_waits)
            for wait in open_waits:
                wait.status, wait.settled_at = "cancelled", self.now
            self.model.run_status = "cancelled"

        @invariant()
        def store_matches_the_model(self) -> None:
            waits = self.portal.call(self.store.list_waits, RUN)
            events = self.portal.call(self.store.list_events, RUN)
            assert [w.wait_key for w in waits] == [
                w.key
                for w in sorted(self.model.waits.values(), key=lambda w: (w.created_at, w.key))
            ]
            for record in waits:
                same(record, self.model.waits[record.wait_key])
            assert [
                (e.event_id, e.payload_json, e.reject, e.sent_at, e.consumed_by) for e in events
            ] == [
                (e.event_id, e.payload, e.reject, e.sent_at, e.consumed_by)
                for e in self.model.events
            ]
            # Exactly once, both ways: a settled wait and its event name each other.
            by_id = {e.event_id: e for e in events}
            takers = [e.consumed_by for e in events if e.consumed_by is not None]
            assert len(takers) == len(set(takers))
            for wait in waits:
                if wait.status in ("delivered", "rejected"):
                    taken = by_id[wait.event_id or ""]
                    assert taken.consumed_by == wait.wait_key
                    assert (taken.payload_json, taken.reject) == (wait.payload_json, wait.reason)
                    assert taken.sent_at <= wait.deadline
            # No event left buffered beside a waiting wait it could settle.
            for event in events:
                if event.consumed_by is None:
                    for wait in waits:
                        if wait.status == "waiting" and (wait.name, wait.key_json) == (
                            event.name,
                            event.key_json,
                        ):
                            assert event.sent_at > wait.deadline, (event, wait)

    return WaitMachine


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(kind, marks=[pytest.mark.postgres] if kind == "postgres" else [])
        for kind in WAIT_KINDS
    ],
)
def test_wait_protocol_state_machine(kind: str, tmp_path: Path) -> None:
    machine = machine_for(STORES[kind](tmp_path))
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, stateful_step_count=40, deadline=None)
    )
