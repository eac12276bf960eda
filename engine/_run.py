"""The services of one run, named: what the map runner and both contexts share.

``Runtime.run`` builds one :class:`RunServices` per attempt and hands it to
:class:`~trioplay.PlayContext` (the play's facade), to the map runner and,
through it, to each :class:`~trioplay.RowContext`. Nothing below the
``PlayContext`` receives or imports it: rooms that need the store, the limits
or the dispatcher get them from here. The durable effects that both contexts
offer (``step`` and ``fetch``) live here once; tool calls go straight to the
dispatcher (the hot path takes no extra frame).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import CorruptReceipt, PlayDefinitionError
from ._keys import fetch_receipt_key
from ._phase import StoreCalls, current_row
from ._receipts import Dispatcher, local_executor
from ._trace._records import PlayLog

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import trio

    from ._budget import ByteBudget
    from ._cleanup import CleanupBudget
    from ._fetch import Fetcher, FetchOptions, FetchResponse
    from ._limits import Limits
    from ._loop_lag import LoopWatch
    from ._store import Store
    from ._tools import ToolCall
    from ._trace import Recorder
    from ._waits import RunWaits

play_log = logging.getLogger("trioplay.play")


@attrs.define(eq=False)
class RunServices:
    """The per-run services: identity, store, limits, admission and the receipts dispatcher."""

    run_id: str
    attempt: int
    play: str
    store: Store
    limits: Limits
    owner: str
    wall_clock: Callable[[], float]
    row_limiter: trio.CapacityLimiter
    row_budget: ByteBudget
    receipts: Dispatcher
    fetcher: Callable[[], Awaitable[Fetcher]]
    cleanup: CleanupBudget
    """The run's one cleanup budget: the map's writer and page leases clean up within it."""
    waits: RunWaits
    """The run's event waits: registration, lingering, the waits it suspended on."""
    facts: Recorder | None = None
    """Where every event goes (the ``on_event`` listener reads its facts), or ``None``."""
    trace: Recorder | None = None
    """``facts`` when a sink wants every event (a row's, a call's), else ``None``: test it
    before building one."""
    store_calls: StoreCalls = attrs.field(factory=StoreCalls)
    """The run's store calls in flight (``store`` reports to it), for the stall line."""
    loop_watch: LoopWatch | None = None
    """The run's loop-lag watchdog, for the stall line's ``loop_lag_ms``."""
    datasets: set[str] = attrs.field(factory=set)
    """The names of the datasets run so far in this attempt."""

    def log(self, message: str, **where: str) -> None:
        """A ``play.log`` line and event; ``where`` names the map and row, if any."""
        if where:
            play_log.info("[%s] %s[%s]: %s", self.run_id, where["map"], where["row"], message)
        else:
            play_log.info("[%s] %s", self.run_id, message)
        if self.facts is not None:
            self.facts.add(PlayLog, str(message), where.get("map"), where.get("row"), self.run_id)

    async def step(
        self, receipt_key: str, name: str, fn: Callable[[], Any], stale_after: float | None
    ) -> Any:
        """Run ``fn()`` once under ``receipt_key`` and replay its JSON result afterwards."""
        if not callable(fn):
            raise PlayDefinitionError(f"step {name!r}: fn must be callable")
        return await self.receipts.run_effect(
            "step", name, receipt_key, local_executor(fn), stale_after=stale_after
        )

    async def fetch(
        self, url: str, options: FetchOptions, *, stale_after: float | None, force: bool
    ) -> FetchResponse:
        """A recorded HTTP request (``ctx.fetch`` and ``rc.fetch``)."""
        from ._fetch import FetchResponse

        self.receipts.raise_if_ended()  # before the runtime's client is opened for nothing
        fetcher = await self.fetcher()
        # Parsed and checked once: its identity keys the receipt, and it is what is sent.
        outgoing = fetcher.prepare(url, options)

        async def execute(_call: ToolCall) -> Any:
            # Admitted: from here on the row (if any) is in phase "fetch".
            row = current_row()
            if row is not None:
                row.enter("fetch")
            try:
                response = await fetcher.send(outgoing, timeouts=options.timeouts)
            finally:
                if row is not None:
                    row.enter("resolver")
            return response.to_record()

        name = f"{outgoing.method} {fetcher.redact(url)}"
        key = fetch_receipt_key(self.run_id, outgoing.identity())
        # The fetch deadlines bound it; the tool timeout is only a backstop.
        record = await self.receipts.run_effect(
            "fetch", name, key, execute, force=force, stale_after=stale_after
        )
        try:
            return FetchResponse.from_record(record)
        except (KeyError, TypeError, ValueError) as exc:
            # Only a replayed record can be malformed: its stored JSON was edited.
            problem = f"not a recorded response: {type(exc).__name__}: {exc}"
            raise CorruptReceipt(key, "fetch", name, "result", problem) from None
