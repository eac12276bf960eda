"""SIGKILL trials of event delivery (issue 22, acceptance 5).

``python -m benchmarks wait_kills [--trials N] [--seed S] [--rows SLOTS]``
runs N trials (default 50) per store, SQLite and PostgreSQL. In a trial two
processes work on one run in a new store: a *run* registers a wait in each
of SLOTS slots (default 200; in batches of 8, as a map registers a page's
waiting rows) while a *sender* sends each slot's event (a payload of a few
KiB, so that a torn write would show), from the last slot down, so that
early events are buffered and taken by a later registration. Each is killed with SIGKILL at its
own random moment (seeded), drawn over the time an unkilled trial takes:
anywhere in a registration, a send, a commit. Then the store is read and the
trial checks that:

- every stored event is whole (its payload is the one sent, byte for byte);
- no wait is delivered without its event consumed by it, and no event is
  consumed without its wait delivered with that payload;
- no event is left buffered beside a waiting wait it could settle.

Then the trial recovers as a user would: it registers every wait again (a
rerun) and resends every event with its id: each resend is ``delivered`` or
``duplicate``, never delivered twice; afterwards every wait holds its own
slot's event, and a second resend of all is ``duplicate`` throughout.
``tests/test_wait_kills.py`` runs a short form (a few trials per store).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import attrs
import psycopg
import trio

from trioplay import SendRequest, Store, WaitRequest
from trioplay.stores import open_store

from .wait_race import DSN

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRIALS = 50
DEFAULT_SLOTS = 200
RUN = "kills"
BATCH = 8
PAD = "x" * 4096
DEADLINE = 1e12  # far away: these trials are about kills, not time


def payload(slot: int) -> str:
    return f'{{"slot":{slot},"pad":"{PAD}"}}'


def wait_request(slot: int) -> WaitRequest:
    return WaitRequest(
        f"w{slot:05d}", RUN, "ds", f"r{slot}", "approval", str(slot), DEADLINE, f"t{slot}"
    )


def send_request(slot: int) -> SendRequest:
    return SendRequest(RUN, "approval", str(slot), payload(slot), f"e{slot:05d}")


# -- the two processes ---------------------------------------------------------------


async def _work(role: str, url: str, slots: int) -> None:
    store = open_store(url)
    await store.open()
    print("ready", flush=True)
    sys.stdin.readline()  # "go": both processes start their work together
    if role == "run":
        for start in range(0, slots, BATCH):
            batch = [wait_request(s) for s in range(start, min(slots, start + BATCH))]
            await store.register_waits(batch, now=time.time())
    else:
        # From the last slot down: the first events wait buffered for their waiters.
        for slot in reversed(range(slots)):
            await store.send_event(send_request(slot), now=time.time())
    print("done", flush=True)
    await store.aclose()


def _spawn(role: str, url: str, slots: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "benchmarks.wait_kills", role, url, str(slots)]
    child = subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        child.kill()
        raise RuntimeError(f"the {role} process did not start")
    return child


def _reap(children: list[subprocess.Popen[str]]) -> None:
    for child in children:
        child.wait(30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def _go(children: list[subprocess.Popen[str]]) -> float:
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    return time.perf_counter()


# -- a trial -------------------------------------------------------------------------


@attrs.define
class Trial:
    store: str
    killed: int = 0  # processes killed before they finished
    waits_before: int = 0
    events_before: int = 0
    delivered_before: int = 0
    resends: dict[str, int] = attrs.Factory(dict)
    problems: list[str] = attrs.Factory(list)


async def _check(store: Store, trial: Trial) -> None:
    waits = {w.wait_key: w for w in await store.list_waits(RUN)}
    events = {e.event_id: e for e in await store.list_events(RUN)}
    for event in events.values():
        if event.payload_json != payload(int(event.key_json)):
            trial.problems.append(f"event {event.event_id} is not whole")
        if event.consumed_by is not None:
            wait = waits.get(event.consumed_by)
            if wait is None or wait.event_id != event.event_id or wait.status != "delivered":
                trial.problems.append(f"event {event.event_id} consumed by no delivered wait")
    for wait in waits.values():
        if wait.status == "delivered":
            event = events.get(wait.event_id or "")
            if event is None or event.consumed_by != wait.wait_key:
                trial.problems.append(f"wait {wait.wait_key} delivered without its event")
            elif wait.payload_json != event.payload_json:
                trial.problems.append(f"wait {wait.wait_key} holds another payload")
    waiting = {w.key_json for w in waits.values() if w.status == "waiting"}
    for event in events.values():
        if event.consumed_by is None and event.key_json in waiting:
            trial.problems.append(f"event {event.event_id} buffered beside a waiting wait")


async def _recover(store: Store, trial: Trial, slots: int) -> None:
    records = await store.register_waits([wait_request(s) for s in range(slots)], now=time.time())
    for record in records:
        if record.status not in ("waiting", "delivered"):
            trial.problems.append(f"wait {record.wait_key} is {record.status} after a rerun")
    for slot in range(slots):
        result = await store.send_event(send_request(slot), now=time.time())
        trial.resends[result.outcome] = trial.resends.get(result.outcome, 0) + 1
        if result.outcome == "buffered":
            trial.problems.append(f"resend of slot {slot} buffered beside its registered wait")
    for slot in range(slots):
        if (await store.send_event(send_request(slot), now=time.time())).outcome != "duplicate":
            trial.problems.append(f"a second resend of slot {slot} was not a duplicate")
    waits = await store.list_waits(RUN)
    events = await store.list_events(RUN)
    if len(events) != slots or any(e.consumed_by is None for e in events):
        trial.problems.append("after recovery an event is missing or unconsumed")
    for wait in waits:
        if wait.status != "delivered" or wait.payload_json != payload(int(wait.key_json)):
            trial.problems.append(f"after recovery wait {wait.wait_key} lacks its own event")
    await _check(store, trial)


async def _open(url: str) -> Store:
    store = open_store(url)
    await store.open()
    return store


def _trial(kind: str, url: str, slots: int, span: float, rng: random.Random) -> Trial:
    trial = Trial(kind)

    async def begin() -> None:
        store = await _open(url)
        await store.begin_attempt(RUN, "kills", "{}", now=time.time())
        await store.aclose()

    trio.run(begin)
    children = [_spawn(role, url, slots) for role in ("run", "sender")]
    started = _go(children)
    moments = [rng.uniform(0, span) for _ in children]
    for at, index in sorted(zip(moments, range(len(children)), strict=True)):
        child = children[index]
        time.sleep(max(0.0, at - (time.perf_counter() - started)))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            trial.killed += 1
    _reap(children)

    async def verify() -> None:
        store = await _open(url)
        try:
            trial.waits_before = len(await store.list_waits(RUN))
            trial.events_before = len(await store.list_events(RUN))
            trial.delivered_before = sum(
                1 for w in await store.list_waits(RUN) if w.status == "delivered"
            )
            await _check(store, trial)
            await _recover(store, trial, slots)
        finally:
            await store.aclose()

    trio.run(verify)
    return trial


def _timed_span(kind: str, make_url: Any, slots: int) -> float:
    """Seconds an unkilled trial's processes take, from their start (kills land within)."""
    url, cleanup = make_url()
    try:
        trio.run(_begin_only, url)
        children = [_spawn(role, url, slots) for role in ("run", "sender")]
        started = _go(children)
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "done":
                raise RuntimeError("an unkilled trial process failed")
        span = time.perf_counter() - started
        _reap(children)
        return span
    finally:
        cleanup()


