"""HttpTool against a real local server: one test per status mapping, and the batch wire.

The server is a raw Trio HTTP/1.1 server on 127.0.0.1 (port 0) whose answer
to each request is decided by the test; the runtime reaches it through
``allow_networks=["127.0.0.0/8"]``. Every test is bounded by conftest's
deadline, and the ones that wait on purpose carry a tighter guard of their own.
"""

from __future__ import annotations

import functools
import json
import math
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from email.utils import formatdate
from typing import Any

import attrs
import pytest
import trio

import trioplay
from trioplay.adapters import HttpTool
from trioplay.adapters.http import parse_retry_after
from trioplay.stores.memory import MemoryStore

LOCAL = ["127.0.0.0/8"]
GUARD = 10.0


@attrs.frozen
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@attrs.frozen
class Reply:
    status: int = 200
    body: bytes | str | Any = b"{}"
    headers: tuple[tuple[str, str], ...] = ()
    reason: str = "X"

    def encode(self) -> bytes:
        if isinstance(self.body, bytes):
            body = self.body
        elif isinstance(self.body, str):
            body = self.body.encode()
        else:
            body = json.dumps(self.body).encode()
        head = [f"HTTP/1.1 {self.status} {self.reason}", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in self.headers]
        head.append("Connection: close")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body


RESET = "reset"  # close the connection with a TCP reset instead of answering
HANG = "hang"  # never answer
Answer = Reply | str
Handler = Callable[[Request], Answer]


@attrs.define
class Server:
    """A local server that answers each request with ``handler(request)`` and keeps them."""

    handler: Handler
    port: int = 0
    requests: list[Request] = attrs.Factory(list)

    def url(self, path: str = "/find") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            request = await read_request(stream)
            if request is None:
                return
            self.requests.append(request)
            answer = self.handler(request)
            if answer == RESET:
                # SO_LINGER with a zero timeout turns close() into a TCP reset.
                stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if answer == HANG:
                await trio.sleep_forever()
            assert isinstance(answer, Reply)
            await stream.send_all(answer.encode())


async def read_request(stream: trio.SocketStream) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    method, path = first.split(" ")[:2]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    while len(body) < int(headers.get("content-length", "0")):
        body += await stream.receive_some()
    return Request(method, path, headers, body)


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[Server]:
    server = Server(handler)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


def answer(reply: Answer) -> Handler:
    return lambda _request: reply


def tools(*http_tools: HttpTool) -> trioplay.ToolRegistry:
    registry = trioplay.ToolRegistry()
    for tool in http_tools:
        registry.add_tool(tool)
    return registry


@trioplay.play("lookup")
async def lookup(ctx: trioplay.PlayContext, input: dict[str, Any]) -> Any:
    return await ctx.tool("finder", input)


async def run_lookup(
    tool: HttpTool, input: dict[str, Any], *, store: trioplay.Store | None = None
) -> Any:
    async with trioplay.open_runtime(
        store=store or MemoryStore(), tools=tools(tool), allow_networks=LOCAL
    ) as rt:
        return await rt.run(lookup, input, run_id="r")


async def fails_with(
    error: type[BaseException], tool: HttpTool, *, store: trioplay.Store | None = None
) -> Any:
    with pytest.raises(error) as caught:
        await run_lookup(tool, {"domain": "acme.example"}, store=store)
    return caught.value


# -- 2xx ----------------------------------------------------------------------
async def test_200_json_becomes_the_result() -> None:
    reply = Reply(
        200, {"data": {"email": "info@acme.example"}}, (("Content-Type", "application/json"),)
    )
    async with serve(answer(reply)) as server:
        tool = HttpTool(
            tool_id="finder",
            url=server.url(),
            headers={"X-Client": "tests"},
            result=lambda body: body["data"]["email"],
        )
        assert await run_lookup(tool, {"domain": "acme.example"}) == "info@acme.example"
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/find")
    assert request.json == {"domain": "acme.example"}
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-client"] == "tests"
    assert len(request.headers["idempotency-key"]) == 32


async def test_non_json_200_is_a_recorded_tool_execution_error() -> None:
    async with serve(answer(Reply(200, "<html>oops</html>"))) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        store = MemoryStore()
        error = await fails_with(trioplay.ToolExecutionError, tool, store=store)
        assert "200" in str(error)
        assert "not JSON" in str(error)
        assert "<html>oops</html>" in str(error)
        assert error.tool_id == "finder"
        again = await fails_with(trioplay.ToolExecutionError, tool, store=store)
        assert str(again) == str(error)
    assert len(server.requests) == 1


