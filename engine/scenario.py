"""Scenarios: a play, fault-injecting adapters and expectations, run in virtual time.

::

    from trioplay.scenario import Cause, Expect, Scenario, Setup, run_scenario

    scenario = Scenario(
        name="my-stall",
        description="one provider hangs; its row times out",
        setup=lambda seed: Setup(play=my_play, tools=my_tools(seed)),
        expect=Expect(stall=Cause(phase="resolver")),
    )
    result = run_scenario(scenario, seed=1)
    assert result.held, result.problems

:func:`run_scenario` runs the play once under
``trio.testing.MockClock(autojump_threshold=0)`` on a fresh in-memory store,
so hours of stalls take milliseconds and the same seed gives the same
events; :func:`sweep` runs it once per seed and counts what held.
``trioplay scenario list``, ``trioplay scenario run NAME`` and
``trioplay scenario sweep NAME --seeds 0-99`` run the built-in scenarios
(``trioplay.adapters.scenarios``) and files of your own;
``docs/scenarios.md`` explains how to read what they print.
"""

from __future__ import annotations

from ._scenario import EPOCH as EPOCH
from ._scenario import NO_STALL as NO_STALL
from ._scenario import Cause as Cause
from ._scenario import Expect as Expect
from ._scenario import Rows as Rows
from ._scenario import Scenario as Scenario
from ._scenario import ScenarioResult as ScenarioResult
from ._scenario import Setup as Setup
from ._scenario import Sweep as Sweep
from ._scenario import describe as describe
from ._scenario import run_scenario as run_scenario
from ._scenario import sweep as sweep
from ._scenario import write_outputs as write_outputs
