"""Scenarios of providers: hung, storming, starving their neighbours."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trioplay import Limits
from trioplay.events import MapProgress, MapStall
from trioplay.scenario import Cause, Expect, Rows, Scenario, Setup

from ..faults import RateLimitStorm, Scheduled
from ..simulated import Latency, SimulatedProvider
from ._common import calls, leads, map_play, registry
from ._finder import finder, finder_play

if TYPE_CHECKING:
    from trioplay import Row
    from trioplay.scenario import ScenarioResult


def hung_call(name: str, seed: int, *, rows: int, tool_timeout: float) -> Setup:
    """``rows`` rows through ``finder`` (acme), whose call for ``d17.example`` never returns."""
    return Setup(
        play=finder_play(name, rows),
        tools=registry(finder(seed, Latency(median=0.2, p99=2.0), hang_keys={"d17.example"})),
        limits=Limits(tool_timeout=tool_timeout),
        deadline=max(6 * 3600.0, 2 * tool_timeout),
    )


def _hung_provider(seed: int) -> Setup:
    return hung_call("hung-provider", seed, rows=200, tool_timeout=300)


HUNG_PROVIDER = Scenario(
    name="hung-provider",
    description="one call never returns: its page stalls until the tool timeout fails its row",
    setup=_hung_provider,
    expect=Expect(
        rows=Rows(completed=199, failed=1, failed_with="ToolTimeout"),
        stall=Cause(phase="resolver", tool="finder", provider="acme"),
    ),
    seeded=True,
)


def _rate_limit_storm(seed: int) -> Setup:
    quick = finder(seed, Latency(median=0.05, p99=0.4), concurrency=4)
    storm = RateLimitStorm(tool=quick, start=0.5, duration=150.0, retry_after=30.0, retries=20)
    return Setup(play=finder_play("rate-limit-storm", 100), tools=registry(storm))


RATE_LIMIT_STORM = Scenario(
    name="rate-limit-storm",
    description="the provider answers 429 (Retry-After 30 s) for 150 s: rows wait in the governor",
    setup=_rate_limit_storm,
    expect=Expect(
        rows=Rows(completed=100, failed=0), stall=Cause(phase="governor", provider="acme")
    ),
    seeded=True,
)


def _provider_starvation(seed: int) -> Setup:
    healthy = SimulatedProvider(
        tool_id="healthy", provider="healthy-co", seed=seed, latency=Latency(0.1, 0.8)
    )
    stuck = SimulatedProvider(tool_id="stuck", provider="stuck-co", seed=seed, hang_rate=1.0)

    def which(row: Row) -> str:
        return "stuck" if int(str(row["domain"])[1:].split(".")[0]) % 3 == 0 else "healthy"

    return Setup(
        play=map_play("provider-starvation", leads(120), ("email", calls(which)), page_size=40),
        tools=registry(healthy, stuck),
        limits=Limits(max_concurrent_external_calls=8, max_provider_share=0.5, tool_timeout=90),
    )


def _the_stuck_provider_is_contained(result: ScenarioResult) -> list[str]:
    """The fairness fix: the healthy rows all commit before the first stuck call times
    out (90 s), and every stall line blames the stuck provider, never the healthy one.

    A page whose rows wait for the stuck provider's share of the slots names phase
    ``governor``; a page whose own rows hold that share, their calls hung inside the
    provider, names ``resolver``; both name ``stuck-co`` and its tool ``stuck``.
    """
    problems = []
    done = [e.at for e in result.events if isinstance(e, MapProgress) and e.completed >= 80]
    if not (done and done[0] < 90):
        problems.append(f"the healthy rows had not all committed before 90 s (first at {done[:1]})")
    blamed = {(s["oldest_phase"], s["oldest_provider"], s["oldest_tool"]) for s in result.stalls}
    if blamed != {("governor", "stuck-co", "stuck"), ("resolver", "stuck-co", "stuck")}:
        problems.append(f"the stall lines blamed {sorted(blamed, key=str)}, not stuck-co alone")
    return problems


PROVIDER_STARVATION = Scenario(
    name="provider-starvation",
    description=(
        "a hung provider beside a healthy one: it keeps its share of the call slots, "
        "the healthy rows keep committing"
    ),
    setup=_provider_starvation,
    expect=Expect(
        rows=Rows(completed=80, failed=40, failed_with="ToolTimeout"),
        stall=Cause(phase="governor", provider="stuck-co"),
        check=_the_stuck_provider_is_contained,
    ),
    seeded=True,
)


COLLAPSE = 120.0  # creeping-provider: when its calls slow down


def _creeping_provider(seed: int) -> Setup:
    # Two minutes in, every call takes 20 s more: ~6 commits a minute instead of ~200.
    creeping = Scheduled(
        tool=finder(seed, Latency(0.5, 1.5), concurrency=2), latency=((COLLAPSE, 20.0),)
    )
    return Setup(
        play=finder_play("creeping-provider", 500, page_size=500), tools=registry(creeping)
    )


def _the_collapse_is_named(result: ScenarioResult) -> list[str]:
    """A slow-progress line names the page's provider within three minutes of the collapse."""
    slow = [(at, s) for at, s in _lines(result) if s["slow_progress"] is not None]
    if not slow:
        return ["no stall line reported slow progress"]
    at, first = slow[0]
    problems = []
    if not COLLAPSE < at <= COLLAPSE + 180:
        problems.append(f"the first slow-progress line came at {at:.0f} s, not within 3 min")
    if (first["oldest_provider"], first["oldest_tool"]) != ("acme", "finder"):
        problems.append(f"the first slow line blamed {first['oldest_provider']!r}")
    return problems


def _lines(result: ScenarioResult) -> list[tuple[float, dict[str, Any]]]:
    return [(e.at, e.report) for e in result.events if isinstance(e, MapStall)]


CREEPING_PROVIDER = Scenario(
    name="creeping-provider",
    description=(
        "the provider slows from 0.5 s to 20 s a call at 2 min: commits never stop, "
        "a slow-progress line names it"
    ),
    setup=_creeping_provider,
    expect=Expect(
        rows=Rows(completed=500, failed=0),
        stall=Cause(phase="resolver", provider="acme"),
        check=_the_collapse_is_named,
    ),
    seeded=True,
)