# -- 429 ----------------------------------------------------------------------
async def test_429_with_retry_after_seconds_is_a_rate_limit() -> None:
    reply = Reply(429, "slow down", (("Retry-After", "2"),))
    async with serve(answer(reply)) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        store = MemoryStore()
        error = await fails_with(trioplay.ProviderTransientError, tool, store=store)
        assert (error.category, error.retry_after, error.tool_id) == ("rate_limit", 2.0, "finder")
        assert "429" in str(error)
        # Not recorded as a failure: the next run calls again.
        await fails_with(trioplay.ProviderTransientError, tool, store=store)
    assert len(server.requests) == 2


async def test_429_with_an_http_date_retry_after() -> None:
    reply = Reply(429, "", (("Retry-After", formatdate(time.time() + 30, usegmt=True)),))
    async with serve(answer(reply)) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        error = await fails_with(trioplay.ProviderTransientError, tool)
    assert error.category == "rate_limit"
    # An HTTP-date has whole seconds, and a moment passed since it was written.
    assert 28.0 <= error.retry_after <= 30.0


async def test_a_429_pauses_the_providers_rate_bucket() -> None:
    def handler(request: Request) -> Answer:
        if request.json["domain"] == "busy.example":
            return Reply(429, "", (("Retry-After", "0.5"),))
        return Reply(200, {"ok": True})

    @trioplay.play("pause")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        with pytest.raises(trioplay.ProviderTransientError):
            await ctx.tool("finder", {"domain": "busy.example"})
        paused_at = trio.current_time()
        await ctx.tool("finder", {"domain": "acme.example"})
        return trio.current_time() - paused_at

    with trio.fail_after(GUARD):
        async with serve(handler) as server:
            tool = HttpTool(tool_id="finder", url=server.url(), rate=trioplay.Rate(100))
            async with trioplay.open_runtime(
                store=MemoryStore(), tools=tools(tool), allow_networks=LOCAL
            ) as rt:
                waited = await rt.run(play, {}, run_id="r")
    assert waited >= 0.45


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(formatdate(now + 120, usegmt=True), now=now) == 120.0
    assert parse_retry_after(formatdate(now - 120, usegmt=True), now=now) == 0.0
    for unreadable in (None, "", "-1", "nan", "inf", "soon", "Mon, 99 Foo 2024"):
        assert parse_retry_after(unreadable, now=now) is None, unreadable


# -- 5xx ----------------------------------------------------------------------
@pytest.mark.parametrize("status", [500, 503])
async def test_5xx_is_an_upstream_error(status: int) -> None:
    async with serve(answer(Reply(status, "database on fire"))) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        error = await fails_with(trioplay.ProviderTransientError, tool)
    assert error.category == "upstream"
    assert str(status) in str(error)
    assert "database on fire" in str(error)
    assert len(server.requests) == 1


# -- transport ----------------------------------------------------------------
async def test_connection_reset_is_a_network_error() -> None:
    async with serve(answer(RESET)) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        error = await fails_with(trioplay.ProviderTransientError, tool)
    assert error.category == "network"
    assert isinstance(error.__cause__, trioplay.FetchError)
    assert len(server.requests) == 1  # POST: no transport retry


async def test_fetch_deadline_is_a_network_error() -> None:
    with trio.fail_after(GUARD):
        async with serve(answer(HANG)) as server:
            tool = HttpTool(
                tool_id="finder",
                url=server.url(),
                timeouts=trioplay.FetchTimeouts(headers=0.2, body=1, total=1),
            )
            error = await fails_with(trioplay.ProviderTransientError, tool)
    assert error.category == "network"
    assert isinstance(error.__cause__, trioplay.FetchTimeout)
    assert error.__cause__.phase == "headers"


async def test_a_refused_destination_is_recorded_not_retried() -> None:
    # No allow_networks: the loopback server is off limits, a permanent failure.
    tool = HttpTool(tool_id="finder", url="http://127.0.0.1:9/find")
    store = MemoryStore()
    async with trioplay.open_runtime(store=store, tools=tools(tool)) as rt:
        with pytest.raises(trioplay.UnsafeOutboundUrl):
            await rt.run(lookup, {"domain": "acme.example"}, run_id="r")
    assert (await store.count_receipts("r")).get("failed") == 1


# -- other 4xx ----------------------------------------------------------------
@pytest.mark.parametrize("status", [400, 404, 422])
async def test_4xx_is_recorded_and_replayed_without_a_request(status: int) -> None:
    body = {"error": "no such domain", "detail": "x" * 1000}
    async with serve(answer(Reply(status, body))) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        store = MemoryStore()
        error = await fails_with(trioplay.ToolExecutionError, tool, store=store)
        assert f"answered {status} " in str(error)
        assert "no such domain" in str(error)
        assert len(str(error)) < 400  # an excerpt, not the whole body
        assert error.tool_id == "finder"
        again = await fails_with(trioplay.ToolExecutionError, tool, store=store)
        assert str(again) == str(error)
    assert len(server.requests) == 1


