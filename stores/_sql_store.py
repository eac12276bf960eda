"""What the two SQL stores share as stores: their life on a bridge, and the waits.

:class:`trioplay.stores.sqlite.SqliteStore` and
:class:`trioplay.stores.postgres.PostgresStore` each run their jobs on a
bridge (one thread, or a pool of them: ``_sqlite_bridge``, ``_pg_bridge``).
:class:`SqlStore` holds that bridge's life once: :meth:`~SqlStore.open`
starts it and migrates the schema (closing it again if that fails),
:meth:`~SqlStore.aclose` stops it, and :meth:`~SqlStore._bridge_for` is how
every call finds it, or fails because the store is not open. Each store says
how to start its bridge (``_start``), how to migrate (``_migrate``), and how
a call runs on it and names its errors (``_call``).
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from trioplay import StoreError

from ._terms import StoreTerms
from ._waits import WaitOperations


class Bridge(Protocol):
    """Where a SQL store's jobs run: it only needs to be stopped, once."""

    async def stop(self) -> None:
        """Stop, shielded from the caller's cancellation: a store is closed whole."""


B = TypeVar("B", bound=Bridge)


class SqlStore(WaitOperations, StoreTerms, Generic[B]):
    """A store whose jobs run on a bridge of type ``B`` while it is open."""

    _bridge: B | None = None

    def _start(self) -> B:
        """A new bridge, ready to run jobs (``open`` migrates on it next)."""
        raise NotImplementedError

    async def _migrate(self) -> None:
        """Create or migrate the schema, as the job named ``open``."""
        raise NotImplementedError

    async def open(self) -> None:
        if self._bridge is not None:
            raise StoreError(f"{self.url}: open: the store is already open")
        self._bridge = self._start()
        try:
            await self._migrate()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        bridge, self._bridge = self._bridge, None
        if bridge is not None:
            await bridge.stop()

    def _bridge_for(self, operation: str) -> B:
        """The bridge to run ``operation`` on; a :class:`StoreError` if the store is closed."""
        bridge = self._bridge
        if bridge is None:
            raise StoreError(f"{self.url}: {operation}: the store is not open")
        return bridge
