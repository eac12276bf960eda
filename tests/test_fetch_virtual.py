"""fetch's deadline rules in virtual time, asserted to the exact instant.

An in-memory transport plays the server: it sleeps with ``trio.sleep`` before
the response head and between body chunks, under the ``autojump_clock``
(``MockClock(autojump_threshold=0)``), so minutes of hanging take
milliseconds and every deadline lands on a known time.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import trio
import trio.testing

from trioplay import FetchError, FetchTimeout, FetchTimeouts, Limits
from trioplay._fetch import Fetcher, FetchOptions

URL = "https://api.example.test/items"
Handler = Callable[[httpx.Request, int], Awaitable[httpx.Response]]


class Drip(httpx.AsyncByteStream):
    """A body that sends ``chunks`` bytes, one every ``every`` seconds (forever by default)."""

    def __init__(self, every: float, chunks: float = math.inf) -> None:
        self.every = every
        self.chunks = chunks
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        while sent < self.chunks:
            await trio.sleep(self.every)
            sent += 1
            yield b"x"

    async def aclose(self) -> None:
        self.closed = True


class Scripted(httpx.AsyncBaseTransport):
    """Answers each request with ``handler(request, attempt_number)``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.handler(request, len(self.requests))


async def public(host: str, port: int) -> list[str]:
    return ["93.184.216.34"]


def fetcher(transport: Scripted, **timeouts: float) -> Fetcher:
    return Fetcher(
        timeouts=FetchTimeouts(**timeouts), limits=Limits(), transport=transport, resolve=public
    )


def head_after(delay: float, body: httpx.AsyncByteStream | None = None) -> Handler:
    async def handler(request: httpx.Request, attempt: int) -> httpx.Response:
        await trio.sleep(delay)
        return httpx.Response(200, stream=body or Drip(0.0, chunks=0))

    return handler


async def expect_timeout(
    f: Fetcher, phase: str, limit: float, at: float, **options: object
) -> None:
    started = trio.current_time()
    with pytest.raises(FetchTimeout) as caught:
        await f.fetch(URL, FetchOptions(**options))  # type: ignore[arg-type]
    assert (caught.value.phase, caught.value.timeout) == (phase, limit)
    assert trio.current_time() - started == pytest.approx(at, abs=1e-9)


async def test_headers_deadline(autojump_clock: trio.testing.MockClock) -> None:
    async with fetcher(Scripted(head_after(math.inf))) as f:
        await expect_timeout(f, "headers", 30.0, at=30.0)


async def test_body_deadline_starts_when_the_head_arrives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Drip(every=1.0)
    async with fetcher(Scripted(head_after(20.0, body))) as f:
        await expect_timeout(f, "body", 30.0, at=20.0 + 30.0)
    assert body.closed


@pytest.mark.deadline(600)  # virtual seconds
async def test_total_binds_the_body_phase(autojump_clock: trio.testing.MockClock) -> None:
    # The head arrives at 100 s: the body may run min(30, 20 remaining).
    body = Drip(every=1.0)
    async with fetcher(Scripted(head_after(100.0, body)), headers=110) as f:
        await expect_timeout(f, "total", 120.0, at=120.0)
    assert body.closed


async def test_total_binds_the_headers_phase(autojump_clock: trio.testing.MockClock) -> None:
    async with fetcher(Scripted(head_after(math.inf)), headers=30, total=10) as f:
        await expect_timeout(f, "total", 10.0, at=10.0)


async def test_a_phase_ending_with_the_total_reports_total(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fetcher(Scripted(head_after(math.inf)), headers=30, total=30) as f:
        await expect_timeout(f, "total", 30.0, at=30.0)


async def test_per_call_timeouts_override_the_fetchers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fetcher(Scripted(head_after(math.inf))) as f:
        await expect_timeout(
            f, "headers", 2.0, at=2.0, timeouts=FetchTimeouts(headers=2, body=2, total=5)
        )


def fail_then_answer(failures: int, *, fail_after: float = 0.0) -> Handler:
    async def handler(request: httpx.Request, attempt: int) -> httpx.Response:
        await trio.sleep(fail_after)
        if attempt <= failures:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, text="ok")

    return handler


