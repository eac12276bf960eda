"""Child plays: a run's lineage, the guards checked before a child is written, the caller's fan-out.

``ctx.play(child, input)`` and ``rc.play(child, input)`` call another play
durably: the call is a receipt of operation ``play`` whose result is the
child's output (``RunServices.call_child``, in ``_run``). The child runs
in its caller's task and cancel scope, so cancelling the caller cancels it;
it shares the runtime's governor.

Before anything of a child is written, :meth:`Lineage.child` refuses a
child nested past ``Limits.max_play_depth`` or one whose play is already an
ancestor (the root's play included), and :class:`ChildScope` counts the
caller's children against ``max_children_per_row`` and the run's against
``max_children_per_run``. A resolver's children run at most
``max_inline_children`` at once (a limiter made on first use, gone with the
resolver's row).

Rows are admitted by depth (``Runtime.admission``): the rows of the runs at
depth ``d`` share a row limiter and a byte budget of their own. A row
waiting on its child holds its slot and bytes, which no row of the child
needs, so a level only ever waits on the levels below it and the deepest
always moves: maps nested in children cannot starve each other, and each
level stays within ``max_concurrent_rows`` and ``active_rows_budget_bytes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ._errors import (
    ChildLimitExceeded,
    PlayCycleError,
    PlayDepthExceeded,
)

if TYPE_CHECKING:
    from ._limits import Limits


@attrs.frozen
class Lineage:
    """Where a run sits among child plays.

    ``plays`` names the plays from the root's to this run's own (the root's
    play is seeded in it, so a child calling the root is caught); ``depth``
    is 0 for a root, 1 for its first child.
    """

    root_run_id: str
    parent_run_id: str | None
    depth: int
    plays: tuple[str, ...]

    @classmethod
    def root(cls, run_id: str, play: str) -> Lineage:
        return cls(run_id, None, 0, (play,))

    def child(self, run_id: str, play: str, limits: Limits) -> Lineage:
        """The lineage of a child of this run (``run_id``) running ``play``; checks the guards.

        Raises :class:`PlayCycleError` when ``play`` is already an ancestor,
        :class:`PlayDepthExceeded` past ``limits.max_play_depth``.
        """
        path = (*self.plays, play)
        if play in self.plays:
            raise PlayCycleError(path)
        if self.depth + 1 > limits.max_play_depth:
            raise PlayDepthExceeded(path, limits.max_play_depth)
        return Lineage(self.root_run_id, run_id, self.depth + 1, path)


class ChildRunner(Protocol):
    """What the runtime offers the run's services for child plays (``Runtime``)."""

    def find_play(self, child: Any) -> tuple[Any, str]:
        """The play function and its name, from a play or its registered name."""
        ...

    async def run_child(self, play: Any, input: Any, run_id: str, lineage: Lineage) -> Any:
        """Run ``play`` as the run ``run_id`` under ``lineage``, in the caller's task."""
        ...


@attrs.define(eq=False)
class ChildScope:
    """The caller of child plays: the play itself, or one row's resolvers.

    Made with its context, gone with it: its fan-out limiter
    (``max_inline_children``) is made on the first child and dropped with
    the row.
    """

    dataset: str | None = None
    row_key: str | None = None
    started: int = 0
    fan: trio.CapacityLimiter | None = None

    def count(self, limits: Limits, run_id: str, run_started: int) -> None:
        """One more child of this caller, of a run that started ``run_started`` so far.

        Raises :class:`ChildLimitExceeded` past ``max_children_per_row`` (a
        row's children) or ``max_children_per_run``; nothing is written.
        """
        if self.dataset is not None and self.started >= limits.max_children_per_row:
            where = f"row {self.row_key!r} of dataset {self.dataset!r}"
            raise ChildLimitExceeded(where, "max_children_per_row", limits.max_children_per_row)
        if run_started >= limits.max_children_per_run:
            where = f"run {run_id!r}"
            raise ChildLimitExceeded(where, "max_children_per_run", limits.max_children_per_run)
        self.started += 1

    def fan_out(self, limits: Limits) -> trio.CapacityLimiter:
        """The caller's limiter of children at once, made on first use."""
        if self.fan is None:
            self.fan = trio.CapacityLimiter(limits.max_inline_children)
        return self.fan