async def _begin_only(url: str) -> None:
    store = await _open(url)
    await store.begin_attempt(RUN, "kills", "{}", now=time.time())
    await store.aclose()


def _sqlite_url(folder: Path) -> Any:
    def make() -> tuple[str, Any]:
        return f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}", lambda: None

    return make


def _postgres_url() -> tuple[str, Any]:
    schema = f"kills_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}", drop


def run(
    trials: int = DEFAULT_TRIALS,
    *,
    slots: int = DEFAULT_SLOTS,
    seed: int | None = None,
    stores: tuple[str, ...] = ("sqlite", "postgres"),
    quiet: bool = False,
) -> dict[str, Any]:
    """Run ``trials`` per store; the report per store, with every problem found."""
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    report: dict[str, Any] = {"seed": seed, "slots": slots}
    with tempfile.TemporaryDirectory(prefix="trioplay-wait-kills-") as folder:
        makers = {"sqlite": _sqlite_url(Path(folder)), "postgres": _postgres_url}
        for kind in stores:
            make = makers[kind]
            span = _timed_span(kind, make, slots)
            results = []
            for _ in range(trials):
                url, cleanup = make()
                try:
                    results.append(_trial(kind, url, slots, span, rng))
                finally:
                    cleanup()
            problems = [p for t in results for p in t.problems]
            report[kind] = {
                "trials": trials,
                "span_s": round(span, 2),
                "killed": sum(t.killed for t in results),
                "events_stored_at_kill": sum(t.events_before for t in results),
                "waits_delivered_at_kill": sum(t.delivered_before for t in results),
                "resent_delivered": sum(t.resends.get("delivered", 0) for t in results),
                "resent_duplicate": sum(t.resends.get("duplicate", 0) for t in results),
                "problems": problems[:20],
                "problem_count": len(problems),
            }
            if not quiet:
                line = report[kind]
                print(
                    f"wait_kills {kind}: {trials} trials (seed {seed}), {line['killed']} kills;"
                    f" at the kill {line['events_stored_at_kill']} events stored,"
                    f" {line['waits_delivered_at_kill']} waits delivered; resent"
                    f" {line['resent_delivered']} delivered, {line['resent_duplicate']}"
                    f" duplicate; problems: {line['problem_count']}"
                )
    return report


if __name__ == "__main__":
    role, url, count = sys.argv[1:4]
    trio.run(_work, role, url, int(count))
