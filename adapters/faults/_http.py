"""Hostile HTTP transports: servers that stall their headers or drip their bodies.

An :class:`HostileTransport` is an ``httpx.AsyncBaseTransport``: pass it to
``open_runtime(http_transport=...)`` and every ``fetch`` (and ``HttpTool``)
of the runtime talks to it instead of the network. Its delays are Trio
sleeps, so under ``MockClock`` a header stall of an hour takes no real
time, and the fetch deadlines (``FetchTimeouts``) fire at exact virtual
moments.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import httpx
import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Collection


class HostileTransport(httpx.AsyncBaseTransport):
    """Answers every request with ``status`` and ``body``, slowly.

    - ``header_delay``: seconds before the response headers are sent
      (``math.inf``: never, a server that accepted the request and went
      silent);
    - ``chunk_size`` and ``chunk_delay``: the body is sent ``chunk_size``
      bytes at a time, ``chunk_delay`` seconds apart (a slow drip:
      ``FetchTimeouts.body`` bounds it);
    - ``paths``: only requests whose URL path is in it are hostile; the
      others are answered at once (default: every request is hostile).

    ``requests`` counts the requests received.
    """

    def __init__(
        self,
        *,
        body: bytes = b'{"ok": true}',
        status: int = 200,
        header_delay: float = 0.0,
        chunk_size: int = 1024,
        chunk_delay: float = 0.0,
        paths: Collection[str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        self.body = body
        self.status = status
        self.header_delay = header_delay
        self.chunk_size = chunk_size
        self.chunk_delay = chunk_delay
        self.paths = None if paths is None else frozenset(paths)
        self.content_type = content_type
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        hostile = self.paths is None or request.url.path in self.paths
        if hostile and self.header_delay > 0:
            await trio.sleep(self.header_delay)  # math.inf sleeps forever
        headers = {"content-type": self.content_type, "content-length": str(len(self.body))}
        if not hostile or self.chunk_delay <= 0:
            return httpx.Response(self.status, headers=headers, content=self.body)
        return httpx.Response(
            self.status, headers=headers, stream=_Drip(self.body, self.chunk_size, self.chunk_delay)
        )


class _Drip(httpx.AsyncByteStream):
    def __init__(self, body: bytes, chunk_size: int, delay: float) -> None:
        self._body = body
        self._size = chunk_size
        self._delay = delay

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), self._size):
            await trio.sleep(self._delay)
            yield self._body[start : start + self._size]

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


NEVER = math.inf
"""A header delay that never ends."""
