"""The built-in scenarios: ``trioplay scenario list`` shows them, ``run NAME`` runs one.

Each is a :class:`trioplay.scenario.Scenario`: a play, the fault adapters of
:mod:`trioplay.adapters.faults`, and what the run must show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._http import HEADER_STALL, SLOW_BODY
from ._providers import CREEPING_PROVIDER, HUNG_PROVIDER, PROVIDER_STARVATION, RATE_LIMIT_STORM
from ._run import CANCEL_MID_PAGE, LOOP_STARVATION
from ._stores import (
    DISPATCHER_CRASH,
    LEASE_LOSS,
    RECEIPT_HELD_ELSEWHERE,
    STORE_OUTAGE,
    WRITER_BACKPRESSURE,
)
from ._takeover import PEER_TAKEOVER
from ._waits import EVENT_BEFORE_WAITER, EVENT_NEVER_COMES

if TYPE_CHECKING:
    from trioplay.scenario import Scenario

BUILT_IN: tuple[Scenario, ...] = (
    HUNG_PROVIDER,
    SLOW_BODY,
    HEADER_STALL,
    WRITER_BACKPRESSURE,
    STORE_OUTAGE,
    LEASE_LOSS,
    RATE_LIMIT_STORM,
    DISPATCHER_CRASH,
    LOOP_STARVATION,
    CANCEL_MID_PAGE,
    PROVIDER_STARVATION,
    RECEIPT_HELD_ELSEWHERE,
    PEER_TAKEOVER,
    EVENT_NEVER_COMES,
    EVENT_BEFORE_WAITER,
    CREEPING_PROVIDER,
)
"""Every built-in scenario, in the order ``trioplay scenario list`` shows them."""


def find(name: str) -> Scenario | None:
    """The built-in scenario called ``name``, or ``None``."""
    return next((s for s in BUILT_IN if s.name == name), None)