async def test_get_retries_transport_failures_with_growing_sleeps(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = Scripted(fail_then_answer(2))
    async with fetcher(transport) as f:
        started = trio.current_time()
        response = await f.fetch(URL)
    assert response.text == "ok"
    assert len(transport.requests) == 3
    assert trio.current_time() - started == pytest.approx(0.1 + 0.2, abs=1e-9)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_unsafe_methods_are_never_retried(
    autojump_clock: trio.testing.MockClock, method: str
) -> None:
    transport = Scripted(fail_then_answer(1))
    async with fetcher(transport) as f:
        with pytest.raises(FetchError, match="after 1 attempt") as caught:
            await f.fetch(URL, FetchOptions(method=method, json={"a": 1}))
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(transport.requests) == 1


async def test_retries_give_up_after_the_last_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = Scripted(fail_then_answer(99))
    async with fetcher(transport) as f:
        started = trio.current_time()
        with pytest.raises(FetchError, match="after 3 attempt") as caught:
            await f.fetch(URL, FetchOptions(method="HEAD"))
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(transport.requests) == 3
    # No sleep after the last attempt.
    assert trio.current_time() - started == pytest.approx(0.1 + 0.2, abs=1e-9)


async def test_each_attempt_gets_a_fresh_headers_phase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two 25 s attempts under a 30 s headers limit: neither times out.
    transport = Scripted(fail_then_answer(1, fail_after=25.0))
    async with fetcher(transport) as f:
        started = trio.current_time()
        await f.fetch(URL)
    assert trio.current_time() - started == pytest.approx(25.0 + 0.1 + 25.0, abs=1e-9)


async def test_retry_sleeps_count_against_the_total(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Attempt 1 fails at 4 s, sleeps to 4.1 s; attempt 2 hangs into the 5 s total.
    transport = Scripted(fail_then_answer(99, fail_after=4.0))
    async with fetcher(transport, total=5) as f:
        await expect_timeout(f, "total", 5.0, at=5.0)
    assert len(transport.requests) == 2


async def test_each_redirect_hop_gets_a_fresh_headers_phase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def handler(request: httpx.Request, attempt: int) -> httpx.Response:
        await trio.sleep(20.0)
        if request.url.path == "/items":
            return httpx.Response(302, headers={"location": "/moved"})
        return httpx.Response(200, text="moved")

    transport = Scripted(handler)
    async with fetcher(transport) as f:
        started = trio.current_time()
        response = await f.fetch(URL)
    assert (response.text, response.url) == ("moved", "https://api.example.test/moved")
    assert trio.current_time() - started == pytest.approx(40.0, abs=1e-9)


async def test_caller_cancellation_is_not_a_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Drip(every=1.0)
    async with fetcher(Scripted(head_after(0.0, body))) as f:
        with trio.move_on_after(5.0) as caller:
            await f.fetch(URL)
    assert caller.cancelled_caught
    assert body.closed


async def test_caller_cancellation_wins_a_tie_with_the_total(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fetcher(Scripted(head_after(math.inf)), total=10) as f:
        with trio.move_on_after(10.0) as caller:
            await f.fetch(URL)
    assert caller.cancelled_caught


async def test_body_over_the_cap_closes_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = Drip(every=0.5)
    transport = Scripted(head_after(0.0, body))
    async with Fetcher(
        timeouts=FetchTimeouts(),
        limits=Limits(fetch_max_body_bytes=10),
        transport=transport,
        resolve=public,
    ) as f:
        started = trio.current_time()
        with pytest.raises(FetchError, match="exceeds fetch_max_body_bytes=10"):
            await f.fetch(URL)
    # The 11th byte arrives at 5.5 s.
    assert trio.current_time() - started == pytest.approx(5.5, abs=1e-9)
    assert body.closed


class BreaksAfter(httpx.AsyncByteStream):
    """A body that sends one byte, then breaks (the connection resets mid-body)."""

    def __init__(self) -> None:
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await trio.sleep(1.0)
        yield b"x"
        raise httpx.ReadError("connection reset by peer")

    async def aclose(self) -> None:
        self.closed = True


def body_breaks_then_answers(failures: int) -> Handler:
    async def handler(request: httpx.Request, attempt: int) -> httpx.Response:
        if attempt <= failures:
            return httpx.Response(200, stream=BreaksAfter())
        return httpx.Response(200, text="ok")

    return handler


async def test_a_failed_body_read_of_a_get_is_retried_within_the_total(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Issue 12, point 6: each broken body costs its 1 s, then the retry sleep.
    transport = Scripted(body_breaks_then_answers(2))
    async with fetcher(transport) as f:
        started = trio.current_time()
        response = await f.fetch(URL)
    assert response.text == "ok"
    assert len(transport.requests) == 3
    assert trio.current_time() - started == pytest.approx(1.0 + 0.1 + 1.0 + 0.2, abs=1e-9)


async def test_a_failed_body_read_is_not_retried_for_a_post(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = Scripted(body_breaks_then_answers(1))
    async with fetcher(transport) as f:
        with pytest.raises(FetchError, match="reading the body") as caught:
            await f.fetch(URL, FetchOptions(method="POST", json={"a": 1}))
    assert isinstance(caught.value.__cause__, httpx.ReadError)
    assert len(transport.requests) == 1


async def test_body_retries_give_up_after_the_last_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = Scripted(body_breaks_then_answers(99))
    async with fetcher(transport) as f:
        with pytest.raises(FetchError, match="after 3 attempt") as caught:
            await f.fetch(URL)
    assert isinstance(caught.value.__cause__, httpx.ReadError)
    assert len(transport.requests) == 3


async def test_body_retries_stay_inside_the_total(autojump_clock: trio.testing.MockClock) -> None:
    # Each attempt's body breaks 1 s in: the second at 2.1 s, whose retry
    # sleep (0.2 s) runs into the 2.15 s total.
    transport = Scripted(body_breaks_then_answers(99))
    async with fetcher(transport, total=2.15) as f:
        await expect_timeout(f, "total", 2.15, at=2.15)
    assert len(transport.requests) == 2


class NeverCloses(httpx.AsyncByteStream):
    """A body whose close never returns (a peer that will not let go)."""

    def __init__(self, body: bytes | None) -> None:
        self.body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.body is None:
            await trio.sleep_forever()
        yield self.body or b""

    async def aclose(self) -> None:
        await trio.sleep_forever()


async def test_a_close_that_never_returns_stays_inside_the_total(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The body hangs into the 10 s total, then closing the response hangs
    # too: the fetch still ends at 10 s (it took 11 s, the cleanup timeout
    # past the total).
    async def handler(request: httpx.Request, attempt: int) -> httpx.Response:
        return httpx.Response(200, stream=NeverCloses(None))

    async with fetcher(Scripted(handler), total=10) as f:
        await expect_timeout(f, "total", 10.0, at=10.0)


async def test_a_body_whose_close_hangs_ends_at_the_total(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The whole body is there at 9.5 s, but closing the stream (which httpx
    # does as the body ends) never returns: the fetch ends with the 10 s
    # total, not a cleanup timeout later.
    async def handler(request: httpx.Request, attempt: int) -> httpx.Response:
        await trio.sleep(9.5)
        return httpx.Response(200, stream=NeverCloses(b"ok"))

    async with fetcher(Scripted(handler), total=10) as f:
        await expect_timeout(f, "total", 10.0, at=10.0)
