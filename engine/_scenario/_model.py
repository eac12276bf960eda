"""What a scenario is: a play, its faults, and what must happen.

A :class:`Scenario` builds a :class:`Setup` from a seed (the play, its tools
and store, wrapped in fault adapters, and the limits), and says in an
:class:`Expect` what the run must show: its outcome, its rows
(:class:`Rows`), and what its stall lines name (a :class:`Cause`, or
:data:`NO_STALL`). :func:`~trioplay.scenario.run_scenario` runs it in virtual time.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final, Literal

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
class Rows:
    """What the map's rows must show, as its last counts say (``map.progress``).

    ``completed`` / ``failed``: exactly that many; ``min_completed``: at
    least that many completed; ``handed_over``: the rows left to another
    owner that took their page over (``page.lost``); ``failed_with``: the one
    error type every failed row failed with (``"ToolTimeout"``).
    """

    completed: int | None = None
    failed: int | None = None
    min_completed: int | None = None
    handed_over: int | None = None
    failed_with: str | None = None


@attrs.frozen(kw_only=True)
class Cause:
    """What a stall line must name: ``Expect(stall=Cause(phase="resolver", provider="acme"))``.

    The cause as :meth:`ScenarioResult.causes` says it: ``phase``, the line's
    ``oldest_phase``; ``provider``, ``tool``, ``operation``: its
    ``oldest_provider``, ``oldest_tool``, ``oldest_store_operation``.
    ``fields``: any other keys of the line and their values
    (``{"oldest_receipt_owner": "peer.invalid/4242/1"}``, ``{"page_offset":
    80}``). Some stall line names all of them together, or, with
    ``every_line``, every one does. ``Cause()`` names nothing: any stall
    line will do.
    """

    phase: str | None = None
    provider: str | None = None
    tool: str | None = None
    operation: str | None = None
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    every_line: bool = False

    def line(self) -> dict[str, Any]:
        """The keys a stall line must have, with their values."""
        named = {
            "oldest_phase": self.phase,
            "oldest_provider": self.provider,
            "oldest_tool": self.tool,
            "oldest_store_operation": self.operation,
        }
        return {k: v for k, v in named.items() if v is not None} | dict(self.fields)


class NoStall(enum.Enum):
    """``Expect(stall=NO_STALL)``: the run logs no stall line at all."""

    NO_STALL = "no stall"


NO_STALL: Final = NoStall.NO_STALL


@attrs.frozen(kw_only=True)
class Expect:
    """What the run must show; the result's ``problems`` say what it did not.

    - ``outcome``: the run's status (``run.finished``), ``"completed"``
      unless said;
    - ``error``: a text the run's error must contain (its type name, say);
    - ``rows``: the map's row counts, and what its failed rows failed with
      (:class:`Rows`);
    - ``stall``: what the stall lines name (a :class:`Cause`; ``Cause()``:
      some stall line, whatever it names), or :data:`NO_STALL`: none at all;
      ``None``, the default: the stall lines are not judged;
    - ``events``: event types the run must emit (``"loop.lag"``);
    - ``check``: more checks of your own, each problem a line of text.
    """

    outcome: Outcome = "completed"
    error: str | None = None
    rows: Rows = Rows()
    stall: Cause | NoStall | None = None
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
