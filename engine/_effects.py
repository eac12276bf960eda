"""The durable effects both contexts offer, once: ``tool``, ``fetch`` and event waits.

:class:`~trioplay.PlayContext` and :class:`~trioplay.RowContext` inherit
them; each adds what differs (a step's key, the log line, the datasets,
whose wait it is: :meth:`DurableEffects._wait_scope`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._fetch import FetchOptions
from ._waits import MISSING, open_wait

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._fetch import FetchResponse
    from ._limits import FetchTimeouts
    from ._run import RunServices
    from ._waits import EventWait, Occurrences, Parking


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
        return await self._services.receipts.call_tool(
            tool_id,
            input,
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

    # -- event waits (issue 22) ------------------------------------------------
    def _wait_scope(self) -> tuple[str | None, str | None, Occurrences, Parking | None]:
        """Whose waits these are: dataset, row key, their occurrence counter, how a
        row lingers (``None`` for the play)."""
        raise NotImplementedError

    async def event_wait(
        self,
        name: str,
        *,
        key: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        default: Any = MISSING,
        linger: float | None = None,
    ) -> EventWait:
        """Register a wait for the event ``name`` with ``key`` and return its handle.

        The handle's ``token`` is opaque and unguessable (put it in a
        webhook URL: ``trioplay send-event RUN --token TOKEN`` or
        ``rt.send_event(run_id, token=...)`` delivers to this wait); then
        ``await handle`` as :meth:`wait_for_event` does. Registering is
        durable: a rerun meets the same wait, with the same token and
        deadline. Raises :class:`InvalidWait` (naming the argument) before
        anything is written.
        """
        self._services.receipts.raise_if_ended()  # a context kept past its run
        dataset, row_key, occurrences, parking = self._wait_scope()
        return await open_wait(
            self._services.waits,
            dataset=dataset,
            row_key=row_key,
            occurrences=occurrences,
            parking=parking,
            name=name,
            key=key,
            timeout=timeout,
            deadline=deadline,
            default=default,
            linger=linger,
        )

    async def wait_for_event(
        self,
        name: str,
        *,
        key: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        default: Any = MISSING,
        linger: float | None = None,
    ) -> Any:
        """Wait for the outside event ``name`` with ``key``, durably, and return its payload.

        Every wait is bounded: ``timeout=`` (seconds from the first time
        the wait is registered) or ``deadline=`` (epoch seconds), at most
        ``Limits.max_event_wait``. The deadline is written once: a rerun
        or a restart never extends it. An event sent before the wait is
        registered is kept and taken here.

        When no event is there yet the row *suspends* (in a play, the run
        does): it is neither completed nor failed, the run ends
        ``waiting`` (``rt.run`` raises :class:`RunWaiting`, the command
        line exits 4), and resuming the run (a rerun) replays the row's
        receipts up to here and returns the delivered payload. ``linger``
        (seconds, at most 300) first waits in-process, the row's slot
        released, for an event that comes back quickly.

        Past the deadline: ``default`` if given, else
        :class:`EventWaitTimeout`. A rejected event raises
        :class:`EventRejected`. The suspension is a ``BaseException``:
        ``except Exception`` cannot swallow it.
        """
        handle = await self.event_wait(
            name, key=key, timeout=timeout, deadline=deadline, default=default, linger=linger
        )
        return await handle.result()
