"""Small doubles shared by the engine tests."""

from __future__ import annotations

import contextlib
import csv
import http.server
import io
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import trio

import trioplay


class CountingTool:
    """An async tool that records every execution and answers from its input."""

    def __init__(self, *, delay: float = 0.0, fail_on: set[str] | None = None) -> None:
        self.executions: Counter[str] = Counter()
        self.idempotency_keys: list[str] = []
        self.delay = delay
        self.fail_on = fail_on or set()

    async def __call__(self, input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        self.executions[str(input.get("domain"))] += 1
        self.idempotency_keys.append(call.idempotency_key)
        if self.delay:
            await trio.sleep(self.delay)
        if input.get("domain") in self.fail_on:
            raise trioplay.ToolExecutionError("no such domain", tool_id=call.tool_id)
        return {"email": f"info@{input['domain']}"}

    @property
    def calls(self) -> int:
        return sum(self.executions.values())


def registry(**tools: Any) -> trioplay.ToolRegistry:
    reg = trioplay.ToolRegistry()
    for name, fn in tools.items():
        reg.add(name, fn)
    return reg


def leads(n: int) -> list[dict[str, str]]:
    return [{"domain": f"d{i}.example"} for i in range(n)]


async def find_email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
    return (await rc.tool("finder", {"domain": row["domain"]}))["email"]


def finder_map(rows: int) -> Any:
    """A play over ``rows`` domains whose one column calls ``finder``."""

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def resolver(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("finder", {"domain": row["domain"]})

        domains = [{"domain": f"d{i}"} for i in range(rows)]
        return await ctx.dataset("s", domains).with_column("x", resolver).run(key="domain")

    return play


class LocalHttpServer:
    """A tiny HTTP/1.1 server on 127.0.0.1 (port 0) that counts requests.

    Every request gets ``200`` with a JSON body naming its path; the test reads
    ``requests`` (method, path) afterwards.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            method, path = head.split(b"\r\n")[0].decode().split(" ")[:2]
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    while len(rest) < int(value):
                        rest += await stream.receive_some(65536)
            self.requests.append((method, path))
            body = json.dumps({"path": path}).encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )


# -- the command line, for real -------------------------------------------------

TRIOPLAY = Path(sys.executable).with_name("trioplay")
"""The installed ``trioplay`` entry point of the environment running the tests."""
CLI_TIMEOUT = 120


def run_trioplay(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``trioplay`` command in a subprocess in ``cwd``; never raises for its exit code."""
    return subprocess.run(
        [str(TRIOPLAY), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
        env={**os.environ, **(env or {})},
    )


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``trioplay ARGS`` in this process, as :func:`run_trioplay` runs it in a subprocess.

    The command line's ``main(argv)``, in ``cwd``, with ``env`` added to the
    environment and stdout and stderr captured: the same exit code and
    output as the command, without a process start (an interpreter and its
    imports) per call. The tests about the process itself (signals, exit on
    a real signal, start-up imports, hash seeds, the installed entry point)
    use :func:`run_trioplay`.
    """
    from trioplay._cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    # The csv module's field limit is one per process, and a CSV source
    # raises it (--limit csv_field_limit): put it back, as the command's
    # process would have taken it away with it.
    field_limit = csv.field_size_limit()
    with (
        mock.patch.dict(os.environ, env or {}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        os.chdir(cwd)
        try:
            code = main(list(args))
        except SystemExit as exc:  # as the process would exit
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os.chdir(here)
            csv.field_size_limit(field_limit)
    return subprocess.CompletedProcess([str(TRIOPLAY), *args], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def json_service() -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 (port 0) for synchronous tests; yields its URL.

    ``GET`` answers ``{"path": ...}``; ``POST`` answers ``{"echo": <the JSON body>}``.
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer({"path": self.path})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            self._answer({"echo": json.loads(self.rfile.read(length) or b"null")})

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# One call hangs in each of the first three pages (page_size 1000) of a
# 5,000-row map: the setup of the straggler tests in test_map and test_stall.
HUNG_IN_THREE_PAGES = frozenset({"d5.example", "d1005.example", "d2005.example"})


def map_with_hung_rows(
    hung: frozenset[str] = HUNG_IN_THREE_PAGES, rows: int = 5000
) -> tuple[Any, trioplay.ToolRegistry]:
    """A play over ``rows`` leads whose finder hangs on ``hung`` and takes 50 ms otherwise."""

    async def finder(input: dict[str, Any], _call: trioplay.ToolCall) -> Any:
        if input["domain"] in hung:
            await trio.sleep_forever()
        await trio.sleep(0.05)
        return {"email": "x@" + input["domain"]}

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (
            await ctx.dataset("s", leads(rows)).with_column("email", find_email).run(key="domain")
        )

    return play, registry(finder=finder)
