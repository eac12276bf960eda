"""ctx.fetch through receipts: replay on rerun, secrets never stored, stall phase."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import LocalHttpServer

LOCAL = ["127.0.0.0/8"]


async def test_rerun_replays_fetches_without_a_second_request(tmp_path: Path) -> None:
    server = LocalHttpServer()
    store = f"sqlite:///{tmp_path}/f.db"

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def fetch_row(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            response = await rc.fetch(f"http://127.0.0.1:{server.port}/row/{row['id']}")
            return response.json["path"]

        result = await (
            ctx.dataset("s", [{"id": str(i)} for i in range(10)])
            .with_column("path", fetch_row)
            .run(key="id")
        )
        done = await ctx.fetch(
            f"http://127.0.0.1:{server.port}/done",
            method="POST",
            json={"n": result.completed_count + result.skipped_count},
        )
        return {"status": done.status, "ok": done.ok, "rows": result.completed_count}

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        for attempt in range(2):
            async with trioplay.open_runtime(store=store, allow_networks=LOCAL) as rt:
                output = await rt.run(play, {}, run_id="r")
                assert rt.last_stats is not None
                assert rt.last_stats.fetches == (11 if attempt == 0 else 0)
            assert output == {"status": 200, "ok": True, "rows": 10 if attempt == 0 else 0}
        nursery.cancel_scope.cancel()
    assert sorted(server.requests) == sorted(
        [("POST", "/done"), *[("GET", f"/row/{i}") for i in range(10)]]
    )


async def test_force_fetches_again() -> None:
    server = LocalHttpServer()
    store = MemoryStore()

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        # The same run (a run id names one input): its third attempt forces.
        force = ctx.attempt == 3
        return (await ctx.fetch(f"http://127.0.0.1:{server.port}/x", force=force)).status

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with trioplay.open_runtime(store=store, allow_networks=LOCAL) as rt:
            for _ in range(3):
                await rt.run(play, {}, run_id="r")
        nursery.cancel_scope.cancel()
    assert len(server.requests) == 2


async def test_unsafe_destination_is_refused_and_not_recorded() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.fetch("http://169.254.169.254/latest/meta-data/")

    store = MemoryStore()
    for _ in range(2):
        async with trioplay.open_runtime(store=store) as rt:
            with pytest.raises(trioplay.UnsafeOutboundUrl):
                await rt.run(play, {}, run_id="r")
    assert (await store.count_receipts("r")).get("completed", 0) == 0


async def test_a_secret_appears_nowhere_after_a_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "sk-live-7b1e0c55d2a94f8f"
    seen: list[str] = []
    events: list[trioplay.RuntimeEvent] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        # A careless server echoing the credential back.
        return httpx.Response(200, json={"echo": request.headers["authorization"]})

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def call(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            response = await rc.fetch(
                f"https://127.0.0.1:8443/lookup/{row['id']}",
                method="POST",
                auth=trioplay.Secret(secret),
                json={"id": row["id"]},
            )
            rc.log(f"lookup answered {response.text}")
            return response.json

        result = await ctx.dataset("s", [{"id": "1"}, {"id": "2"}]).with_column("r", call).run()
        return {"n": result.completed_count, "preview": result.preview}

    db = tmp_path / "secret.db"
    async with trioplay.open_runtime(
        store=f"sqlite:///{db}",
        allow_networks=LOCAL,
        http_transport=httpx.MockTransport(handler),
        on_event=events.append,
    ) as rt:
        output = await rt.run(play, {}, run_id="r")
    assert seen == [f"Bearer {secret}"] * 2
    assert output["n"] == 2
    files = [p for p in tmp_path.iterdir() if p.name.startswith("secret.db")]
    stored = b"".join(p.read_bytes() for p in files)
    assert b"[REDACTED]" in stored
    assert secret.encode() not in stored
    assert secret not in caplog.text
    assert all(secret not in repr(event) for event in events)
    assert secret not in repr(output)


@pytest.mark.deadline(1000)
async def test_a_row_waiting_in_fetch_is_reported_in_phase_fetch(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trioplay.stall")

    async def slow_handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(100)
        return httpx.Response(200, text="late")

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def call(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return (await rc.fetch("http://127.0.0.1/slow")).text

        return await ctx.dataset("s", [{"id": "1"}]).with_column("r", call).run()

    reports: list[dict[str, Any]] = []
    async with trioplay.open_runtime(
        store=MemoryStore(),
        allow_networks=LOCAL,
        http_transport=httpx.MockTransport(slow_handler),
        limits=trioplay.Limits(stall_log_interval=60),
        fetch_timeouts=trioplay.FetchTimeouts(headers=500, body=500, total=500),
        on_event=lambda e: reports.append(e.data) if e.type == "map.stall" else None,
    ) as rt:
        result = await rt.run(play, {}, run_id="r")
    assert result.completed_count == 1
    assert len(reports) == 1
    assert reports[0]["fetch_active"] == 1
    assert reports[0]["oldest_phase"] == "fetch"
    assert reports[0]["oldest_fetch_ms"] == pytest.approx(60_000, abs=50)


async def test_identical_effects_in_flight_follow_like_tool_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Steps and fetches take the tools' one call path: an identical effect
    # made while one is in flight follows it, and a forced fetch follows only
    # a forced one (it calls again; identical fetches after it follow it).
    requests: list[str] = []
    steps = 0

    async def slow(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        await trio.sleep(1)
        return httpx.Response(200, text=f"answer {len(requests)}")

    async def step() -> int:
        nonlocal steps
        steps += 1
        await trio.sleep(1)
        return steps

    results: dict[str, Any] = {}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def fetch(name: str, force: bool) -> None:
            results[name] = (await ctx.fetch("http://127.0.0.1/x", force=force)).text

        async def stepped(name: str) -> None:
            results[name] = await ctx.step("once", step)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stepped, "step 1")
            nursery.start_soon(fetch, "unforced", False)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(stepped, "step 2")
            nursery.start_soon(fetch, "forced", True)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(fetch, "after", False)

    async with trioplay.open_runtime(
        store=MemoryStore(), allow_networks=LOCAL, http_transport=httpx.MockTransport(slow)
    ) as rt:
        await rt.run(play, {}, run_id="r")
        stats = rt.last_stats
    assert steps == 1
    assert requests == ["/x", "/x"]
    assert results == {
        "step 1": 1,
        "step 2": 1,
        "unforced": "answer 1",
        "forced": "answer 2",
        "after": "answer 2",
    }
    assert stats is not None
    assert (stats.followed, stats.steps_run, stats.fetches) == (2, 1, 2)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"headers": {"X-Count": 3}}, TypeError, "header 'X-Count' must be a str or"),
        ({"auth": "tok"}, TypeError, "auth must be a trioplay.Secret"),
        ({"json": {"a": 1}, "content": b"a"}, ValueError, "json= or content=, not both"),
    ],
)
async def test_malformed_options_are_refused_at_the_edge_before_any_io(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    # Both edges, ctx.fetch and a tool's call.fetch (rt.raw_fetch), check the
    # options once, as they build the FetchOptions record.
    requests: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200)

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.fetch("https://127.0.0.1/x", **options)

    store = MemoryStore()
    async with trioplay.open_runtime(
        store=store, allow_networks=LOCAL, http_transport=httpx.MockTransport(record)
    ) as rt:
        with pytest.raises(error, match=message):
            await rt.run(play, {}, run_id="r")
        with pytest.raises(error, match=message):
            await rt.raw_fetch("https://127.0.0.1/x", **options)
    assert requests == []
    assert await store.count_receipts("r") == {}
