"""``trioplay scenario list``, ``run`` and ``sweep`` from the command line (issue 13).

``scenario list`` and the two hash seeds run the installed entry point in a
process of their own; the rest run ``main(argv)`` in this process
(``support.cli``), which is the same parser and commands without a start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from trioplay.adapters.scenarios import BUILT_IN
from trioplay.events import MapStall, RunStarted, read_events

from .support import cli, run_trioplay
from .test_trace import check_chrome_trace

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "scenario_slow_waterfall.py"
# Issue 13, acceptance 3 (2 s per scenario from the command line) is a time:
# `python -m benchmarks scenarios` measures it, on a quiet machine.


def test_list_shows_one_line_per_scenario_name_first(tmp_path: Path) -> None:
    done = run_trioplay("scenario", "list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [s.name for s in BUILT_IN]
    for line, scenario in zip(lines, BUILT_IN, strict=True):
        assert line.split(None, 1)[1] == scenario.description


@pytest.mark.parametrize("scenario", [s.name for s in BUILT_IN])
def test_every_scenario_runs_from_the_command_line(scenario: str, tmp_path: Path) -> None:
    done = cli("scenario", "run", scenario, "--out", "o", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "expectations: held" in done.stdout
    assert "[runtime.map_stall]" not in done.stdout + done.stderr  # they are in stalls.log
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (summary["scenario"], summary["expectations_held"]) == (scenario, True)
    events = list(read_events(tmp_path / "o" / "events.jsonl"))  # the recorder's schema
    assert isinstance(events[0], RunStarted)
    stalls = (tmp_path / "o" / "stalls.log").read_text().splitlines()
    assert len(stalls) == summary["stall_lines"]
    assert len(stalls) == sum(isinstance(e, MapStall) for e in events)
    check_chrome_trace(json.loads((tmp_path / "o" / "trace.json").read_text()))
    assert ET.parse(tmp_path / "o" / "timeline.svg").getroot().tag.endswith("svg")


def test_the_files_of_a_run_are_one_stream_of_events(tmp_path: Path) -> None:
    # events.jsonl is what --events writes: trioplay timeline draws it, and
    # draws what scenario run drew; the trace's stalls are the stall lines.
    done = cli("scenario", "run", "provider-starvation", "--out", "o", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "o"
    assert "trace.json" in done.stdout
    assert "timeline.svg" in done.stdout
    drawn = cli("timeline", "o/events.jsonl", "--out", "again.svg", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "again.svg").read_text() == (out / "timeline.svg").read_text()
    trace = check_chrome_trace(json.loads((out / "trace.json").read_text()))
    instants = [e for e in trace if e["ph"] == "i" and e["name"].startswith("stall: ")]
    logged = (out / "stalls.log").read_text().splitlines()
    lines = [json.loads(line.split(" ", 1)[1]) for line in logged]
    assert [e["args"] for e in instants] == lines
    assert {e["name"] for e in instants} >= {
        "stall: governor: provider stuck-co, tool stuck, oldest 120,000 ms"
    }


@pytest.mark.parametrize("scenario", ["provider-starvation", "receipt-held-elsewhere"])
def test_two_processes_write_the_same_events(scenario: str, tmp_path: Path) -> None:
    # Different hash seeds: nothing may depend on the order of a set of strings.
    for hash_seed in ("1", "2"):
        done = run_trioplay(
            "scenario", "run", scenario, "--seed", "3", "--out", hash_seed,
            cwd=tmp_path, env={"PYTHONHASHSEED": hash_seed},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    first = (tmp_path / "1" / "events.jsonl").read_bytes()
    assert first == (tmp_path / "2" / "events.jsonl").read_bytes()
    assert (tmp_path / "1" / "stalls.log").read_bytes() == (
        tmp_path / "2" / "stalls.log"
    ).read_bytes()


def test_a_scenario_file_of_ones_own_runs(tmp_path: Path) -> None:
    done = cli("scenario", "run", str(EXAMPLE), "--out", "o", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "named as the cause: phase resolver, tool finder_a, provider slow-co" in done.stdout
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["rows"]["completed"] == 40


def test_expectations_that_do_not_hold_exit_1(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "import attrs\n"
        "from trioplay.adapters import scenarios\n"
        "from trioplay.scenario import Expect\n"
        "hung = scenarios.HUNG_PROVIDER\n"
        "wrong = attrs.evolve(hung, name='wrong', expect=Expect(outcome='failed'))\n"
        "other = attrs.evolve(hung, name='other')\n"
    )
    done = cli("scenario", "run", "mine.py:wrong", "--out", "o", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "expectations: NOT held" in done.stdout
    assert "the run ended completed, expected failed" in done.stdout
    several = cli("scenario", "run", "mine.py", cwd=tmp_path)
    assert several.returncode == 2
    assert "several scenarios (hung, wrong, other)" in several.stderr


def test_an_unknown_scenario_is_a_usage_error(tmp_path: Path) -> None:
    done = cli("scenario", "run", "no-such-thing", cwd=tmp_path)
    assert done.returncode == 2
    assert "no scenario 'no-such-thing'" in done.stderr


def test_the_command_line_does_not_import_trio_testing() -> None:
    # Acceptance 3 gives a scenario 2 s from the command line, start-up
    # included: trio.testing imports pytest, which every command paid for.
    code = "import sys, trioplay._cli; print(sorted({'trio.testing', 'pytest'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_sweep_counts_the_seeds_that_held_and_names_the_first_that_did_not(
    tmp_path: Path,
) -> None:
    # A scenario whose own check fails on seeds 2 and 3 (and only those).
    (tmp_path / "picky.py").write_text(
        "import attrs\n"
        "from trioplay.adapters import scenarios\n"
        "hung = scenarios.HUNG_PROVIDER\n"
        "def odd(result):\n"
        "    return [f'seed {result.seed} is picky'] if result.seed in (2, 3) else []\n"
        "picky = attrs.evolve(hung, name='picky', expect=attrs.evolve(hung.expect, check=odd))\n"
    )
    done = cli("scenario", "sweep", "picky.py:picky", "--seeds", "0-4", "--out", "o", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[:4] == [
        "scenario picky: 3 of 5 seeds held",
        "  did not hold: seeds 2-3",
        "  the first, seed 2:",
        "    - seed 2 is picky",
    ]
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["seed"] == 2
    held = cli("scenario", "sweep", "lease-loss", "--seeds", "0,5-6", cwd=tmp_path)
    assert held.returncode == 0, held.stdout + held.stderr
    assert held.stdout == "scenario lease-loss: 3 of 3 seeds held\n"
    assert not (tmp_path / "out").exists()  # nothing failed, nothing written
    wrong = cli("scenario", "sweep", "lease-loss", "--seeds", "9-1", cwd=tmp_path)
    assert wrong.returncode == 2
    assert "not a range of seeds: '9-1'" in wrong.stderr
