"""The loop-lag watchdog: how late the event loop wakes a sleeping task.

A resolver that computes for a second without an ``await`` blocks every
other task of the process for that second: heartbeats, the writer, the
stall observer. Nothing else in the engine would say so; the first sign
would be a lease that expired while its heartbeat could not run. One
:class:`LoopWatch` per run (a task of the run's nursery, started next to
the dispatcher's) sleeps ``loop_lag_threshold / 2`` at a time and measures
how late it wakes. A wake later than ``Limits.loop_lag_threshold`` is a
``loop.lag`` record (``lag_ms``, ``threshold_ms``) to the run's recorder
(``on_event`` listeners get it from there), and the largest lag of
the last stall interval is the stall line's ``loop_lag_ms``, which names
phase ``loop`` when it reached the threshold.

Lateness is measured on Trio's clock. Under the system clock that is the
monotonic wall clock (``time.perf_counter``), so it is real lateness. Under
``trio.testing.MockClock`` it is virtual lateness: virtual time does not
pass while a task computes, so real computation delays nothing in virtual
time, and a simulated one (:class:`trioplay.adapters.faults.CpuHog` jumps
the mock clock by the time it "computes") delays the watchdog exactly as a
real one would under the system clock. Measuring real time under a mock
clock would make a scenario's events depend on the machine's speed; this
way the same scenario and seed give the same events.

Cost: one wake per half threshold (four a second by default), nothing per
row. Under an autojumping mock clock an idle run jumps from wake to wake,
so an hour of virtual idleness takes 7,200 scheduler rounds, not one.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import trio

from ._trace._records import LoopLag

if TYPE_CHECKING:
    from ._trace import Recorder


class LoopWatch:
    """The watchdog of one run: see the module docstring."""

    def __init__(
        self,
        threshold: float,
        facts: Recorder | None = None,
    ) -> None:
        self.threshold = threshold
        self._facts = facts
        # (woke at, lag) of the lags at or above the threshold, oldest first.
        self._lags: deque[tuple[float, float]] = deque(maxlen=1024)
        self._deadline = math.inf  # when the watchdog is due to wake next

    async def run(self) -> None:
        """Sleep and measure, until the run's nursery is cancelled."""
        interval = self.threshold / 2
        clock = trio.lowlevel.current_clock()
        while True:
            self._deadline = deadline = clock.current_time() + interval
            await trio.sleep_until(deadline)
            woke = clock.current_time()
            lag = woke - deadline
            if lag >= self.threshold:
                self._lags.append((woke, lag))
                if self._facts is not None:
                    self._facts.add(LoopLag, float(_ms(lag)), float(_ms(self.threshold)))

    def lag_since(self, since: float) -> float:
        """The largest lag at or above the threshold seen at or after ``since`` (0 if none).

        A lag the watchdog has not yet measured counts too: when the loop
        comes back from a block, the stall observer may run before the
        watchdog does, and the watchdog is then overdue by as much.
        """
        overdue = trio.current_time() - self._deadline
        seen = max((lag for woke, lag in self._lags if woke >= since), default=0.0)
        return max(seen, overdue if overdue >= self.threshold else 0.0)


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))
