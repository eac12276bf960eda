"""Row sources: what a map reads its rows from, and how it opens one.

A source is any iterable of mappings: a list, a generator, or a
:class:`RowSource` such as ``ctx.csv(...)``, which can check itself before any
tool call and be read again page by page.

A row read from a file may also say where it came from: an attribute
``origin``, a ``(path, line)`` tuple (see :func:`row_origin`). The map names
that place in the errors of the row (a missing or empty key, for one).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

from ._errors import PlayDefinitionError

if TYPE_CHECKING:
    from collections.abc import Callable


@runtime_checkable
class RowSource(Protocol):
    """A re-readable source that can check itself (``trioplay.adapters.readers``)."""

    def validate(self) -> int | None:
        """Scan the whole source once, raise on bad input, return the row count."""
        ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...


def row_origin(row: object) -> tuple[str, int] | None:
    """Where ``row`` came from, ``(path, line)``, if its source said so."""
    origin = getattr(row, "origin", None)
    return origin if isinstance(origin, tuple) else None


@attrs.frozen
class OpenedSource:
    """An iterator over the rows, a way to read a page again if there is one, the total."""

    rows: Iterator[Any]
    reread: Callable[[int, int], list[Any]] | None
    total: int | None
    fields: tuple[str, ...] = ()  # the input's field names, when the source names them


async def open_source(dataset: str, source: Any) -> OpenedSource:
    """Check ``source`` (a full scan in a thread for a :class:`RowSource`) and open it."""
    total: int | None = None
    fields: tuple[str, ...] = ()
    if isinstance(source, RowSource):
        # A full structural scan before any tool call: bad lines fail now.
        counted = await trio.to_thread.run_sync(source.validate, abandon_on_cancel=True)
        if isinstance(counted, int):
            total = counted
        named = getattr(source, "fields", None)  # a CSV header (adapters.readers)
        if isinstance(named, tuple) and all(isinstance(name, str) for name in named):
            fields = named
    elif hasattr(source, "__len__"):
        total = len(source)
    if not isinstance(source, Iterable) or isinstance(source, str | bytes | Mapping):
        raise PlayDefinitionError(
            f"dataset {dataset!r}: rows must be an iterable of mappings "
            f"(a list, a generator, ctx.csv(...)), got {type(source).__name__}"
        )
    rows = iter(source)
    if rows is source:
        return OpenedSource(rows, None, total, fields)  # a generator: read once

    def reread(offset: int, length: int) -> list[Any]:
        return list(itertools.islice(iter(source), offset, offset + length))

    return OpenedSource(rows, reread, total, fields)
