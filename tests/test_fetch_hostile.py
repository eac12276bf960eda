"""fetch against hostile servers on real sockets: every wait ends on time.

Each server is a raw Trio TCP server on 127.0.0.1 (port 0) that controls the
bytes and their timing itself. Each case asserts the outcome and that the
elapsed time is the deadline that should have ended it, on Trio's virtual
clock (``autojump_clock``): server and client share the process's one Trio
loop, and the clock jumps only when every task waits and no socket has bytes
to read, so the sockets are real and the seconds exact however busy the
machine is.
"""

from __future__ import annotations

import functools
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

from trioplay import FetchError, FetchTimeout, FetchTimeouts, Limits
from trioplay._fetch import Fetcher, FetchOptions

GUARD = 5.0  # no case may take longer than this, whatever goes wrong
LOCAL = ["127.0.0.0/8"]


@attrs.define
class Server:
    """What a test server saw: connections accepted, and whether the client hung up."""

    port: int = 0
    connections: int = 0
    peer_closed: trio.Event = attrs.Factory(trio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/resource"


Behaviour = Callable[[trio.SocketStream, Server], Awaitable[None]]


@asynccontextmanager
async def serve(behaviour: Behaviour) -> AsyncIterator[Server]:
    server = Server()

    async def handle(stream: trio.SocketStream) -> None:
        server.connections += 1
        await read_request(stream)
        await behaviour(stream, server)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


async def read_request(stream: trio.SocketStream) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            while len(body) < int(value):
                body += await stream.receive_some()


async def wait_for_hangup(stream: trio.SocketStream, server: Server) -> None:
    """Read until the client closes its end, then record that it did."""
    try:
        while await stream.receive_some():
            pass
    except trio.BrokenResourceError:
        pass  # a reset is a hang-up too
    server.peer_closed.set()


async def never_answer(stream: trio.SocketStream, server: Server) -> None:
    await wait_for_hangup(stream, server)


def drip(*, head_after: float = 0.0) -> Behaviour:
    """Send the head after ``head_after`` seconds, then one body byte every 100 ms."""

    async def behaviour(stream: trio.SocketStream, server: Server) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_hangup, stream, server)
            await trio.sleep(head_after)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            while not server.peer_closed.is_set():
                await stream.send_all(b"x")
                await trio.sleep(0.1)

    return behaviour


def fetcher(limits: Limits | None = None, **timeouts: float) -> Fetcher:
    return Fetcher(
        timeouts=FetchTimeouts(**timeouts), limits=limits or Limits(), allow_networks=LOCAL
    )


def assert_elapsed(started: float, expected: float) -> None:
    elapsed = trio.current_time() - started
    assert elapsed == pytest.approx(expected, abs=1e-9), (elapsed, expected)


async def test_server_that_never_sends_headers_times_out_in_the_headers_phase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(GUARD):
        async with serve(never_answer) as server, fetcher(headers=0.3, body=5, total=5) as f:
            started = trio.current_time()
            with pytest.raises(FetchTimeout) as caught:
                await f.fetch(server.url)
            assert_elapsed(started, 0.3)
            assert (caught.value.phase, caught.value.timeout) == ("headers", 0.3)
            assert "[CTX_FETCH_TIMEOUT phase=headers timeout_ms=300]" in str(caught.value)
            with trio.fail_after(1):
                await server.peer_closed.wait()


async def test_body_dripping_one_byte_per_100ms_times_out_in_the_body_phase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(GUARD):
        async with serve(drip()) as server, fetcher(headers=1, body=0.4, total=5) as f:
            started = trio.current_time()
            with pytest.raises(FetchTimeout) as caught:
                await f.fetch(server.url)
            assert_elapsed(started, 0.4)
            assert (caught.value.phase, caught.value.timeout) == ("body", 0.4)
            with trio.fail_after(1):
                await server.peer_closed.wait()


async def test_total_binds_first_during_the_body(autojump_clock: trio.testing.MockClock) -> None:
    # The body phase starts at 0.3 s with min(0.5, 0.3 remaining): the total binds.
    with trio.fail_after(GUARD):
        async with (
            serve(drip(head_after=0.3)) as server,
            fetcher(headers=0.5, body=0.5, total=0.6) as f,
        ):
            started = trio.current_time()
            with pytest.raises(FetchTimeout) as caught:
                await f.fetch(server.url)
            assert_elapsed(started, 0.6)
            assert (caught.value.phase, caught.value.timeout) == ("total", 0.6)


async def test_total_binds_first_while_waiting_for_headers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(GUARD):
        async with serve(never_answer) as server, fetcher(headers=1, body=1, total=0.4) as f:
            started = trio.current_time()
            with pytest.raises(FetchTimeout) as caught:
                await f.fetch(server.url)
            assert_elapsed(started, 0.4)
            assert (caught.value.phase, caught.value.timeout) == ("total", 0.4)


async def reset_twice_then_answer(stream: trio.SocketStream, server: Server) -> None:
    if server.connections <= 2:
        # SO_LINGER with a zero timeout turns close() into a TCP reset.
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()
        return
    await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    await wait_for_hangup(stream, server)


async def test_get_survives_two_resets_on_its_third_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(GUARD):
        async with serve(reset_twice_then_answer) as server, fetcher() as f:
            started = trio.current_time()
            response = await f.fetch(server.url)
            # Sleeps of 0.1 s × attempt between the three attempts.
            assert_elapsed(started, 0.1 + 0.2)
            assert (response.status, response.text) == (200, "hello")
            assert server.connections == 3


async def test_post_fails_after_one_reset_without_retrying(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(GUARD):
        async with serve(reset_twice_then_answer) as server, fetcher() as f:
            started = trio.current_time()
            with pytest.raises(FetchError, match="after 1 attempt") as caught:
                await f.fetch(server.url, FetchOptions(method="POST", json={"n": 1}))
            assert_elapsed(started, 0.0)
            assert caught.value.__cause__ is not None
            await trio.sleep(0.2)  # room for a retry that must not come
            assert server.connections == 1


async def chunked_flood(stream: trio.SocketStream, server: Server) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for_hangup, stream, server)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(20):
                await stream.send_all(b"1f4\r\n" + b"y" * 500 + b"\r\n")
                await trio.sleep(0.01)
        except trio.BrokenResourceError:
            pass  # the client hung up, as it should


async def test_body_over_the_cap_fails_cleanly_while_streaming(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = Limits(fetch_max_body_bytes=2000)
    with trio.fail_after(GUARD):
        async with serve(chunked_flood) as server, fetcher(limits) as f:
            started = trio.current_time()
            with pytest.raises(FetchError, match="exceeds fetch_max_body_bytes=2000"):
                await f.fetch(server.url)
            # Five 500-byte chunks, 10 ms apart, cross the cap.
            assert_elapsed(started, 0.04)
            with trio.fail_after(1):
                await server.peer_closed.wait()


async def test_caller_cancelling_mid_body_propagates_and_closes_the_socket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(GUARD):
        async with serve(drip()) as server, fetcher(headers=5, body=5, total=5) as f:
            started = trio.current_time()
            with trio.move_on_after(0.3) as caller:
                await f.fetch(server.url)  # a FetchTimeout would escape the scope
            assert caller.cancelled_caught
            assert_elapsed(started, 0.3)
            with trio.fail_after(1):
                await server.peer_closed.wait()
