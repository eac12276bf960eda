"""A TCP proxy on 127.0.0.1 (port 0) that a test or benchmark can break: cut, black-hole, delay.

It runs as a Trio task of its user (``await nursery.start(proxy.serve)``) in
front of one upstream address (the test PostgreSQL server) and forwards
bytes both ways. The faults, each switched on and off while connections
are open:

- :meth:`cut`: close every connection (both sockets) and refuse new ones
  (accepted, then closed at once) until :meth:`restore`;
- :meth:`black_hole`: forward nothing, close nothing, and hold new
  connections open without connecting them upstream: a peer that went
  silent. The kernel still acknowledges what the client sends, so TCP
  keepalives and ``tcp_user_timeout`` see a live peer; only the client's
  own deadline can notice. A client that hangs up still ends its link (the
  server sees it go). :meth:`restore` lets the held bytes through;
- :meth:`delay`: hold every chunk ``seconds`` after it arrived before
  forwarding it, in order (the chunks of one direction travel pipelined, as
  over a long link, not one after another).

``links`` is the number of client connections open now.
"""

from __future__ import annotations

import trio


class FaultyProxy:
    """Forwards ``127.0.0.1:port`` (port 0: :attr:`port` once served) to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._links: set[trio.CancelScope] = set()
        self._flowing = trio.Event()
        self._flowing.set()
        self._cut = False
        self._delay = 0.0
        self.port = 0

    @property
    def links(self) -> int:
        return len(self._links)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._link, listeners)

    # -- the faults ---------------------------------------------------------
    def cut(self) -> None:
        self._cut = True
        for link in list(self._links):
            link.cancel()

    def black_hole(self) -> None:
        if self._flowing.is_set():
            self._flowing = trio.Event()

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def restore(self) -> None:
        """No fault any more: new connections are served, held bytes flow, no delay."""
        self._cut = False
        self._delay = 0.0
        self._flowing.set()

    # -- forwarding ---------------------------------------------------------
    async def _until_flowing(self) -> None:
        while not self._flowing.is_set():
            await self._flowing.wait()

    async def _link(self, client: trio.SocketStream) -> None:
        async with client:
            if self._cut:
                return
            with trio.CancelScope() as link:
                self._links.add(link)
                try:
                    await self._until_flowing()
                    upstream = await trio.open_tcp_stream(*self._target)
                    async with upstream, trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, client, upstream, link)
                        nursery.start_soon(self._pump, upstream, client, link)
                finally:
                    self._links.discard(link)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, link: trio.CancelScope
    ) -> None:
        # A reader stamps each chunk with when it is due; a writer forwards it
        # then. The bounded channel keeps TCP's backpressure.
        send, receive = trio.open_memory_channel[tuple[float, bytes]](16)

        async def read() -> None:
            async with send:
                try:
                    while data := await source.receive_some(65536):
                        await send.send((trio.current_time() + self._delay, data))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                if not self._flowing.is_set():
                    link.cancel()  # a black hole forwards nothing, not even the hang-up

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            try:
                async for due, data in receive:
                    await trio.sleep_until(due)
                    await self._until_flowing()
                    await sink.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        link.cancel()  # either side hanging up ends the link
