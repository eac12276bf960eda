"""Scenarios: reproducible stalls in virtual time (see :mod:`trioplay.scenario`)."""

from __future__ import annotations

from ._model import NO_STALL as NO_STALL
from ._model import Cause as Cause
from ._model import Expect as Expect
from ._model import Rows as Rows
from ._model import Scenario as Scenario
from ._model import Setup as Setup
from ._result import ScenarioResult as ScenarioResult
from ._run import EPOCH as EPOCH
from ._run import describe as describe
from ._run import run_scenario as run_scenario
from ._run import write_outputs as write_outputs
from ._sweep import Sweep as Sweep
from ._sweep import parse_seeds as parse_seeds
from ._sweep import sweep as sweep
