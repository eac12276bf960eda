"""One event stream on one clock: a fact is recorded once, and every sink sees it at its time.

Every sink reads the same records: the JSON Lines file, the Chrome trace, the
timeline picture, ``on_event`` listeners (``RuntimeEvent`` s derived by
``_trace._listen.FACTS``) and the command line's progress reporter. So an
event recorded once shows in each sink that depicts it, with the time it was
recorded at, on the run's Trio clock.
"""

from __future__ import annotations

import functools
import io
import json
from typing import Any

import attrs
import trio
import trio.testing

import trioplay
from trioplay._cli._progress import RunReporter
from trioplay._pictures._timeline import _Run
from trioplay._trace import EVENT_TYPES, ChromeTraceSink, JsonlSink, ListSink, Recorder
from trioplay._trace._listen import FACTS, EventListener
from trioplay._trace._records import declared
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, find_email, leads, registry

# Every type once, in an order a run could say them (a row's call and fetch
# while the row is in flight), so that each span of the Chrome trace pairs.
ORDER = [
    "run.started",
    "map.started",
    "page.started",
    "row.admitted",
    "row.resolver_started",
    "call.queued",
    "receipt.claimed",
    "call.started",
    "receipt.followed",
    "receipt.waited",
    "receipt.replayed",
    "lease.renewed",
    "call.finished",
    "call.settled",
    "fetch.started",
    "fetch.phase",
    "fetch.finished",
    "play.log",
    "wait.registered",
    "event.sent",
    "wait.settled",
    "map.stall",
    "loop.lag",
    "row.terminal",
    "row.writer_admitted",
    "writer.batch_started",
    "writer.batch_committed",
    "row.committed",
    "writer.batch_failed",
    "lease.lost",
    "row.waiting",
    "map.progress",
    "page.lost",
    "page.finished",
    "map.finished",
    "run.finished",
]

_VALUES = {
    "str": "x",
    "str | None": "x",
    "int": 1,
    "int | None": 1,
    "float": 1.0,
    "bool": False,
    "dict[str, Any]": {},
    "list[str]": ["x"],
}
_FIELDS = {"status": "completed", "phase": "headers", "url": "https://x.example/"}

# The types each sink depicts with a time of their own (the JSON Lines file: all of them).
IN_CHROME = {
    "run.started",
    "run.finished",
    "row.admitted",
    "row.resolver_started",
    "receipt.claimed",
    "call.started",
    "call.finished",
    "fetch.started",
    "fetch.phase",
    "fetch.finished",
    "row.terminal",
    "row.writer_admitted",
    "writer.batch_started",
    "writer.batch_committed",
    "row.committed",
    "map.stall",
    "loop.lag",
}
IN_REPORTER = {"run.started", "map.started", "map.progress", "map.finished", "run.finished"}


def _fields(kind: type[Any]) -> list[Any]:
    fields = attrs.fields(kind)[1:]
    return [_FIELDS.get(f.name, _VALUES[declared(f)]) for f in fields]


def test_the_order_has_every_type_once() -> None:
    assert sorted(ORDER) == sorted(EVENT_TYPES)
    assert {kind.TYPE for kind in FACTS} <= set(ORDER)


