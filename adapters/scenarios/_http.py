"""Scenarios of hostile HTTP servers: a body that drips, headers that never come."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trioplay import FetchTimeouts
from trioplay.scenario import Cause, Expect, Rows, Scenario, Setup

from ..faults import NEVER, HostileTransport
from ._common import leads, map_play

if TYPE_CHECKING:
    from trioplay import Row, RowContext

HOSTILE_ROW = "d3.example"


async def _fetch_profile(row: Row, rc: RowContext) -> Any:
    path = "/hostile" if row["domain"] == HOSTILE_ROW else "/ok"
    return (await rc.fetch(f"http://127.0.0.1{path}?domain={row['domain']}")).status


def _setup(name: str, transport: HostileTransport, timeouts: FetchTimeouts) -> Setup:
    return Setup(
        play=map_play(name, leads(20), ("status", _fetch_profile)),
        http_transport=transport,
        allow_networks=["127.0.0.0/8"],
        fetch_timeouts=timeouts,
    )


# The hostile row's fetch stalls its page (phase fetch) until a deadline fails it.
HOSTILE_ROW_TIMES_OUT = Expect(
    rows=Rows(completed=19, failed=1, failed_with="FetchTimeout"),
    stall=Cause(phase="fetch", tool="fetch"),
)


def _slow_body(_seed: int) -> Setup:
    # 4 KiB, 256 bytes every 10 s: 160 s to send, the body deadline is 120 s.
    drip = HostileTransport(
        body=b'{"pad": "' + b"x" * 4084 + b'"}',
        chunk_size=256,
        chunk_delay=10.0,
        paths={"/hostile"},
    )
    return _setup("slow-body", drip, FetchTimeouts(headers=30, body=120, total=600))


SLOW_BODY = Scenario(
    name="slow-body",
    description="one server drips its body 256 bytes per 10 s: the fetch's body deadline ends it",
    setup=_slow_body,
    expect=HOSTILE_ROW_TIMES_OUT,
)


def _header_stall(_seed: int) -> Setup:
    silent = HostileTransport(header_delay=NEVER, paths={"/hostile"})
    return _setup("header-stall", silent, FetchTimeouts(headers=150, body=30, total=600))


HEADER_STALL = Scenario(
    name="header-stall",
    description=(
        "one server accepts the request and never sends headers: the headers deadline ends it"
    ),
    setup=_header_stall,
    expect=HOSTILE_ROW_TIMES_OUT,
)
