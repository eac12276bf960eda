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

import functools
import logging
import math
from typing import TYPE_CHECKING, Any

import attrs

from ._children import ChildScope, Lineage
from ._errors import (
    ChildPlayFailed,
    CorruptReceipt,
    PlayCycleError,
    PlayDefinitionError,
    PlayDepthExceeded,
    PlayInputError,
    RunIdConflict,
    RunWaiting,
    format_error,
)
from ._json import canonical_json
from ._keys import child_play_key, child_run_id, fetch_receipt_key
from ._phase import StoreCalls, child_done, current_row, waiting_on_child
from ._receipts import Dispatcher, local_executor
from ._trace._records import ChildFinished, ChildStarted, PlayLog

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import trio

    from ._budget import ByteBudget
    from ._children import ChildRunner
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
    lineage: Lineage | None = None
    """The run's place among child plays; ``None``: a root (see :attr:`tree`)."""
    children: ChildRunner | None = None
    """The runtime, to find and run child plays (``ctx.play``, ``rc.play``)."""
    play_children: ChildScope = attrs.field(factory=ChildScope)
    """The play's own children (``ctx.play``): their fan-out, made on first use."""
    children_started: int = 0
    """Child plays called so far in this attempt (``Limits.max_children_per_run``)."""

    @property
    def tree(self) -> Lineage:
        """The run's lineage, a root's made on first use."""
        if self.lineage is None:
            self.lineage = Lineage.root(self.run_id, self.play)
        return self.lineage

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

    async def call_child(self, scope: ChildScope, child: Any, input: Any) -> Any:
        """``ctx.play`` / ``rc.play``: run ``child`` on ``input`` through a ``play`` receipt.

        The guards come first and write nothing (see ``_children``); then the
        receipt is claimed: completed, its output is replayed without opening
        the child; else the child runs here, in the caller's task and under
        the receipt's lease, as the run whose id derives from this run, the
        caller's row and the input.
        """
        self.receipts.raise_if_ended()
        runner = self.children
        if runner is None:
            raise PlayDefinitionError("child plays run only in a runtime's run")
        fn, name = runner.find_play(child)
        try:
            input_json = canonical_json(input)
        except (TypeError, ValueError) as exc:
            raise PlayInputError(
                f"the input of child play {name!r} must be JSON-serialisable: {exc}"
            ) from None
        lineage = self.tree.child(self.run_id, name, self.limits)
        scope.count(self.limits, self.run_id, self.children_started)
        self.children_started += 1
        key = child_play_key(self.run_id, scope.dataset, scope.row_key, name, input_json)
        run_id = child_run_id(name, key)

        async def execute(_call: ToolCall) -> Any:
            facts = self.facts
            if facts is not None:
                where = (run_id, name, lineage.depth, scope.dataset, scope.row_key)
                facts.add(ChildStarted, self.run_id, *where)
            status, error = "failed", None
            row = waiting_on_child(run_id)
            try:
                output = await runner.run_child(fn, input, run_id, lineage)
                status = "completed"
                return output
            except RunWaiting:
                # The child waits for outside events: its caller waits too (below).
                # An Exception, so the receipt is released, not recorded.
                status = "waiting"
                raise
            except (PlayCycleError, PlayDepthExceeded, RunIdConflict) as exc:
                # About the tree of plays or the call, not the child's work: raised as
                # they are (a cycle or a depth fails the caller's map once, not row by row).
                error = format_error(exc)
                raise
            except Exception as exc:
                error = format_error(exc)
                raise ChildPlayFailed(run_id, exc) from exc
            except BaseException:
                status, error = "cancelled", "cancelled"
                raise
            finally:
                child_done(row)
                if facts is not None:
                    facts.add(ChildFinished, self.run_id, run_id, status, error)

        # A child runs as long as it runs: no tool deadline (its own calls have theirs).
        effect = functools.partial(self.receipts.run_effect, "play", name, key, execute)
        async with scope.fan_out(self.limits):
            try:
                return await effect(timeout=math.inf)
            except RunWaiting as waiting:
                raise self.waits.on_child(waiting) from None

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
