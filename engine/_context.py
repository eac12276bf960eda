"""What a play holds: :class:`PlayContext`, a facade over the run's services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._effects import DurableEffects
from ._keys import step_receipt_key
from ._map import Dataset
from ._plugins import source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from ._waits import Occurrences, Parking


class PlayContext(DurableEffects):
    """The first argument of a play: datasets, sources, durable effects, logging.

    Every external effect (``tool``, ``fetch``, ``step``) is durable: recorded
    once in a receipt, replayed on rerun, never paid for twice.
    """

    __slots__ = ()

    # -- identity -----------------------------------------------------------
    @property
    def run_id(self) -> str:
        """The id of this run; rerunning with it resumes."""
        return self._services.run.run_id

    @property
    def attempt(self) -> int:
        """1 on the first execution of this run, then 2, 3, ... on each resume."""
        return self._services.run.attempt

    @property
    def play_name(self) -> str:
        return self._services.run.play

    # -- authoring API ------------------------------------------------------
    def dataset(self, key: str, rows: Iterable[Mapping[str, Any]]) -> Dataset:
        """A durable sheet named ``key`` over ``rows`` (a list, generator or source).

        Add columns with ``.with_column(name, resolver)`` and execute with
        ``.run(key=..., on_row_error=...)``.
        """
        return Dataset(self._services, key, rows)

    def csv(self, path: str, required: Sequence[str] = ()) -> Any:
        """Stream rows from a CSV file (UTF-8, header line first).

        The file is checked before any tool call: a missing file, a missing
        required column or a malformed line raises :class:`PlayInputError`
        naming the file, the line and the column. A field may hold up to
        ``Limits.csv_field_limit`` characters.
        """
        limit = self._services.run.limits.csv_field_limit
        return source("csv", path, required, field_limit=limit)

    def jsonl(self, path: str, required: Sequence[str] = ()) -> Any:
        """Stream rows from a JSON Lines file (one object per line); checked like :meth:`csv`."""
        return source("jsonl", path, required)

    async def step(
        self, key: str, fn: Callable[[], Any], *, stale_after: float | None = None
    ) -> Any:
        """Run ``fn()`` (sync or async) once per run and remember its JSON result.

        On rerun the stored value is returned without calling ``fn``.
        """
        services = self._services
        return await services.step(step_receipt_key(services.run.run_id, key), key, fn, stale_after)

    async def play(self, child: Any, input: Any = None) -> Any:
        """Run the play ``child`` on ``input`` as a child of this run, and return its output.

        Durable like a tool call: its receipt (operation ``play``) holds the
        child's output, so a rerun replays it without running the child. The
        child runs in the caller's task: cancelling this run cancels it. See
        :meth:`RowContext.play` for the errors and ``docs/authoring.md``.
        """
        services = self._services
        return await services.call_child(services.play_children, child, input)

    def _wait_scope(self) -> tuple[str | None, str | None, Occurrences, Parking | None]:
        return None, None, self._services.waits.play_occurrences, None

    def log(self, message: str) -> None:
        """Log a line for this run (logger ``trioplay.play``, and a ``play.log`` event)."""
        self._services.log(message)
