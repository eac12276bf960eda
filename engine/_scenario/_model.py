"""What a scenario is: a play, its faults, and what must happen.

A :class:`Scenario` builds a :class:`Setup` from a seed (the play, its tools
and store, wrapped in fault adapters, and the limits), and says in an
:class:`Expect` what the run must show: its outcome, and what its stall
lines name. :func:`~trioplay.scenario.run_scenario` runs it in virtual time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._limits import FetchTimeouts, Limits
from .._tools import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from .._runtime import Play
    from .._store import Store
    from ._result import ScenarioResult

Outcome = Literal["completed", "failed", "interrupted", "waiting"]


def _no_wrap(store: Store) -> Store:
    return store


@attrs.define(kw_only=True, eq=False)
class Setup:
    """One run of a scenario: what :func:`open_runtime` and ``rt.run`` are given.

    ``store`` wraps the scenario's store (a fresh ``memory://`` store, or
    the one ``store_url`` names) in fault adapters: ``lambda s:
    StoreOutage(s, start=30)``. ``deadline`` is when, in virtual seconds
    from the start, the run is cancelled if it has not ended (a scenario
    about cancellation sets it short; others keep it as a backstop, so a
    run that would hang for ever ends ``interrupted``).
    """

    play: Play
    input: Any = attrs.field(factory=dict)
    tools: ToolRegistry = attrs.field(factory=ToolRegistry)
    store: Callable[[Store], Store] = _no_wrap
    store_url: str = "memory://"
    limits: Limits = attrs.field(factory=Limits)
    fetch_timeouts: FetchTimeouts | None = None
    http_transport: Any = None
    allow_networks: Sequence[str] = ()
    deadline: float = 6 * 3600.0


@attrs.frozen(kw_only=True)
class Expect:
    """What the run must show; :meth:`problems` says what it did not.

    - ``outcome``: the run's status (``run.finished``);
    - ``error``: a text the run's error must contain (its type name, say);
    - ``completed`` / ``failed``: the map's row counts (last ``map.progress``);
      ``min_completed``: at least that many completed; ``row_errors``: the
      one error type every failed row failed with (``"ToolTimeout"``);
      ``handed_over``: the rows left to another owner that took their page
      over (``page.lost``), as the map's last counts say;
    - ``stalled``: whether any stall line was logged;
    - ``phase``: a stall line names this ``oldest_phase``; ``provider``,
      ``tool``, ``operation``: that same line names this ``oldest_provider``,
      ``oldest_tool``, ``oldest_store_operation``; ``page``: that line is the
      page's at this ``page_offset``; ``fields``: that line has these values
      (any of its keys: ``{"oldest_receipt_owner": "peer.invalid/4242/1"}``);
    - ``every_line``: every stall line, not only one, must name all of the
      above (and there must be one);
    - ``events``: event types the run must emit (``"loop.lag"``);
    - ``check``: more checks of your own, each problem a line of text.
    """

    outcome: Outcome
    error: str | None = None
    completed: int | None = None
    min_completed: int | None = None
    failed: int | None = None
    row_errors: str | None = None
    handed_over: int | None = None
    stalled: bool | None = None
    phase: str | None = None
    provider: str | None = None
    tool: str | None = None
    operation: str | None = None
    page: int | None = None
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    every_line: bool = False
    events: tuple[str, ...] = ()
    check: Callable[[ScenarioResult], list[str]] | None = None


@attrs.frozen(kw_only=True)
class Scenario:
    """A named, reproducible stall: ``setup(seed)`` builds the run, ``expect`` judges it.

    ``description`` is one line (``trioplay scenario list`` shows it).
    ``seeded`` says whether the seed changes the timeline (random latencies,
    errors); a scenario without randomness gives the same events for any seed.
    """

    name: str
    description: str
    setup: Callable[[int], Setup]
    expect: Expect
    seeded: bool = False
