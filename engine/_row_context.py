"""What a resolver holds: :class:`RowContext`, the durable effects of one row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._children import ChildScope
from ._effects import DurableEffects
from ._keys import row_step_receipt_key
from ._waits import Occurrences

if TYPE_CHECKING:
    from ._waits import Parking

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._run import RunServices


class RowContext(DurableEffects):
    """The second argument of a resolver: ``tool``, ``fetch``, ``step``, ``log`` for one row.

    ``dataset`` and ``key`` name the row. The effects are the play's (see
    :class:`~trioplay.PlayContext`), scoped to this row where it matters: a
    step's key is the row's own. (The stall observer learns the row's phases
    from the row's task itself, see :mod:`trioplay._phase`.)
    """

    __slots__ = ("_children", "_occurrences", "_parking", "dataset", "key")

    def __init__(
        self, services: RunServices, dataset: str, key: str, parking: Parking | None = None
    ) -> None:
        self._services = services
        self.dataset = dataset
        self.key = key
        self._children: ChildScope | None = None
        self._occurrences: Occurrences | None = None  # made by the row's first wait
        self._parking = parking  # how the row lingers (lends its slot), from the map

    @property
    def run_id(self) -> str:
        return self._services.run.run_id

    async def step(
        self, key: str, fn: Callable[[], Any], *, stale_after: float | None = None
    ) -> Any:
        """A durable step scoped to this row (same ``key`` in two rows: two steps)."""
        services = self._services
        receipt_key = row_step_receipt_key(services.run.run_id, self.dataset, self.key, key)
        return await services.step(receipt_key, key, fn, stale_after)

    async def play(self, child: Any, input: Any = None) -> Any:
        """Run the play ``child`` on ``input`` as a child of this row, and return its output.

        Durable like a tool call: its receipt (operation ``play``) holds the
        child's output, so a rerun replays it without running the child. The
        child's run id derives from this run, this row and the input. This
        row's children run at most ``Limits.max_inline_children`` at once;
        their rows are admitted at their own depth, not against this row's. ``child`` is a play
        or the name of one the runtime knows (``open_runtime(plays=...)``).

        Raises :class:`ChildPlayFailed` (the child failed; rerunning resumes
        it), :class:`PlayDepthExceeded`, :class:`PlayCycleError` (both before
        anything is written, and failing the whole map),
        :class:`ChildLimitExceeded`, :class:`PlayDefinitionError` (not a
        play), :class:`PlayInputError` (input not JSON), :class:`RunEnded`.
        """
        scope = self._children
        if scope is None:
            scope = self._children = ChildScope(self.dataset, self.key)
        return await self._services.call_child(scope, child, input)

    def _wait_scope(self) -> tuple[str | None, str | None, Occurrences, Parking | None]:
        occurrences = self._occurrences
        if occurrences is None:
            occurrences = self._occurrences = Occurrences()
        return self.dataset, self.key, occurrences, self._parking

    def log(self, message: str) -> None:
        """Log a line for this row (logger ``trioplay.play``, and a ``play.log`` event)."""
        self._services.log(message, map=self.dataset, row=self.key)