async def test_each_event_type_once_in_every_sink_at_the_same_time(
    autojump_clock: trio.abc.Clock,
) -> None:
    jsonl, chrome = io.StringIO(), io.StringIO()
    kept = ListSink()
    told: list[trioplay.RuntimeEvent] = []
    reporter = RunReporter(io.StringIO(), interactive=False)
    recorder = Recorder(
        JsonlSink(jsonl), ChromeTraceSink(chrome), kept, EventListener(told.append), reporter
    )
    recorder.bind_clock()
    when: dict[str, float] = {}
    for number, name in enumerate(ORDER, 1):
        await trio.sleep(1.0)
        kind = EVENT_TYPES[name]
        recorder.add(kind, *_fields(kind))
        at = when[name] = trio.current_time()
        assert at == float(number)  # the run's Trio clock, as the records' clock
        # Live sinks hear a fact as it is recorded, not at the batch's end.
        if kind in FACTS:
            assert (told[-1].type, told[-1].at) == (FACTS[kind].type, at)
        if name in IN_REPORTER:
            state = reporter.maps.get("x")
            seen = {
                "run.started": reporter.outcome.started_at,
                "run.finished": reporter.outcome.finished_at,
            }.get(name, state.at if state is not None else None)
            assert seen == at, name
    recorder.close()

    # The records, and the JSON Lines file: every type once, at its time.
    assert [(e.TYPE, e.at) for e in kept.events] == [(name, when[name]) for name in ORDER]
    lines = [json.loads(line) for line in jsonl.getvalue().splitlines()]
    assert [(line["type"], line["at"]) for line in lines] == [(n, when[n]) for n in ORDER]

    # on_event listeners: each fact once, at the time its record has.
    expected = [(FACTS[EVENT_TYPES[n]].type, when[n]) for n in ORDER if EVENT_TYPES[n] in FACTS]
    assert [(event.type, event.at) for event in told] == expected
    assert {event.run_id for event in told} == {"x"}

    # The Chrome trace: a slice starts or ends, or a mark stands, at each time.
    trace = json.loads(chrome.getvalue())["traceEvents"]
    t0 = when[ORDER[0]]
    times = set()
    for item in trace:
        if item["ph"] in ("X", "i"):
            times.add(round(t0 + item["ts"] / 1e6, 6))
        if item["ph"] == "X":
            times.add(round(t0 + (item["ts"] + item["dur"]) / 1e6, 6))
    assert {name for name in ORDER if when[name] in times} >= IN_CHROME

    # The timeline: its stall tick and loop-lag tick at their times, the commit counted.
    run = _Run(kept.events)
    assert [at for at, _lane, _blame in run.stalls] == [when["map.stall"]]
    assert [at for at, _text in run.lags] == [when["loop.lag"]]
    assert run.committed == 1


async def test_a_run_says_each_fact_once_and_listeners_hear_it_at_its_time(
    autojump_clock: trio.abc.Clock,
) -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        ctx.log("start")
        return await ctx.dataset("s", leads(30)).with_column("email", find_email).run(key="domain")

    kept = ListSink()
    told: list[trioplay.RuntimeEvent] = []
    recorder = Recorder(kept, batch=7)
    with trio.fail_after(600):
        async with trioplay.open_runtime(
            store=MemoryStore(),
            tools=registry(finder=CountingTool()),
            recorder=recorder,
            on_event=told.append,
        ) as rt:
            await rt.run(play, {}, run_id="r1")
    recorder.close()
    facts = [e for e in kept.events if type(e) in FACTS]
    derived = [(FACTS[type(e)].type, e.at, FACTS[type(e)].data(e)) for e in facts]
    assert [(event.type, event.at, event.data) for event in told] == derived
    assert {event.run_id for event in told} == {"r1"}
    types = [event.type for event in told]
    assert types[0] == "run.started"
    assert types[-1] == "run.finished"
    assert {"map.started", "map.progress", "map.finished", "play.log"} <= set(types)
    assert told[-1].data["stats"]["provider_calls"] == 30


async def test_runs_of_one_runtime_at_once_each_hear_their_own_events(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Two runs of one play (so maps of one name) in one runtime at the same
    # time: every event a listener hears names the run that said it.
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        ctx.log(f"start {ctx.run_id}")
        await trio.sleep(1)  # both runs are under way before either logs again
        ctx.log(f"end {ctx.run_id}")
        return await ctx.dataset("s", leads(5)).with_column("email", find_email).run(key="domain")

    told: list[trioplay.RuntimeEvent] = []
    with trio.fail_after(600):
        async with (
            trioplay.open_runtime(
                store=MemoryStore(), tools=registry(finder=CountingTool()), on_event=told.append
            ) as rt,
            trio.open_nursery() as nursery,
        ):
            for run_id in ("a", "b"):
                nursery.start_soon(functools.partial(rt.run, play, {}, run_id=run_id))
    for event in told:
        if event.type == "play.log":
            assert event.data["message"].endswith(event.run_id), event
    maps = [(e.run_id, e.type) for e in told if e.type.startswith("map.")]
    assert {run for run, _type in maps} == {"a", "b"}
    for run in ("a", "b"):
        assert (run, "map.finished") in maps
