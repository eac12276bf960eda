"""Scenarios of rows that wait for outside events (issue 22).

``event-never-comes``: rows wait for a callback that never comes; they
linger past their deadline and get their default (or fail with
``EventWaitTimeout``) in the same run, and a page whose only unsettled rows
wait never logs a stall line. ``event-before-waiter``: the callback arrives
before the row has registered its wait (the race that loses events in
other engines): it is kept, and the wait takes it as it registers.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import trio

import trioplay
from trioplay import SendRequest, WaitStore
from trioplay.scenario import NO_STALL, Expect, Rows, Scenario, Setup

from ._common import leads, map_play

if TYPE_CHECKING:
    from trioplay import Row, RowContext, Store
    from trioplay.scenario import ScenarioResult

EPOCH = 1_800_000_000.0  # the scenarios' wall clock at virtual time 0 (as run_scenario's)


async def _never(row: Row, rc: RowContext) -> Any:
    """Waits 2 minutes, lingering, for a callback nobody sends; odd rows have a default."""
    key = row["domain"]
    if int(key[1:].split(".")[0]) % 2:
        return await rc.wait_for_event("callback", key=key, timeout=120, linger=300, default="-")
    return await rc.wait_for_event("callback", key=key, timeout=120, linger=300)


def _event_never_comes(seed: int) -> Setup:
    return Setup(
        play=map_play("event-never-comes", leads(20), ("callback", _never)),
        limits=trioplay.Limits(stall_log_interval=30.0, event_poll_interval=5.0),
    )


def _ten_each(result: ScenarioResult) -> list[str]:
    defaults = [
        event
        for event in result.events
        if event.TYPE == "wait.settled" and getattr(event, "status", None) == "timed_out"
    ]
    if len(defaults) != 20:
        return [f"{len(defaults)} waits settled timed_out, expected 20"]
    return []


EVENT_NEVER_COMES = Scenario(
    name="event-never-comes",
    description=(
        "rows linger for a callback that never comes: at 2 min they take their default "
        "or fail, no stall line"
    ),
    setup=_event_never_comes,
    expect=Expect(
        rows=Rows(completed=10, failed=10, failed_with="EventWaitTimeout"),
        stall=NO_STALL,
        events=("wait.registered", "wait.settled"),
        check=_ten_each,
    ),
)


class _Service:
    """A job service whose callback comes back before the row asks for it.

    ``start`` is a tool: it sends the job's callback event to the store at
    once (as a webhook handler would), then takes a while to answer; the
    row registers its wait only after the tool answered.
    """

    def __init__(self) -> None:
        self.store: WaitStore | None = None

    def attach(self, store: Store) -> Store:
        assert isinstance(store, WaitStore)
        self.store = store
        return store

    async def start(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        assert self.store is not None
        request = SendRequest(
            run_id="scenario-event-before-waiter",
            name="done",
            key_json=trioplay.canonical_json(input["domain"]),
            payload_json=trioplay.canonical_json({"job": input["domain"], "ok": True}),
            event_id=secrets.token_hex(8),
        )
        await self.store.send_event(request, now=EPOCH + trio.current_time())
        await trio.sleep(2)
        return {"job": input["domain"]}


async def _start_then_wait(row: Row, rc: RowContext) -> Any:
    await rc.tool("start", {"domain": row["domain"]})
    return await rc.wait_for_event("done", key=row["domain"], timeout=600)


def _event_before_waiter(seed: int) -> Setup:
    service = _Service()
    tools = trioplay.ToolRegistry()
    tools.add("start", service.start)
    return Setup(
        play=map_play("event-before-waiter", leads(30), ("result", _start_then_wait)),
        tools=tools,
        store=service.attach,
    )


def _every_wait_found_its_event(result: ScenarioResult) -> list[str]:
    registered = [event for event in result.events if event.TYPE == "wait.registered"]
    late = [event for event in registered if getattr(event, "status", None) != "delivered"]
    if len(registered) != 30 or late:
        return [f"{len(registered)} waits registered, {len(late)} without their event"]
    return []


EVENT_BEFORE_WAITER = Scenario(
    name="event-before-waiter",
    description=(
        "each callback arrives before its row registers the wait: kept, and taken as the "
        "wait registers"
    ),
    setup=_event_before_waiter,
    expect=Expect(
        rows=Rows(completed=30, failed=0), stall=NO_STALL, check=_every_wait_found_its_event
    ),
)
