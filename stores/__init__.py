"""Stores for trioplay: ``memory://``, ``sqlite:///path.db``, ``postgresql://...``.

``open_store(url)`` picks the implementation by URL scheme and imports it
lazily, so using SQLite never imports psycopg.
"""

from __future__ import annotations

from trioplay import DEFAULT_STORE_URL, Store


def open_store(url: str) -> Store:
    """Build the store for ``url`` (not yet opened: the runtime calls ``open``).

    Raises ``ValueError`` naming the URL and the schemes that are understood.
    """
    if url == "memory://" or url.startswith("memory://"):
        from .memory import MemoryStore

        return MemoryStore()
    if url.startswith("sqlite://"):
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore.from_url(url)
    raise ValueError(
        f"unknown store URL {url!r}: use memory://, sqlite:///path.db or postgresql://..."
    )


__all__ = ["DEFAULT_STORE_URL", "open_store"]
