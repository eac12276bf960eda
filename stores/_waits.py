"""The ``WaitStore`` operations of the SQL stores, each handed to its job.

Both SQL stores inherit :class:`WaitOperations` and define ``_wait_job``,
which runs the job of that name from their jobs module (``_sqlite_jobs``,
``_pg_jobs``) in one transaction; the decisions are in
:mod:`trioplay.stores._rules`. Kept apart from the store classes, which hold
the other four protocols.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trioplay import EventRecord, SendRequest, SendResult, WaitRecord, WaitRequest


class WaitOperations:
    """Waits and events (``trioplay.WaitStore``) for a store that defines ``_wait_job``."""

    @property
    def url(self) -> str:
        raise NotImplementedError

    async def _wait_job(self, operation: str, *args: Any, read: bool = False) -> Any:
        """Run the job named ``operation`` with ``args`` (``read``: it writes nothing)."""
        raise NotImplementedError

    async def register_waits(
        self, requests: Sequence[WaitRequest], *, now: float
    ) -> list[WaitRecord]:
        if not requests:
            import trio  # here only: a store used without Trio (run_direct) registers no wait

            await trio.lowlevel.checkpoint()
            return []
        records: list[WaitRecord] = await self._wait_job(
            "register_waits", list(requests), float(now)
        )
        return records

    async def poll_waits(self, wait_keys: Sequence[str], *, now: float) -> list[WaitRecord | None]:
        found: dict[str, WaitRecord] = await self._wait_job(
            "poll_waits", list(wait_keys), float(now)
        )
        return [found.get(key) for key in wait_keys]

    async def send_event(self, request: SendRequest, *, now: float) -> SendResult:
        result: SendResult = await self._wait_job("send_event", request, float(now), self.url)
        return result

    async def cancel_run(self, run_id: str, *, now: float) -> int:
        count: int = await self._wait_job("cancel_run", run_id, float(now), self.url)
        return count

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        waits: list[WaitRecord] = await self._wait_job("list_waits", run_id, read=True)
        return waits

    async def list_events(self, run_id: str, *, unclaimed_only: bool = False) -> list[EventRecord]:
        events: list[EventRecord] = await self._wait_job(
            "list_events", run_id, unclaimed_only, read=True
        )
        return events
