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

Rows are admitted by depth (:class:`DepthAdmission`): the rows of the runs at
depth ``d`` share a row limiter and a byte budget of their own. A row
waiting on its child holds its slot and bytes, which no row of the child
needs, so a level only ever waits on the levels below it and the deepest
always moves: maps nested in children cannot starve each other, and each
level stays within ``max_concurrent_rows`` and ``active_rows_budget_bytes``.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ._budget import ByteBudget
from ._errors import (
    ChildLimitExceeded,
    PlayCycleError,
    PlayDefinitionError,
    PlayDepthExceeded,
)

if TYPE_CHECKING:
    from collections.abc import Callable

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


class DepthAdmission:
    """The row limiter and byte budget of the runs at each depth of child plays.

    Depth 0 (root runs) has the runtime's own; each deeper level its own,
    made when first used: a row waiting on its child play holds its slot
    and bytes, and the child's rows take theirs from the next depth's, so a
    level never waits on one above it (no deadlock), and each stays within
    ``max_concurrent_rows`` and ``active_rows_budget_bytes``.
    """

    def __init__(
        self, limits: Limits, row_limiter: trio.CapacityLimiter, budget: ByteBudget
    ) -> None:
        self._limits = limits
        self._levels = {0: (row_limiter, budget)}

    def of(self, depth: int) -> tuple[trio.CapacityLimiter, ByteBudget]:
        level = self._levels.get(depth)
        if level is None:
            limits = self._limits
            level = self._levels[depth] = (
                trio.CapacityLimiter(limits.max_concurrent_rows),
                ByteBudget(limits.active_rows_budget_bytes),
            )
        return level


def find_play(plays: dict[str, Any], child: Any, name_of: Callable[[Any], str]) -> tuple[Any, str]:
    """A child play and its name: ``child`` is a play, or the name of one in ``plays``.

    ``plays`` are those given to ``open_runtime(plays=...)`` and every play
    the runtime has run; a play passed itself is added to them.
    """
    if isinstance(child, str):
        found = plays.get(child)
        if found is None:
            known = ", ".join(sorted(plays)) or "none"
            raise PlayDefinitionError(
                f"no play named {child!r} in this runtime (known: {known}); pass the play "
                "itself, or name it in open_runtime(plays=[...])"
            )
        return found, child
    if not callable(child) or not inspect.iscoroutinefunction(child):
        raise PlayDefinitionError(
            f"{child!r} is not a play: pass an async def play(ctx, input) or a play's name"
        )
    name = name_of(child)
    plays.setdefault(name, child)
    return child, name
