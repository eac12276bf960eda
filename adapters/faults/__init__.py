"""Fault injection for scenarios and tests: every fault seeded, every delay in Trio time.

- :class:`RateLimitStorm`: a tool that answers 429 with ``Retry-After`` for a while;
- :class:`Scheduled`: a tool whose latency and failure rate change on a schedule;
  latency distributions and hangs are :class:`~trioplay.adapters.SimulatedProvider`'s
- :class:`HostileTransport`: HTTP that stalls its headers or drips its body
- :class:`SlowStore`, :class:`StoreOutage`, :class:`LeaseRejection`,
  :class:`DispatcherCrash`, :class:`HeldElsewhere`, :class:`PeerTakeover`: wrappers
  around any store
- :class:`CpuHog`, :func:`block_loop`: a resolver that blocks the event loop
- :class:`FaultyProxy`: a TCP proxy on 127.0.0.1 that cuts, black-holes or delays a
  connection (to a PostgreSQL server, say); real time and real sockets

Under ``trio.testing.MockClock(autojump_threshold=0)`` each of them does the
same thing at the same virtual moment on every run.
"""

from __future__ import annotations

from ._cpu import CpuHog as CpuHog
from ._cpu import block_loop as block_loop
from ._http import NEVER as NEVER
from ._http import HostileTransport as HostileTransport
from ._provider import RateLimitStorm as RateLimitStorm
from ._provider import Scheduled as Scheduled
from ._store import RECEIPT_WRITES as RECEIPT_WRITES
from ._store import SHEET_WRITES as SHEET_WRITES
from ._store import DispatcherCrash as DispatcherCrash
from ._store import HeldElsewhere as HeldElsewhere
from ._store import LeaseRejection as LeaseRejection
from ._store import SlowStore as SlowStore
from ._store import StoreOutage as StoreOutage
from ._store import StoreWrapper as StoreWrapper
from ._takeover import PeerTakeover as PeerTakeover
from ._tcp import FaultyProxy as FaultyProxy