async def test_the_error_excerpt_is_short_and_redacted() -> None:
    # Over https a Secret may be sent; a fake fetch stands in for the server
    # that echoes it back.
    token = "sk-live-0123456789abcdef"

    async def echoing_fetch(url: str, **options: Any) -> trioplay.FetchResponse:
        assert options["auth"].value == token
        text = f"invalid token {token} " + "y" * 5000
        return trioplay.FetchResponse(status=401, headers=(), text=text, url=url)

    tool = HttpTool(tool_id="finder", url="https://api.example/find", auth=trioplay.Secret(token))
    call = trioplay.ToolCall("finder", "k1", 1, math.inf, fetch=echoing_fetch)
    with pytest.raises(trioplay.ToolExecutionError) as caught:
        await tool({"domain": "acme.example"}, call)
    message = str(caught.value)
    assert "401 Unauthorized" in message
    assert token not in message
    assert "invalid token [REDACTED]" in message
    assert len(message) < 400


# -- idempotency ---------------------------------------------------------------
async def test_idempotency_key_is_stable_across_a_retry_of_the_same_receipt() -> None:
    replies = iter([Reply(503, "busy"), Reply(200, {"email": "a@acme.example"})])
    async with serve(lambda _request: next(replies)) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        store = MemoryStore()
        error = await fails_with(trioplay.ProviderTransientError, tool, store=store)
        assert error.category == "upstream"
        assert await run_lookup(tool, {"domain": "acme.example"}, store=store) == {
            "email": "a@acme.example"
        }
        first, second = server.requests
        assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
        # Completed now: a third run replays without a request.
        await run_lookup(tool, {"domain": "acme.example"}, store=store)
    assert len(server.requests) == 2


async def test_different_inputs_get_different_idempotency_keys() -> None:
    async with serve(answer(Reply(200, {}))) as server:
        tool = HttpTool(tool_id="finder", url=server.url())
        await run_lookup(tool, {"domain": "a.example"})
        await run_lookup(tool, {"domain": "b.example"})
    keys = {request.headers["idempotency-key"] for request in server.requests}
    assert len(keys) == 2


# -- secrets ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "secret_options",
    [
        {"auth": trioplay.Secret("tok")},
        {"headers": {"X-Api-Key": trioplay.Secret("tok")}},
    ],
)
async def test_a_secret_over_http_is_refused_before_connecting(
    secret_options: dict[str, Any],
) -> None:
    async with serve(answer(Reply(200, {}))) as server:
        with pytest.raises(trioplay.PlayDefinitionError, match=r"plain http.*https://"):
            HttpTool(tool_id="finder", url=server.url(), **secret_options)
        with pytest.raises(trioplay.PlayDefinitionError, match="batch_url"):
            HttpTool(
                tool_id="finder",
                url=server.url().replace("http:", "https:"),
                batch_url=server.url("/batch"),
                **secret_options,
            )
    assert server.requests == []
    # Over https the same tool is fine.
    HttpTool(tool_id="finder", url="https://api.example/find", **secret_options)


def test_tool_spec_declares_the_batch_only_with_a_batch_url() -> None:
    single = HttpTool(tool_id="a", url="https://api.example/find").tool_spec()
    assert (single.tool_id, single.provider, single.batch) == ("a", "a", None)
    tool = HttpTool(
        tool_id="b",
        url="https://api.example/find",
        batch_url="https://api.example/batch",
        batch_max=25,
        provider="acme",
        concurrency=4,
    )
    spec = tool.tool_spec()
    assert spec.batch == tool.batch
    assert (spec.batch_max, spec.provider, spec.concurrency) == (25, "acme", 4)
    with pytest.raises(trioplay.PlayDefinitionError, match="batch_max needs a batch_url"):
        HttpTool(tool_id="c", url="https://api.example/find", batch_max=3)


# -- batch -------------------------------------------------------------------------
def batch_answers(request: Request) -> Answer:
    """A batch endpoint: ``bad`` fails for good, ``later`` may succeed later."""
    results: list[dict[str, Any]] = []
    for item in request.json["items"]:
        domain = item["input"]["domain"]
        if domain == "bad":
            results.append({"ok": False, "error": "no such domain", "retryable": False})
        elif domain == "later":
            results.append({"ok": False, "error": "try again", "retryable": True})
        else:
            results.append({"ok": True, "result": {"email": f"info@{domain}"}})
    return Reply(200, {"results": results})


