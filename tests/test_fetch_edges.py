"""Four fetch edges found against a real httpbin (issue 25, point 5), each against a
raw server on 127.0.0.1 (port 0): a port above 65535, the HTTP client built off
the event loop, a Content-Encoding the client cannot decode, and binary bodies.
"""

from __future__ import annotations

import base64
import functools
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel

import trioplay
from trioplay import FetchError, FetchTimeouts, Limits
from trioplay._fetch import Fetcher, FetchOptions, FetchResponse, request_identity
from trioplay.adapters.http import HttpTool
from trioplay.stores.memory import MemoryStore

GUARD = 10.0
LOCAL = ["127.0.0.0/8"]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00\x80"


@attrs.define
class Server:
    port: int = 0
    connections: int = 0


@asynccontextmanager
async def serve(head: bytes, body: bytes) -> AsyncIterator[Server]:
    """A server answering every request with ``head`` (its Content-Length added) and ``body``."""
    server = Server()

    async def handle(stream: trio.SocketStream) -> None:
        server.connections += 1
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        length = f"Content-Length: {len(body)}\r\n".encode()
        await stream.send_all(head + length + b"Connection: close\r\n\r\n" + body)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


def fetcher() -> Fetcher:
    return Fetcher(timeouts=FetchTimeouts(total=5), limits=Limits(), allow_networks=LOCAL)


async def test_a_port_above_65535_is_an_invalid_url_and_nothing_is_sent() -> None:
    with trio.fail_after(GUARD):
        async with serve(b"HTTP/1.1 200 OK\r\n", b"hi") as server, fetcher() as f:
            # The port that wraps to the server's own modulo 65536.
            wrapped = server.port + 65536
            with pytest.raises(FetchError, match=f"invalid URL: port {wrapped} is out of range"):
                await f.fetch(f"http://127.0.0.1:{wrapped}/x")
            with pytest.raises(FetchError, match="invalid URL"):
                request_identity(f"http://127.0.0.1:{wrapped}/x")
            assert server.connections == 0
            # The same port, in range, is reached.
            assert (await f.fetch(f"http://127.0.0.1:{server.port}/x")).text == "hi"


async def test_a_redirect_to_a_port_above_65535_is_refused() -> None:
    with trio.fail_after(GUARD):
        head = b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:99999/x\r\n"
        async with serve(head, b"") as server, fetcher() as f:
            with pytest.raises(FetchError, match="redirect to an invalid URL: port 99999"):
                await f.fetch(f"http://127.0.0.1:{server.port}/start")


def test_an_http_tool_with_a_port_above_65535_is_refused_at_once() -> None:
    with pytest.raises(trioplay.PlayDefinitionError, match="port 70000 is out of range"):
        HttpTool(tool_id="t", url="http://127.0.0.1:70000/lookup")


async def test_the_client_and_its_tls_context_are_built_off_the_event_loop() -> None:
    # Building an httpx client loads the CA certificates (tens of ms of CPU,
    # hundreds on a slow machine). On the loop, nothing else runs meanwhile:
    # a task that only checkpoints would not run once.
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            await trio.lowlevel.checkpoint()
            before = ticks
            built = fetcher()  # nothing built yet: no deadline can be running
            async with built:
                during = ticks - before
            nursery.cancel_scope.cancel()
    assert during > 0


async def test_a_fetch_deadline_starts_after_the_client_is_built() -> None:
    # The runtime builds its client on the first fetch, before that fetch's
    # deadlines start: a total of 50 ms is the request's, however slow the build.
    tools = trioplay.ToolRegistry()

    @trioplay.play("one")
    async def one(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
        response = await ctx.fetch(input["url"], timeouts=FetchTimeouts(total=0.05))
        return response.text

    with trio.fail_after(GUARD):
        async with serve(b"HTTP/1.1 200 OK\r\n", b"quick") as server:
            url = f"http://127.0.0.1:{server.port}/x"
            async with trioplay.open_runtime(
                store=MemoryStore(), tools=tools, allow_networks=LOCAL
            ) as rt:
                assert await rt.run(one, {"url": url}) == "quick"


@pytest.mark.parametrize("encoding", ["br", "zstd", "x-custom", "gzip, snappy"])
async def test_a_body_in_an_encoding_the_client_cannot_decode_is_a_fetch_error(
    encoding: str,
) -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Encoding: {encoding}\r\n".encode()
    unknown = encoding.split(", ")[-1]
    with trio.fail_after(GUARD):
        async with serve(head, b"\x1b\x00\x00\x00compressed") as server, fetcher() as f:
            with pytest.raises(FetchError, match=f"Content-Encoding '{unknown}'"):
                await f.fetch(f"http://127.0.0.1:{server.port}/x")


async def test_a_gzip_body_is_decoded() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Type: text/plain\r\n"
    with trio.fail_after(GUARD):
        async with serve(head, gzip.compress(b"plain text")) as server, fetcher() as f:
            response = await f.fetch(f"http://127.0.0.1:{server.port}/x")
    assert (response.text, response.content) == ("plain text", b"plain text")


async def test_a_binary_body_is_kept_as_bytes_and_replayed_as_bytes() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
    tools = trioplay.ToolRegistry()

    @trioplay.play("image")
    async def image(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
        response = await ctx.fetch(input["url"])
        return base64.b64encode(response.content).decode()

    store = MemoryStore()
    with trio.fail_after(GUARD):
        async with serve(head, PNG) as server:
            url = f"http://127.0.0.1:{server.port}/image.png"
            async with fetcher() as f:
                fetched = await f.fetch(url)
            assert fetched.content == PNG
            assert "\ufffd" in fetched.text  # the text view cannot hold it
            # Through a receipt, and replayed from it: the same bytes.
            record = fetched.to_record()
            assert base64.b64decode(record["content_base64"]) == PNG
            assert FetchResponse.from_record(record) == fetched
            for _ in range(2):
                async with trioplay.open_runtime(
                    store=store, tools=tools, allow_networks=LOCAL
                ) as rt:
                    shown = await rt.run(image, {"url": url}, run_id="r")
                assert base64.b64decode(shown) == PNG
            assert server.connections == 2  # the fetch above, and the first run's


def test_a_text_body_stores_no_second_copy() -> None:
    response = FetchResponse(status=200, headers=(), text="héllo", url="http://x/")
    assert response.content == "héllo".encode()
    assert "content_base64" not in response.to_record()
    # A receipt written before content existed replays its text as UTF-8.
    old = {"status": 200, "headers": [], "text": "héllo", "url": "http://x/"}
    assert FetchResponse.from_record(old) == response


async def test_a_secret_echoed_in_a_binary_body_is_redacted_in_its_bytes() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    with trio.fail_after(GUARD):
        async with serve(head, b"\xff\x00tok-123\xfe") as server, fetcher() as f:
            f.prepare("https://api.example/", FetchOptions(auth=trioplay.Secret("tok-123")))
            response = await f.fetch(f"http://127.0.0.1:{server.port}/x")
    assert response.content == b"\xff\x00[REDACTED]\xfe"
