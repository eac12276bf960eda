"""The built-in scenarios (issue 13, acceptance 1 to 4): each one's story, told the same way twice.

Each scenario runs under ``MockClock(autojump_threshold=0)`` in-process.
For every one, the table below says what the run must show (outcome, row
counts, what the stall lines name) independently of the scenario's own
``Expect``, and the test checks both; each runs twice with the same seed
and must give the same events byte for byte, and a seeded one must give
other events for another seed.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trioplay.adapters.scenarios import BUILT_IN, find
from trioplay.events import LoopLag, MapProgress
from trioplay.scenario import ScenarioResult, run_scenario

NAMES = [scenario.name for scenario in BUILT_IN]

# name: (outcome, {count: n}, {failed-row error: n}, phases the stall lines name, a cause named)
STORIES: dict[str, tuple[str, dict[str, int], dict[str, int], set[str], dict[str, Any]]] = {
    "hung-provider": (
        "completed",
        {"completed": 199, "failed": 1},
        {"ToolTimeout": 1},
        {"resolver"},
        {"oldest_provider": "acme", "oldest_row_key": "d17.example"},
    ),
    "slow-body": (
        "completed",
        {"completed": 19, "failed": 1},
        {"FetchTimeout": 1},
        {"fetch"},
        {"oldest_tool": "fetch", "oldest_row_key": "d3.example"},
    ),
    "header-stall": (
        "completed",
        {"completed": 19, "failed": 1},
        {"FetchTimeout": 1},
        {"fetch"},
        {"oldest_tool": "fetch", "oldest_row_key": "d3.example"},
    ),
    "writer-backpressure": (
        "completed",
        {"completed": 12, "failed": 0},
        {},
        {"writer_admission", "writer_commit"},
        {"oldest_phase": "writer_admission", "oldest_tool": None},
    ),
    "store-outage": (
        "completed",
        {"completed": 300, "failed": 0},
        {},
        {"store"},
        {"oldest_phase": "store", "oldest_store_operation": "write_terminal_rows"},
    ),
    "lease-loss": (
        "completed",
        {"completed": 0, "failed": 20},
        {"LeaseLost": 20},
        {"resolver"},
        {"oldest_provider": "acme"},
    ),
    "rate-limit-storm": (
        "completed",
        {"completed": 100, "failed": 0},
        {},
        {"governor"},
        {"oldest_phase": "governor", "oldest_provider": "acme"},
    ),
    "dispatcher-crash": (
        "completed",
        {"completed": 256, "failed": 244},
        {"RuntimeError": 244},
        set(),
        {},
    ),
    "loop-starvation": (
        "completed",
        {"completed": 50, "failed": 0},
        {},
        {"loop"},
        {"oldest_phase": "loop", "loop_lag_ms": 89750},
    ),
    "cancel-mid-page": ("cancelled", {"failed": 0}, {}, set(), {}),
    "provider-starvation": (
        "completed",
        {"completed": 80, "failed": 40},
        {"ToolTimeout": 40},
        {"governor", "resolver"},
        {"oldest_phase": "governor", "oldest_provider": "stuck-co", "oldest_tool": "stuck"},
    ),
    "receipt-held-elsewhere": (
        "completed",
        {"completed": 20, "failed": 0},
        {},
        {"resolver"},
        {"oldest_phase": "resolver", "oldest_provider": "acme"},
    ),
    # Waiting rows (issue 22): neither one logs a stall line.
    "event-never-comes": (
        "completed",
        {"completed": 10, "failed": 10},
        {"EventWaitTimeout": 10},
        set(),
        {},
    ),
    "event-before-waiter": ("completed", {"completed": 30, "failed": 0}, {}, set(), {}),
}


@pytest.fixture(autouse=True)
def _quiet_stall_lines() -> Any:
    logger = logging.getLogger("trioplay.stall")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _run(name: str, seed: int = 0) -> ScenarioResult:
    scenario = find(name)
    assert scenario is not None
    return run_scenario(scenario, seed=seed)


def test_the_scenarios_of_the_issues_are_built_in() -> None:
    assert set(NAMES) == set(STORIES)
    assert len(NAMES) == len(set(NAMES)) == 14  # twelve of issue 12, two of issue 22


@pytest.mark.parametrize("name", NAMES)
def test_a_scenario_tells_its_story_the_same_way_twice(name: str) -> None:
    first = _run(name)
    assert first.held, first.problems
    outcome, counts, row_errors, phases, cause = STORIES[name]
    assert first.status == outcome
    assert {k: first.counts().get(k) for k in counts} == counts
    assert first.row_errors == row_errors
    assert {stall["oldest_phase"] for stall in first.stalls} == phases
    if cause:
        assert any(all(s.get(k) == v for k, v in cause.items()) for s in first.stalls)
    again = _run(name)
    assert again.events_jsonl() == first.events_jsonl()
    assert again.stall_log() == first.stall_log()


@pytest.mark.parametrize("name", [s.name for s in BUILT_IN if s.seeded])
def test_another_seed_changes_a_random_scenarios_timeline(name: str) -> None:
    other = _run(name, seed=1)
    assert other.held, other.problems
    assert other.events_jsonl() != _run(name).events_jsonl()


@pytest.mark.parametrize("name", [s.name for s in BUILT_IN if not s.seeded])
def test_a_scenario_without_randomness_ignores_the_seed(name: str) -> None:
    assert _run(name, seed=7).events_jsonl() == _run(name).events_jsonl()


def test_the_dispatcher_crash_reaches_every_waiting_row() -> None:
    result = _run("dispatcher-crash")
    counts = result.counts()
    assert counts["completed"] + counts["failed"] == 500
    assert result.row_errors == {"RuntimeError": counts["failed"]}
    assert counts["failed"] > 0
    assert result.stalls == []  # nobody was left waiting


def test_a_cancelled_run_reported_only_what_it_stored() -> None:
    result = _run("cancel-mid-page")
    assert result.virtual_seconds == pytest.approx(12, abs=1.5)
    assert 0 < result.counts()["completed"] <= result.stored_rows["completed"] < 3000


def test_the_starved_loop_is_an_event_and_the_named_cause() -> None:
    result = _run("loop-starvation")
    lags = [e.lag_ms for e in result.events if isinstance(e, LoopLag)]
    assert lags
    assert max(lags) >= 45_000
    [line] = result.stalls
    assert (line["oldest_phase"], line["loop_lag_ms"]) == ("loop", max(lags))


def test_a_starved_provider_keeps_only_its_share() -> None:
    # Issue 13, acceptance 4: the healthy rows all commit before the first
    # stuck call times out; the stuck provider's own rows wait for its share.
    result = _run("provider-starvation")
    healthy_done = next(
        e.at for e in result.events if isinstance(e, MapProgress) and e.completed == 80
    )
    assert healthy_done < 90
    governor = [s for s in result.stalls if s["oldest_phase"] == "governor"]
    assert governor
    assert all(s["oldest_provider"] == "stuck-co" for s in governor)
    assert all(s["governor_waiting"] > 0 for s in governor)
    # The page whose own rows hold the stuck provider's share names the
    # resolver (their calls hang inside the provider), and the provider too.
    resolver = [s for s in result.stalls if s["oldest_phase"] == "resolver"]
    assert resolver
    assert all((s["oldest_provider"], s["oldest_tool"]) == ("stuck-co", "stuck") for s in resolver)
    assert all(s["governor_waiting"] < s["resolver_active"] for s in resolver)


def test_a_summary_says_what_stalled_and_why() -> None:
    summary = _run("store-outage").summary()
    assert summary["status"] == "completed"
    assert summary["expectations_held"] is True
    assert summary["causes"] == [
        {"phase": "store", "provider": None, "store_operation": "write_terminal_rows", "tool": None}
    ]
    assert summary["longest_unsettled_ms"] >= 180_000 - 5_000