def fake_calls(fetch: Any, n: int) -> list[trioplay.ToolCall]:
    return [trioplay.ToolCall("finder", f"key-{i}", 1, math.inf, fetch=fetch) for i in range(n)]


async def call_batch(
    handler: Handler, domains: list[str], **options: Any
) -> tuple[list[Any], Server]:
    async with (
        serve(handler) as server,
        trioplay.open_runtime(store=MemoryStore(), allow_networks=LOCAL) as rt,
    ):
        tool = HttpTool(
            tool_id="finder",
            url=server.url(),
            batch_url=server.url("/batch"),
            result=lambda body: body["email"],
            **options,
        )
        inputs = [{"domain": domain} for domain in domains]
        results = await tool.batch(inputs, fake_calls(rt.raw_fetch, len(inputs)))
    return results, server


async def test_batch_splits_results_and_isolates_a_member_error() -> None:
    results, server = await call_batch(batch_answers, ["a.example", "bad", "later", "b.example"])
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/batch")
    assert request.json == {
        "items": [
            {"idempotency_key": "key-0", "input": {"domain": "a.example"}},
            {"idempotency_key": "key-1", "input": {"domain": "bad"}},
            {"idempotency_key": "key-2", "input": {"domain": "later"}},
            {"idempotency_key": "key-3", "input": {"domain": "b.example"}},
        ]
    }
    assert len(request.headers["idempotency-key"]) == 32
    ok_a, bad, later, ok_b = results
    assert (ok_a, ok_b) == ("info@a.example", "info@b.example")
    assert isinstance(bad, trioplay.ToolExecutionError)
    assert "no such domain" in str(bad)
    assert isinstance(later, trioplay.ProviderTransientError)
    assert later.category == "upstream"


async def test_batch_max_splits_into_requests_and_keeps_the_order() -> None:
    domains = [f"d{i}.example" for i in range(5)]
    results, server = await call_batch(batch_answers, domains, batch_max=2)
    assert results == [f"info@{domain}" for domain in domains]
    sizes = sorted(len(request.json["items"]) for request in server.requests)
    assert sizes == [1, 2, 2]


async def test_a_failed_batch_request_fails_every_member_on_its_own() -> None:
    results, _ = await call_batch(answer(Reply(429, "", (("Retry-After", "3"),))), ["a", "b"])
    assert all(isinstance(r, trioplay.ProviderTransientError) for r in results)
    assert [(r.category, r.retry_after) for r in results] == [("rate_limit", 3.0)] * 2
    assert results[0] is not results[1]


async def test_a_malformed_batch_answer_fails_every_member() -> None:
    one_result = Reply(200, {"results": [{"ok": True, "result": {"email": "x"}}]})
    results, _ = await call_batch(answer(one_result), ["a", "b"])
    assert all(isinstance(r, trioplay.ToolExecutionError) for r in results)
    assert "1 results for 2 items" in str(results[0])


async def test_a_malformed_member_fails_alone_and_is_shown_in_its_error() -> None:
    # The entry is shown as canonical JSON, or as Python reads it when JSON
    # has no canonical spelling for it (NaN).
    entries = [{"ok": True, "result": {"email": "x"}}, {"b": 1, "a": "é"}, ["ok", math.nan]]
    results, _ = await call_batch(answer(Reply(200, {"results": entries})), ["a", "b", "c"])
    assert results[0] == "x"
    assert isinstance(results[1], trioplay.ToolExecutionError)
    assert str(results[1]).endswith('batch result 1 is malformed: {"a":"é","b":1}')
    assert isinstance(results[2], trioplay.ToolExecutionError)
    assert str(results[2]).endswith("batch result 2 is malformed: ['ok', nan]")


async def test_a_reset_during_a_batch_is_a_network_error_for_every_member() -> None:
    results, _ = await call_batch(answer(RESET), ["a", "b"])
    assert [r.category for r in results] == ["network", "network"]


async def test_single_calls_of_a_batch_tool_go_to_the_single_url() -> None:
    reply = Reply(200, {"email": "info@acme.example"})
    async with serve(answer(reply)) as server:
        tool = HttpTool(
            tool_id="finder",
            url=server.url(),
            batch_url=server.url("/batch"),
            result=lambda body: body["email"],
        )
        call = fake_calls(None, 1)[0]
        with pytest.raises(TypeError, match=r"needs ToolCall\.fetch"):
            await tool({"domain": "acme.example"}, call)
        async with trioplay.open_runtime(store=MemoryStore(), allow_networks=LOCAL) as rt:
            call = fake_calls(rt.raw_fetch, 1)[0]
            assert await tool({"domain": "acme.example"}, call) == "info@acme.example"
    assert [request.path for request in server.requests] == ["/find"]
