"""The built-in scenarios (issue 13, acceptance 1 to 4): each one's story, told the same way twice.

Each scenario runs under ``MockClock(autojump_threshold=0)`` in-process.
For every one, the table below says what the run must show (outcome, row
counts, what the stall lines name) independently of the scenario's own
``Expect``, and the test checks both; each runs twice with the same seed
and must give the same events byte for byte, and a seeded one must give
other events for another seed.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from typing import Any

import pytest

from trioplay._scenario._judge import judge
from trioplay.adapters.scenarios import BUILT_IN, find
from trioplay.adapters.simulated import SimulatedProvider
from trioplay.events import (
    CallFinished,
    CallSettled,
    CallStarted,
    LoopLag,
    MapProgress,
    MapStall,
)
from trioplay.scenario import NO_STALL, Cause, Expect, Rows, ScenarioResult, run_scenario

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
        {"oldest_phase": "store", "oldest_store_operation": "complete_many"},
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
    "cancel-mid-page": ("interrupted", {"failed": 0}, {}, set(), {}),
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
        {"receipt"},
        {"oldest_phase": "receipt", "oldest_receipt_owner": "peer.invalid/4242/1"},
    ),
    "creeping-provider": (
        "completed",
        {"completed": 500, "failed": 0},
        {},
        {"resolver"},
        {
            "oldest_provider": "acme",
            "slow_progress": {"commits": 6, "recent_commits": 214.0, "intervals": 2},
        },
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
    # Issue 26: page 0's three running rows are left to the peer that took it over.
    "peer-takeover": (
        "completed",
        {"completed": 37, "failed": 0, "handed_over": 3},
        {},
        set(),
        {},
    ),
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
    # twelve of issue 12, two of issue 22 (waits), two of issue 26 (slow progress,
    # a peer taking over a page)
    assert len(NAMES) == len(set(NAMES)) == 16


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


def test_the_store_outage_begins_before_the_run_ends_whatever_the_seed() -> None:
    # With the outage from 5 s, seed 3's run ended at 4.68 s: no stall at all.
    result = _run("store-outage", seed=3)
    assert result.held, result.problems
    assert {s["oldest_phase"] for s in result.stalls} == {"store"}


def test_a_store_call_of_no_measurable_age_is_named_by_no_line() -> None:
    # Heartbeats in flight at the instant a stall line was taken were named
    # as its oldest store operation, at 0 ms, in lines that blame a provider.
    lines = _run("hung-provider").stalls
    assert lines
    assert all(s["oldest_store_operation"] is None for s in lines if s["oldest_store_ms"] == 0)


def test_a_hung_rows_line_names_the_frame_it_awaits() -> None:
    # Issue 26, acceptance 1: the innermost frame is the tool's own await
    # (SimulatedProvider's sleep_forever), above it the play's resolver.
    source = inspect.getsource(SimulatedProvider.__call__).splitlines()
    first = inspect.getsourcelines(SimulatedProvider.__call__)[1]
    sleep = first + next(i for i, line in enumerate(source) if "sleep_forever()" in line)
    [line, *_] = _run("hung-provider").stalls
    assert line["oldest_row_key"] == "d17.example"
    awaiting = line["oldest_awaiting"]
    assert awaiting[-1] == f"SimulatedProvider.__call__ (trioplay/adapters/simulated.py:{sleep})"
    assert "calls.<locals>.resolver (trioplay/adapters/scenarios/_common.py:27)" in awaiting
    assert not any("trio/" in frame or "sleep_forever" in frame for frame in awaiting)


def test_a_row_waiting_on_another_owners_receipt_says_so_and_names_the_owner() -> None:
    # Issue 26, acceptance 1: no call of these rows has started; they wait
    # out the lease another host holds on each receipt.
    result = _run("receipt-held-elsewhere")
    assert result.stalls
    for line in result.stalls:
        assert line["oldest_phase"] == "receipt"
        assert line["oldest_receipt_owner"] == "peer.invalid/4242/1"
        assert line["oldest_awaiting"][-1] == "park (trioplay/_receipts/_call.py)"
    [cause] = result.causes()
    assert cause["receipt_owner"] == "peer.invalid/4242/1"
    [stall, *_] = [e for e in result.events if isinstance(e, MapStall)]
    assert stall.cause.startswith("receipt: owner peer.invalid/4242/1, provider acme")


def test_expect_checks_a_page_a_fields_value_and_every_line() -> None:
    result = _run("provider-starvation")
    pages = {s["page_offset"] for s in result.stalls}
    assert pages == {0, 40, 80}

    def judged(**wanted: Any) -> list[str]:
        return judge(result, Expect(stall=Cause(**wanted)))

    assert judged(phase="governor", fields={"page_offset": 80}) == []
    assert judged(phase="governor", fields={"page_offset": 0}) != []  # page 0 says resolver
    assert judged(fields={"oldest_provider": "stuck-co"}, every_line=True) == []
    [problem] = judged(phase="governor", every_line=True)
    assert problem.startswith("not every stall line names {'oldest_phase': 'governor'}")
    [problem] = judged(fields={"oldest_row_key": "nope"})
    assert problem.startswith("no stall line names {'oldest_row_key': 'nope'}")
    quiet = _run("dispatcher-crash")
    assert judge(quiet, Expect(stall=Cause(phase="resolver", every_line=True))) == [
        "0 stall lines, expected some",
        "not every stall line names {'oldest_phase': 'resolver'}; no of 0 did not: []",
    ]


def test_expect_judges_stall_lines_only_when_told_and_a_cause_implies_some() -> None:
    stalled, quiet = _run("rate-limit-storm"), _run("dispatcher-crash")
    lines = len(stalled.stalls)
    assert lines > 0
    assert judge(stalled, Expect()) == judge(quiet, Expect(rows=Rows())) == []
    assert judge(stalled, Expect(stall=Cause())) == judge(quiet, Expect(stall=NO_STALL)) == []
    assert judge(stalled, Expect(stall=NO_STALL)) == [f"{lines} stall lines, expected none"]
    assert judge(quiet, Expect(stall=Cause())) == ["0 stall lines, expected some"]


def test_expect_judges_rows_as_one_record() -> None:
    result = _run("dispatcher-crash")
    assert judge(result, Expect(rows=Rows(completed=256, failed=244, min_completed=256))) == []
    assert judge(result, Expect(rows=Rows(completed=500, min_completed=300, failed_with="X"))) == [
        "256 rows completed, expected 500",
        "256 rows completed, expected at least 300",
        "the failed rows failed with {'RuntimeError': 244}, expected X only",
    ]


def test_the_old_flat_keywords_of_expect_are_refused_by_name() -> None:
    # Before issue 21 the stall and the rows were spelled flat on Expect;
    # docs/scenarios.md says what they became.
    for old in ("stalled", "phase", "provider", "completed", "failed", "row_errors"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
            Expect(**{old: None})


def test_a_collapse_of_the_commit_rate_is_named_before_any_stall() -> None:
    # Issue 26, point 2: commits never stop (no interval without one), so the
    # stall rule alone never fired; the slow-progress rule names the provider.
    result = _run("creeping-provider")
    assert result.held, result.problems
    lines = [(e.at, e.report) for e in result.events if isinstance(e, MapStall)]
    assert all(line["slow_progress"] is not None for _, line in lines)
    assert all(line["last_terminal_commit_ms"] < 60_000 for _, line in lines)
    at, first = lines[0]
    assert at == 240  # ticks at 180 and 240 s were slow: two intervals running
    assert first["slow_progress"] == {"commits": 6, "recent_commits": 214.0, "intervals": 2}
    [stall, *_] = [e for e in result.events if isinstance(e, MapStall)]
    assert stall.cause.endswith("slow: 6 commits against 214.0")


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
    # Each call running at the cancel ends there, cancelled: none is left holding a slot.
    ends = Counter(
        (type(e).__name__, e.outcome)
        for e in result.events
        if isinstance(e, CallFinished | CallSettled) and e.outcome == "cancelled"
    )
    assert ends["CallFinished", "cancelled"] == ends["CallSettled", "cancelled"] > 0
    started = sum(isinstance(e, CallStarted) for e in result.events)
    assert started == sum(isinstance(e, CallSettled) for e in result.events)


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
        {"phase": "store", "provider": None, "store_operation": "complete_many", "tool": None}
    ]
    assert summary["longest_unsettled_ms"] >= 180_000 - 5_000
