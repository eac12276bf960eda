"""Structured runtime events, delivered to ``open_runtime(on_event=...)``.

The runtime does not make them itself: it records typed records once
(:mod:`trioplay._trace`), and a listener's events are read from those by one
table (:data:`trioplay._trace._listen.FACTS`), with the record's time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

log = logging.getLogger("trioplay")


@attrs.frozen
class RuntimeEvent:
    """One thing that happened in a run.

    ``type`` is dotted (``run.started``, ``map.progress``, ``map.stall``,
    ``map.finished``, ``run.finished``, ``play.log``, ...); ``at`` is the
    Trio clock time of the record it was read from; ``data`` is JSON-able.
    """

    type: str
    run_id: str
    at: float
    data: dict[str, Any]


EventSink = Callable[[RuntimeEvent], None]


def deliver(sink: EventSink | None, event: RuntimeEvent) -> None:
    """Hand ``event`` to the user's sink; a failing sink is logged, never fatal."""
    if sink is None:
        return
    try:
        sink(event)
    except Exception:
        log.exception("on_event handler failed for %s", event.type)
