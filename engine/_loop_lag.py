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

Cost follows events. Under the system clock the watchdog wakes once per
half threshold (four a second by default), nothing per row. Under a mock
clock it does not tick through idleness: virtual time passes only when the
clock jumps, and a block is a jump while a task runs. So, after each wake,
the watchdog waits until every other task is blocked
(``trio.testing.wait_all_tasks_blocked``) or its half threshold is up,
whichever comes first: a jump past that deadline is a lag, measured as
under the system clock. Once the loop is idle nothing can run before the
next deadline of some other task, so it sleeps until then (and measures
how late it wakes). An hour of virtual idleness costs a few wakes per
event of the run (a heartbeat, a stall line), not 7,200. A task woken by
I/O or a thread while the watchdog sleeps is not watched until that
deadline: under a mock clock, scenarios have neither.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from typing import TYPE_CHECKING

import trio

from ._trace._records import LoopLag

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._trace import Recorder


class LoopWatch:
    """The watchdog of one run: see the module docstring."""

    def __init__(
        self,
        threshold: float,
        facts: Recorder | None = None,
        run_id: str = "",
    ) -> None:
        self.threshold = threshold
        self._facts = facts
        self._run_id = run_id
        # (woke at, lag) of the lags at or above the threshold, oldest first.
        self._lags: deque[tuple[float, float]] = deque(maxlen=1024)
        self._deadline = math.inf  # when the watchdog is due to wake next

    async def run(self) -> None:
        """Sleep and measure, until the run's nursery is cancelled."""
        clock = trio.lowlevel.current_clock()
        # trio.testing imports pytest: only a run under its MockClock has it loaded.
        testing = sys.modules.get("trio.testing")
        if testing is not None and isinstance(clock, testing.MockClock):
            await self._run_virtual(clock, testing.wait_all_tasks_blocked)
        interval = self.threshold / 2
        while True:
            self._deadline = deadline = clock.current_time() + interval
            await trio.sleep_until(deadline)
            self._measure(clock.current_time(), deadline)

    async def _run_virtual(
        self, clock: trio.abc.Clock, wait_all_tasks_blocked: Callable[[], Awaitable[None]]
    ) -> None:
        """Under a mock clock: watch while the loop is busy, sleep through its idleness."""
        interval = self.threshold / 2
        while True:
            self._deadline = deadline = clock.current_time() + interval
            with trio.move_on_at(deadline) as watching:
                await wait_all_tasks_blocked()
            if watching.cancelled_caught:  # still busy: a lag if the deadline passed long ago
                self._measure(clock.current_time(), deadline)
                continue
            ahead = trio.lowlevel.current_statistics().seconds_to_next_deadline
            if ahead <= 0:
                continue
            if ahead == math.inf:  # nothing is due: wake as under the system clock
                ahead = interval
            self._deadline = deadline = clock.current_time() + ahead
            await trio.sleep_until(deadline)
            self._measure(clock.current_time(), deadline)

    def _measure(self, woke: float, due: float) -> None:
        lag = woke - due
        if lag >= self.threshold:
            self._lags.append((woke, lag))
            if self._facts is not None:
                self._facts.add(LoopLag, float(_ms(lag)), float(_ms(self.threshold)), self._run_id)

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
