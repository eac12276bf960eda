"""What one attempt of a run is, as each of its rooms sees it: :class:`RunFacts`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._children import Lineage
    from ._cleanup import CleanupBudget
    from ._limits import Limits
    from ._phase import StoreCalls
    from ._store import Store
    from ._trace import Recorder


@attrs.frozen(kw_only=True)
class RunFacts:
    """One attempt of a run: built once by the runtime, handed whole.

    The dispatcher (its ``DispatchSetup`` is one), the run's event waits and
    its services read here who the run is (``run_id``, ``attempt``, ``play``,
    ``owner``; ``lineage``, its place among child plays, ``None`` for a
    root), where it writes (``store``, the runtime's store as the run
    watches it; ``store_calls``, those calls in flight, for the stall line),
    its ``limits``, ``wall_clock`` (leases, stored times), its one
    ``cleanup`` budget, and where its events go: ``facts`` (every event, or
    ``None`` when nobody listens) and ``trace`` (``facts`` when a sink wants
    every event, a row's, a call's, else ``None``: test it before building
    one).
    """

    run_id: str
    attempt: int
    play: str
    owner: str
    lineage: Lineage | None
    store: Store
    store_calls: StoreCalls
    limits: Limits
    wall_clock: Callable[[], float]
    cleanup: CleanupBudget
    facts: Recorder | None = None
    trace: Recorder | None = None
