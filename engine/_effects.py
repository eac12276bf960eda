"""The durable effects both contexts offer, once: ``tool`` and ``fetch``.

:class:`~trioplay.PlayContext` and :class:`~trioplay.RowContext` inherit
them; each adds what differs (a step's key, the log line, the datasets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._fetch import FetchOptions

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._fetch import FetchResponse
    from ._limits import FetchTimeouts
    from ._run import RunServices


class DurableEffects:
    """``tool`` and ``fetch`` over the run's services (a base of both contexts)."""

    __slots__ = ("_services",)

    def __init__(self, services: RunServices) -> None:
        self._services = services

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
        """Call a registered tool through its receipt.

        A completed receipt for the same tool and input (within this play) is
        replayed without calling the provider. ``force=True`` calls again
        (never while another owner holds a live lease); ``stale_after`` (s)
        refreshes older results; ``timeout`` (s) bounds the call;
        ``receipt_wait`` (s) bounds waiting on another owner; ``key`` replaces
        the content-addressed receipt key.

        The value is returned once its receipt is recorded. Raises
        :class:`UnknownToolError`, :class:`ToolExecutionError` (also
        replayed from a recorded failure), :class:`ProviderTransientError`,
        :class:`ReceiptWaitTimeout`, :class:`LeaseLost` (also when another
        owner took the lease over before the result was recorded),
        :class:`ReceiptNotRecorded` (the result could not be recorded),
        :class:`PersistenceLatchTripped`, :class:`RunEnded` (the context's
        run has ended).
        """
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
        """An HTTP request under deadlines and egress rules, recorded in a receipt.

        Within a map row, the row is in phase ``fetch`` from the request's
        admission. See ``docs/fetch.md``. Raises :class:`FetchTimeout`,
        :class:`UnsafeOutboundUrl`, :class:`FetchError`.
        """
        options = FetchOptions(
            method=method, headers=headers, json=json, content=content, auth=auth, timeouts=timeouts
        )
        return await self._services.fetch(url, options, stale_after=stale_after, force=force)
