"""The cyclic garbage collector during a run: start-up frozen, young collections rarer.

A run allocates several container objects per durable call (its call, its
claim, its receipt records, the parsed JSON) that reference counting frees
as soon as the call is done; the cyclic collector finds nothing among them,
yet with CPython's default threshold (a young collection every 700
allocations) it scans them over and over, and each of its full collections
walks every object of the process: the modules imported, the runtime, the
store. That was 10 to 20% of a run's CPU (issue 27).

:func:`tuned_for_run` changes two things for as long as a run is active,
and undoes both when the last active run of the process ends:

- ``gc.freeze()`` at the run's start: every object alive then (start-up,
  the runtime, what the program made before) moves to the permanent
  generation, which collections skip. Objects made during the run are
  collected as before. A program that froze objects itself is left as it
  is (nothing is frozen or unfrozen here).
- The young generation's threshold is raised to :data:`RUN_YOUNG_THRESHOLD`
  allocations (unless the program set a higher one, or 0, which turns
  automatic collection off): most of a run's objects are freed by their
  reference count before a collection would have scanned them.

The process's settings are global, so runs in several threads of one
process share one tuning: the first run to start applies it, the last to
end restores it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

RUN_YOUNG_THRESHOLD = 10_000
"""Allocations between two young collections during a run (CPython's default: 700)."""

_lock = threading.Lock()
_active = 0
_restore: tuple[int, int, int] | None = None  # the thresholds to put back, if changed
_froze = False  # whether the active runs froze the start-up objects


@contextlib.contextmanager
def tuned_for_run() -> Iterator[None]:
    """Freeze start-up objects and raise the young threshold while a run is active."""
    global _active, _restore, _froze
    with _lock:
        if _active == 0:
            young, middle, old = gc.get_threshold()
            _restore = None
            if 0 < young < RUN_YOUNG_THRESHOLD:
                _restore = (young, middle, old)
                gc.set_threshold(RUN_YOUNG_THRESHOLD, middle, old)
            _froze = gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                if _restore is not None and gc.get_threshold()[0] == RUN_YOUNG_THRESHOLD:
                    gc.set_threshold(*_restore)  # unless the program changed it meanwhile
                if _froze:
                    gc.unfreeze()
                _restore, _froze = None, False
