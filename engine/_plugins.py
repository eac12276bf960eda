"""Implementations found by name: stores by URL scheme, row sources by file format.

The engine defines the :class:`~trioplay.Store` protocol and what a row source
is; the implementations in ``trioplay.stores`` and ``trioplay.adapters``
depend on the engine, never the reverse. So that ``open_runtime(store=URL)``
and ``ctx.csv(path)`` still work, the engine finds them through entry points
(``[project.entry-points]`` in ``pyproject.toml``): group ``trioplay.stores``
maps a URL scheme to a factory ``factory(url) -> Store``, group
``trioplay.sources`` a format to a class ``cls(path, required=...)``. Another
distribution can register its own the same way. Each lookup imports only
the implementation it names (SQLite never imports psycopg).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ._errors import PlayDefinitionError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

STORES = "trioplay.stores"
SOURCES = "trioplay.sources"

DEFAULT_STORE_URL = "sqlite:///.trioplay/trioplay.db"
"""The store a runtime (and a command) opens when none is named."""


@functools.cache
def _registered(group: str) -> dict[str, EntryPoint]:
    # Imported here, on the first lookup: importlib.metadata is over eighty
    # modules, which `trioplay --help` and `import trioplay` need not load.
    from importlib.metadata import entry_points

    return {point.name: point for point in entry_points(group=group)}


def load(group: str, name: str) -> Any | None:
    """The object registered under ``name`` in ``group``, or None."""
    point = _registered(group).get(name)
    return None if point is None else point.load()


def registered(group: str) -> list[str]:
    return sorted(_registered(group))


def open_store(url: str) -> Any:
    """Build the store for ``url`` with the factory registered for its scheme."""
    scheme = url.split(":", 1)[0] if ":" in url else url
    factory = load(STORES, scheme)
    if factory is None:
        schemes = ", ".join(f"{name}://" for name in registered(STORES))
        raise ValueError(
            f"unknown store URL {url!r}: the registered schemes are {schemes or 'none'}"
            + ("" if schemes else " (install trioplay: pip install -e .)")
        )
    return factory(url)


def source(kind: str, path: str, required: Any, **options: Any) -> Any:
    """A row source of format ``kind`` (``csv``, ``jsonl``) over ``path``."""
    cls = load(SOURCES, kind)
    if cls is None:
        found = ", ".join(registered(SOURCES)) or "none"
        raise PlayDefinitionError(
            f"no {kind} row source is registered (found: {found}); "
            "install trioplay (pip install -e .) so that its entry points exist"
        )
    return cls(path, required=required, **options)
