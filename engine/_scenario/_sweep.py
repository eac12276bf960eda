"""Sweeping a scenario over many seeds: how many held, and the first that did not."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._run import run_scenario

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._model import Scenario
    from ._result import ScenarioResult


@attrs.frozen(kw_only=True)
class Sweep:
    """What :func:`sweep` found: the seeds run, those that did not hold, the first one's result."""

    scenario: str
    seeds: tuple[int, ...]
    failed_seeds: tuple[int, ...]
    first_failure: ScenarioResult | None
    """The whole result of the first seed that did not hold (``None``: every seed held)."""

    @property
    def held(self) -> int:
        """How many seeds held."""
        return len(self.seeds) - len(self.failed_seeds)

    def describe(self) -> list[str]:
        """The sweep for a terminal: how many held, then the first failure's problems."""
        lines = [f"scenario {self.scenario}: {self.held} of {len(self.seeds)} seeds held"]
        first = self.first_failure
        if first is not None:
            lines.append(f"  did not hold: seeds {_ranges(self.failed_seeds)}")
            lines.append(f"  the first, seed {first.seed}:")
            lines += [f"    - {problem}" for problem in first.problems]
        return lines


def sweep(
    scenario: Scenario,
    seeds: Iterable[int],
    *,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> Sweep:
    """Run ``scenario`` once per seed (see :func:`run_scenario`) and count what held.

    ``on_result`` sees each result as it comes (to show progress); only the
    first failing result is kept, so a long sweep holds one run's events.
    """
    ran: list[int] = []
    failed: list[int] = []
    first: ScenarioResult | None = None
    for seed in seeds:
        result = run_scenario(scenario, seed=seed)
        ran.append(seed)
        if on_result is not None:
            on_result(result)
        if not result.held:
            failed.append(seed)
            first = first or result
    return Sweep(
        scenario=scenario.name,
        seeds=tuple(ran),
        failed_seeds=tuple(failed),
        first_failure=first,
    )


def parse_seeds(text: str) -> list[int]:
    """``"0-99"``, ``"7"`` or ``"0-9,20,30-32"`` as the list of seeds it names, in order."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(f"not a seed or a range of seeds: {part.strip()!r}") from None
        if low < 0 or high < low:
            raise ValueError(f"not a range of seeds: {part.strip()!r}")
        seeds += range(low, high + 1)
    return seeds


def _ranges(seeds: tuple[int, ...]) -> str:
    """``(1, 2, 3, 7)`` as ``1-3, 7``."""
    spans: list[list[int]] = []
    for seed in seeds:
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
