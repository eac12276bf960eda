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
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ._children import ChildRunner, ChildScope, DepthAdmission, Lineage
from ._errors import (
    ChildPlayFailed,
    CorruptReceipt,
    PlayCycleError,
    PlayDefinitionError,
    PlayDepthExceeded,
    RunIdConflict,
    RunWaiting,
    format_error,
)
from ._json import play_input_json
from ._keys import child_play_key, child_run_id, fetch_receipt_key
from ._phase import child_done, current_row, waiting_on_child
from ._receipts import Dispatcher, local_executor
from ._trace._records import ChildFinished, ChildStarted, PlayLog
from ._waits import RunWaits

if TYPE_CHECKING:
    from collections.abc import Callable

    import trio

    from ._budget import ByteBudget
    from ._fetch import Fetcher, FetchOptions, FetchResponse
    from ._run_facts import RunFacts
    from ._tools import ToolCall

play_log = logging.getLogger("trioplay.play")


class RunRuntime(ChildRunner, Protocol):
    """What the run's services ask of the runtime (``Runtime``)."""

    depths: DepthAdmission
    """The row limiter and byte budget of each depth of child plays."""

    async def fetcher(self) -> Fetcher:
        """The runtime's HTTP client, opened on first use."""
        ...


@attrs.define(eq=False)
class RunServices:
    """The per-run services: identity, store, limits, admission and the receipts dispatcher."""

    run: RunFacts
    """Who the run is, its store, limits, clock, cleanup budget and recorders (the
    dispatcher's too); the map's writer and page leases clean up within ``run.cleanup``."""
    receipts: Dispatcher
    runtime: RunRuntime
    """The runtime: its HTTP client (``fetch``), the child plays it finds and runs, its
    row admission by depth."""
    datasets: set[str] = attrs.field(factory=set)
    """The names of the datasets run so far in this attempt."""
    play_children: ChildScope = attrs.field(factory=ChildScope)
    """The play's own children (``ctx.play``): their fan-out, made on first use."""
    children_started: int = 0
    """Child plays called so far in this attempt (``Limits.max_children_per_run``)."""
    waits: RunWaits = attrs.field(init=False)
    """The run's event waits: registration, lingering, the waits it suspended on."""
    tree: Lineage = attrs.field(init=False)
    """The run's place among child plays (``run.lineage``, or a root's)."""
    row_limiter: trio.CapacityLimiter = attrs.field(init=False)
    row_budget: ByteBudget = attrs.field(init=False)
    """The admission of the run's rows: its depth's (``DepthAdmission``)."""

    def __attrs_post_init__(self) -> None:
        run = self.run
        self.waits = RunWaits(run=run, spawn=self.receipts.start_soon)
        self.tree = run.lineage if run.lineage is not None else Lineage.root(run.run_id, run.play)
        self.row_limiter, self.row_budget = self.runtime.depths.of(self.tree.depth)

    def log(self, message: str, **where: str) -> None:
        """A ``play.log`` line and event; ``where`` names the map and row, if any."""
        run = self.run
        if where:
            play_log.info("[%s] %s[%s]: %s", run.run_id, where["map"], where["row"], message)
        else:
            play_log.info("[%s] %s", run.run_id, message)
        if run.facts is not None:
            run.facts.add(PlayLog, str(message), where.get("map"), where.get("row"), run.run_id)

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
        runner = self.runtime
        fn, name = runner.find_play(child)
        input_json = play_input_json(input, f"the input of child play {name!r}")
        run = self.run
        lineage = self.tree.child(run.run_id, name, run.limits)
        scope.count(run.limits, run.run_id, self.children_started)
        self.children_started += 1
        key = child_play_key(run.run_id, scope.dataset, scope.row_key, name, input_json)
        run_id = child_run_id(name, key)

        async def execute(_call: ToolCall) -> Any:
            facts = run.facts
            if facts is not None:
                where = (run_id, name, lineage.depth, scope.dataset, scope.row_key)
                facts.add(ChildStarted, run.run_id, *where)
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
                    facts.add(ChildFinished, run.run_id, run_id, status, error)

        # A child runs as long as it runs: no tool deadline (its own calls have theirs).
        effect = functools.partial(self.receipts.run_effect, "play", name, key, execute)
        async with scope.fan_out(run.limits):
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
        fetcher = await self.runtime.fetcher()
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
        key = fetch_receipt_key(self.run.run_id, outgoing.identity())
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
