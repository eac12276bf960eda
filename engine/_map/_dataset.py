"""The dataset builder: ``ctx.dataset(name, rows).with_column(...).run(...)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._errors import PlayDefinitionError
from .._limits import MANY
from ._runner import run_map

if TYPE_CHECKING:
    from .._run import RunServices
    from ._result import MapResult
    from ._types import Columns, OnRowError, OnWaiting, Resolver


def _check_name(instance: Dataset, attribute: attrs.Attribute[str], name: str) -> None:
    if not isinstance(name, str) or not name:
        raise PlayDefinitionError(f"dataset name must be a non-empty string, got {name!r}")


@attrs.frozen(eq=False)
class Dataset:
    """A durable sheet being defined: source rows plus resolver columns.

    Built by ``ctx.dataset(name, rows)``; each :meth:`with_column` returns a
    new ``Dataset`` (the builder is immutable), :meth:`run` executes it.
    """

    _services: RunServices = attrs.field(repr=False)
    name: str = attrs.field(validator=_check_name)
    source: Any
    columns: Columns = ()

    def with_column(self, name: str, resolver: Resolver) -> Dataset:
        """Add a column computed by ``resolver(row, rc)`` (sync or async).

        Resolvers run in the order they were added; each sees the input fields
        and the columns before it.
        """
        if not isinstance(name, str) or not name:
            raise PlayDefinitionError(f"column name must be a non-empty string, got {name!r}")
        if any(existing == name for existing, _ in self.columns):
            raise PlayDefinitionError(f"dataset {self.name!r} already has a column {name!r}")
        if not callable(resolver):
            raise PlayDefinitionError(f"column {name!r}: resolver must be callable")
        return attrs.evolve(self, columns=(*self.columns, (name, resolver)))

    async def run(
        self,
        key: str | None = None,
        on_row_error: OnRowError = "isolate",
        page_size: int | None = None,
        on_waiting: OnWaiting = "stop",
    ) -> MapResult:
        """Run every row not yet completed, and return a :class:`MapResult`.

        ``key`` names the field that identifies a row (default: its input
        position). ``on_row_error="isolate"`` records a failing row and goes
        on; ``"fail"`` records it, then raises its error. Errors that would
        fail every row (unknown tool, store failure, persistence latch) are
        raised either way.

        A row whose resolver waits for an outside event
        (``rc.wait_for_event``) and has none yet is *waiting*: not
        written, counted in ``MapResult.waiting``. With
        ``on_waiting="stop"`` (the default) a map with waiting rows stops
        the play once every other row is committed, and the run ends
        ``waiting`` (resume it once the events are sent); with
        ``"return"`` the play gets the :class:`MapResult` and goes on (the
        run still ends ``waiting``).
        """
        if on_row_error not in ("isolate", "fail"):
            raise PlayDefinitionError(
                f"on_row_error must be 'isolate' or 'fail', got {on_row_error!r}"
            )
        if on_waiting not in ("stop", "return"):
            raise PlayDefinitionError(f"on_waiting must be 'stop' or 'return', got {on_waiting!r}")
        size = page_size if page_size is not None else self._services.run.limits.page_size
        problem = MANY.problem(size)
        if problem is not None:
            raise PlayDefinitionError(f"page_size {problem}")
        return await run_map(
            self._services,
            self.name,
            self.source,
            self.columns,
            key=key,
            on_row_error=on_row_error,
            page_size=size,
            on_waiting=on_waiting,
        )
