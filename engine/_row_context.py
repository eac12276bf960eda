"""What a resolver holds: :class:`RowContext`, the durable effects of one row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._keys import row_step_receipt_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._fetch import FetchResponse
    from ._limits import FetchTimeouts
    from ._run import RunServices


class RowContext:
    """The second argument of a resolver: ``tool``, ``fetch``, ``step``, ``log`` for one row.

    ``dataset`` and ``key`` name the row. The effects are the play's (see
    :class:`~trioplay.PlayContext`), scoped to this row where it matters: a
    step's key is the row's own. (The stall observer learns the row's phases
    from the row's task itself, see :mod:`trioplay._phase`.)
    """

    __slots__ = ("_services", "dataset", "key")

    def __init__(self, services: RunServices, dataset: str, key: str) -> None:
        self._services = services
        self.dataset = dataset
        self.key = key

    @property
    def run_id(self) -> str:
        return self._services.run_id

    async def tool(
        self,
        tool_id: str,
        input: Any,
        *,
        force: bool = False,
        stale_after: float | None = None,
        timeout: float | None = None,
        receipt_wait: float | None = None,
        key: str | None = None,
    ) -> Any:
        """Same as :meth:`PlayContext.tool`."""
        services = self._services
        return await services.receipts.call_tool(
            tool_id,
            input,
            scope=services.play,
            force=force,
            stale_after=stale_after,
            timeout=timeout,
            receipt_wait=receipt_wait,
            key=key,
        )

    async def step(
        self, key: str, fn: Callable[[], Any], *, stale_after: float | None = None
    ) -> Any:
        """A durable step scoped to this row (same ``key`` in two rows: two steps)."""
        services = self._services
        receipt_key = row_step_receipt_key(services.run_id, self.dataset, self.key, key)
        return await services.step(receipt_key, key, fn, stale_after)

    async def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | str | None = None,
        auth: Any = None,
        timeouts: FetchTimeouts | None = None,
        stale_after: float | None = None,
        force: bool = False,
    ) -> FetchResponse:
        """Same as :meth:`PlayContext.fetch`; from its admission, the row is in phase ``fetch``."""
        return await self._services.fetch(
            url,
            method=method,
            headers=headers,
            json=json,
            content=content,
            auth=auth,
            timeouts=timeouts,
            stale_after=stale_after,
            force=force,
        )

    def log(self, message: str) -> None:
        """Log a line for this row (logger ``trioplay.play``, and a ``play.log`` event)."""
        self._services.log(message, map=self.dataset, row=self.key)
