"""``trioplay scenario list``, ``scenario run NAME|FILE.py[:NAME]`` and ``scenario sweep``.

A scenario runs in virtual time (:func:`trioplay.scenario.run_scenario`);
``run`` writes its events, trace, timeline picture, stall lines and
summary into ``--out`` and
prints what stalled, for how long, what the runtime named as the cause and
whether the scenario's expectations held (exit code 1 if not). ``sweep``
runs it once per seed of ``--seeds`` and says how many held and which did
not (exit code 1 if any did not), writing the first failure's files into
``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import EXIT_FAILED, EXIT_OK, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._scenario import Scenario
    from . import _Session
    from ._options import Commands

DEFAULT_OUT = "out/scenarios"


def add_scenario_commands(commands: Commands) -> None:
    """The ``scenario`` command and its three verbs."""
    verbs = commands.group("scenario", help="reproduce a stall in virtual time")
    verbs.add("list", _cmd_scenario_list, help="the built-in scenarios")
    run = verbs.add(
        "run",
        _cmd_scenario_run,
        help="run a scenario and say what stalled and why",
        description=(
            "Run a built-in scenario, or one of your own (a Python file defining a "
            "trioplay.scenario.Scenario), under a mock clock: hours of stalls in well "
            "under a second. Writes events.jsonl, trace.json, timeline.svg, stalls.log "
            "and summary.json into --out and prints a summary; exits 1 if the "
            "expectations did not hold."
        ),
    )
    _add_scenario_argument(run)
    run.add_argument(
        "--seed", metavar="N", type=int, default=0, help="the seed of its faults (default: 0)"
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        help=f"where to write its files (default: {DEFAULT_OUT}/NAME)",
    )
    many = verbs.add(
        "sweep",
        _cmd_scenario_sweep,
        help="run a scenario once per seed and count how many held",
        description=(
            "Run a scenario once per seed of --seeds and say how many seeds held its "
            "expectations and which did not; the first that did not is described and its "
            "files written into --out. Exits 1 if any seed did not hold."
        ),
    )
    _add_scenario_argument(many)
    many.add_argument(
        "--seeds",
        metavar="RANGES",
        type=_seeds,
        default="0-99",
        help="the seeds: 0-99 (the default), 7, or 0-9,20",
    )
    many.add_argument(
        "--out",
        metavar="DIR",
        help=f"where the first failure's files go (default: {DEFAULT_OUT}/NAME-seed-N)",
    )


def _add_scenario_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario",
        metavar="SCENARIO",
        help="a built-in scenario's name, or a scenario file FILE.py[:NAME]",
    )


def _seeds(text: str) -> list[int]:
    from .._scenario import parse_seeds

    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# The handlers import the scenario lab and its scenarios (Trio, httpx, the
# runtime) when they run: the parser imports this module (docs/cli.md).


def _cmd_scenario_list(_args: argparse.Namespace, _session: _Session) -> int:
    from trioplay.adapters.scenarios import BUILT_IN

    width = max(len(s.name) for s in BUILT_IN)
    for scenario in BUILT_IN:
        print(f"{scenario.name:<{width}}  {scenario.description}")
    return EXIT_OK


def _cmd_scenario_run(args: argparse.Namespace, session: _Session) -> int:
    from .._scenario import describe, run_scenario, write_outputs

    scenario = _find_scenario(args.scenario)
    with _stall_lines_quiet(session.debug):
        result = run_scenario(scenario, seed=args.seed)
    out = Path(args.out) if args.out else Path(DEFAULT_OUT) / scenario.name
    written = write_outputs(result, out)
    for line in describe(result):
        print(line)
    print(f"  wrote: {', '.join(str(path) for path in written)}")
    return EXIT_OK if result.held else EXIT_FAILED


def _cmd_scenario_sweep(args: argparse.Namespace, session: _Session) -> int:
    from .._scenario import sweep, write_outputs

    scenario = _find_scenario(args.scenario)
    with _stall_lines_quiet(session.debug):
        found = sweep(scenario, args.seeds)
    for line in found.describe():
        print(line)
    first = found.first_failure
    if first is None:
        return EXIT_OK
    out = Path(args.out) if args.out else Path(DEFAULT_OUT) / f"{scenario.name}-seed-{first.seed}"
    written = write_outputs(first, out)
    print(f"  wrote: {', '.join(str(path) for path in written)}")
    return EXIT_FAILED


def _find_scenario(ref: str) -> Scenario:
    from trioplay.adapters.scenarios import BUILT_IN, find

    from .._scenario import Scenario
    from ._playfile import _importable_from, load_play_module, split_play_ref

    built_in = find(ref)
    if built_in is not None:
        return built_in
    path, name = split_play_ref(ref)
    if path.suffix != ".py" and not path.exists():
        known = ", ".join(s.name for s in BUILT_IN)
        raise UsageError(f"no scenario {ref!r}: name a built-in one ({known}) or a FILE.py")
    with _importable_from(path.parent):
        module = load_play_module(path)
    found = {attr: obj for attr, obj in vars(module).items() if isinstance(obj, Scenario)}
    if name is not None:
        chosen = found.get(name) or next((s for s in found.values() if s.name == name), None)
        if chosen is None:
            raise UsageError(f"{path} has no scenario {name!r}; scenarios in it: {_names(found)}")
        return chosen
    if len(found) != 1:
        many = f"several scenarios ({_names(found)}); pick one with {path}:NAME"
        raise UsageError(f"{path} has {many if found else 'no trioplay.scenario.Scenario'}")
    return next(iter(found.values()))


def _names(found: dict[str, Scenario]) -> str:
    return ", ".join(found) or "none"


@contextlib.contextmanager
def _stall_lines_quiet(debug: bool) -> Iterator[None]:
    """Stall lines go to stalls.log, not the terminal (unless ``--debug``)."""
    logger = logging.getLogger("trioplay.stall")
    level = logger.level
    if not debug:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
