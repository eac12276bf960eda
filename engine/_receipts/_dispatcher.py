"""The dispatcher: every external effect of a run goes through a receipt here.

One dispatcher per run, its tasks in the run's nursery, so cancelling a run
stops every lane, provider call and wait it started.

The path of a tool call (each step in the module named):

1. **Key** (``.._keys``). ``sha256`` over the canonical JSON of (operation,
   tool id, play scope) and of the input, unless the caller gave ``key``.
2. **Followers** (``_call.InFlight``). An identical call already in flight
   in this run is followed: the follower gets the owner's result, no second
   claim. A forced call follows only a forced one; it claims with force
   itself, and identical calls made after it follow it.
3. **Lane** (``_lane``). Calls to one tool form batches, each claimed in one
   store call: by default by group commit (an idle lane claims at once; the
   calls made meanwhile are the next batch), or with ``tool_batch_window``
   set, for a fixed window from the first call; either way up to
   ``tool_batch_max`` calls / ``tool_batch_max_bytes``.
4. **Outcomes** (``_claims``). The claim runs in the run's hydration
   turn, one claim at a time: completed receipts are replayed (a payload
   that does not read back is :class:`CorruptReceipt`, for its callers
   only); recorded failures raise again; receipts held by another live
   owner are left to the run's poller (one claim of all waiting keys per
   interval, its sleep outside the turn); claimed ones leave the turn and
   execute.
5. **Execution** (``_execute``, ``_leases``). The caller's own task runs its
   claimed call (a native batch request runs in a task of its own); the
   run's heartbeat task keeps the leases of every cohort of calls claimed
   together, renewing all that are due in one store call.
   The governor admits the call; it runs under its timeout with the
   provider idempotency key (retried within the claim if the tool allows
   ``retries``). Its settlement (complete, fail or release) goes to the
   settler (``_settler``), which coalesces the writes of many calls into
   one store call and then delivers each outcome: the caller has its value
   only once its receipt is completed. The governor slot, and the call's
   place in flight, are held until that write is done.

Steps and fetches (:meth:`Dispatcher.run_effect`) come with their key;
instead of a tool's lane (step 3), their claims go through the run's lane
of direct effects (``_lane``: group commit, no window), then on as above.

A completion fenced off by a newer owner is delivered as
:class:`LeaseLost`. If recording a completion fails after the provider
succeeded, its callers get :class:`ReceiptNotRecorded` and the persistence
latch trips (``_settler``): no further provider call starts in this run, and
the map and the run fail with :class:`PersistenceLatchTripped`
(:meth:`Dispatcher.raise_if_latched`).

:func:`open_dispatcher` opens a dispatcher in a nursery of its own, which
holds every task it starts (the settler, the heartbeat, lanes, claims, the
poller of waits, native batch requests); its block is where the run's play
runs. A call made after the block is left raises :class:`RunEnded`.

The collaborators get the run's :class:`DispatchSetup` and the collaborators
(or bound methods) they need, here, and never the dispatcher: the
claimer takes the executor and the leases whole. The dependencies run
``_setup, _call <- _lane, _settler, _leases <- _execute <- _claims <-
_dispatcher``.
"""

from __future__ import annotations

import functools
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

from .._errors import PlayDefinitionError, RunEnded
from .._groups import open_nursery, start, start_soon
from .._json import canonical_json
from .._keys import tool_receipt_key
from .._phase import calling
from .._trace._records import CallQueued, ReceiptFollowed
from ._call import DispatchStats, InFlight, _Call
from ._claims import Claimer
from ._execute import Executor
from ._lane import _EffectLane, _Lane
from ._leases import Leases
from ._settler import _Settler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable

    import trio

    from .._governor import ProviderGate
    from ._call import Execute
    from ._setup import DispatchSetup


class Dispatcher:
    """Runs the receipts protocol for one run (see the module docstring)."""

    def __init__(self, setup: DispatchSetup, nursery: trio.Nursery) -> None:
        self.stats = DispatchStats()
        self._trace = setup.trace
        self.run_id = setup.run_id
        self.ended = False  # set when open_dispatcher's block is left: calls raise RunEnded
        spawn = functools.partial(start_soon, nursery)  # protected from Ctrl-C
        inflight = InFlight()
        self._settler = settler = _Settler(setup, inflight.deliver)
        self._leases = leases = Leases(setup)
        executor = Executor(setup, self.stats, settler, inflight.deliver, leases.release_shielded)
        claimer = Claimer(
            setup,
            spawn=spawn,
            stats=self.stats,
            deliver=inflight.deliver,
            executor=executor,
            leases=leases,
        )
        self._tools = setup.tools
        self._play = setup.play  # the scope of its tool receipts' keys
        self._governor = setup.governor
        self._limits = setup.limits
        self._spawn = self.start_soon = spawn
        """``start_soon(fn, *args)``: a task in the run's nursery (the run's play runs there)."""
        self._inflight = inflight.calls
        self._follow = inflight.follow
        self._claimer = claimer
        self._run_owned = executor.run_owned
        self._lanes: dict[str, _Lane] = {}
        self._effects: _EffectLane | None = None
        # Per provider: its gate, and whether its calls queue for a global slot
        # without a task of their own (Governor.is_unlimited).
        self._gates: dict[str, tuple[ProviderGate, bool]] = {}

    def raise_if_latched(self, subject: str) -> None:
        """Fail ``subject`` (a map, a run) if a completion could not be recorded."""
        if self._settler.latch is not None:
            raise self._settler.latch_error(subject)

    def raise_if_ended(self) -> None:
        """Refuse a call made after the run ended (a context kept past its run)."""
        if self.ended:
            raise RunEnded(self.run_id)

    async def drain(self) -> None:
        """Wait until every settlement handed over so far is written (or failed to be)."""
        await self._settler.drain()

    async def settle_late(self) -> None:
        """Once the dispatcher's tasks are gone: write the settlements handed over after
        the settler stopped (a cancelled run's last calls), within the cleanup budget."""
        await self._settler.write_late()

    # -- entry points -------------------------------------------------------
    def call_tool(
        self,
        tool_id: str,
        input: Any,
        *,
        force: bool,
        stale_after: float | None,
        timeout: float | None,
        receipt_wait: float | None,
        key: str | None,
    ) -> Awaitable[Any]:
        """Make a tool call and return the awaitable of its outcome; await it at once.

        The options are those of :meth:`DurableEffects.tool`, its one caller,
        which holds their defaults.

        A plain function: its part that does not wait runs now, and the
        caller awaits the owner's (or the followed call's) coroutine itself,
        so a parked caller's stack is a frame shorter each time it is
        resumed, twice per executed call.
        """
        if self.ended:  # raise_if_ended, inline: a frame less per call
            raise RunEnded(self.run_id)
        spec = self._tools.get(tool_id)
        try:
            text = canonical_json(input)
        except (TypeError, ValueError) as exc:
            raise PlayDefinitionError(
                f"tool {tool_id!r}: its input must be JSON-serialisable ({exc})"
            ) from None
        if key is None:
            key = tool_receipt_key(tool_id, text, self._play)
        provider = spec.provider
        entry = self._gates.get(provider)
        if entry is None:
            made = self._governor.gate(provider, spec.rate, spec.concurrency)
            # Asked once per provider: a gate's limits are set when it is made.
            entry = self._gates[provider] = (made, self._governor.is_unlimited(made))
        gate, queues = entry
        call = _Call(
            operation="tool",
            name=tool_id,
            key=key,
            execute=spec.fn,
            gate=gate,
            kind="provider",
            queues=queues,
            input=input,
            size=len(text),
            force=force,
            stale_after=stale_after,
            timeout=timeout if timeout is not None else spec.timeout,
            receipt_wait=receipt_wait,
            retries=spec.retries,
        )
        lane = self._lanes.get(tool_id)
        if lane is None:
            lane = self._lanes[tool_id] = _Lane(self._claimer, spec, self._limits)
            self._spawn(lane.run)
        return self._submit(call, lane, tool_id, provider)

    def run_effect(
        self,
        operation: Literal["step", "fetch", "play"],
        name: str,
        key: str,
        execute: Execute,
        *,
        force: bool = False,
        stale_after: float | None = None,
        timeout: float | None = None,
    ) -> Awaitable[Any]:
        """Run one effect (a step, a fetch, a child play) through its receipt, in the caller's task.

        Like :meth:`call_tool`, returns the awaitable of its outcome. Its claim
        goes with those of the effects made meanwhile (the run's lane of
        direct effects); the effect itself runs in the task that awaits it,
        bounded by ``timeout``, else ``Limits.tool_timeout`` (a fetch's own
        deadlines come first). Its failures are the caller's, never recorded.
        """
        if self.ended:
            raise RunEnded(self.run_id)
        fetch = operation == "fetch"
        call = _Call(
            operation=operation,
            name=name,
            key=key,
            execute=execute,
            gate=None,
            # A fetch counts against the governor's one provider "fetch",
            # which has no limits of its own; a step against nothing.
            kind="fetch" if fetch else "local",
            queues=fetch,
            force=force,
            stale_after=stale_after,
            timeout=timeout,
            record_failures=False,
        )
        effects = self._effects
        if effects is None:
            effects = self._effects = _EffectLane(self._claimer, self._limits)
            self._spawn(effects.run)
        provider = "fetch" if fetch else None
        return self._submit(call, effects, "fetch", provider)

    # -- the one path of every call -------------------------------------------
    def _submit(
        self, call: _Call, lane: _Lane | _EffectLane, tool: str, provider: str | None
    ) -> Awaitable[Any]:
        """Follow the identical call in flight, or put ``call`` in flight and in ``lane``.

        Returns the awaitable of the outcome: the followed call's, or the
        owner's own. A forced call follows only a forced one: it must not
        take a cached value. A call that counts against a ``provider``
        tells its row (if any) which ``tool`` it is in, for the stall line.
        """
        key = call.key
        existing = self._inflight.get(key)
        if existing is not None and (existing.force or not call.force):
            self.stats.followed += 1
            if self._trace is not None:
                self._trace.add(ReceiptFollowed, key)
            return self._follow(existing)
        if provider is not None:
            call.row = calling(tool, provider)
        self._inflight[key] = call
        if self._trace is not None:
            row = call.row
            self._trace.add(
                CallQueued, key, call.operation, call.name, provider, row.key if row else None
            )
        lane.submit(call)
        return self._run_owned(call)


@asynccontextmanager
async def open_dispatcher(setup: DispatchSetup) -> AsyncIterator[Dispatcher]:
    """``async with open_dispatcher(setup) as receipts:`` the receipts of one run.

    The dispatcher's tasks live in a nursery of its own, opened here and
    closed on exit, so nothing it started outlives the block. Leaving the
    block normally waits until every settlement handed over is written,
    fails with :class:`PersistenceLatchTripped` if a completion could not
    be, and then stops the lanes and heartbeats. Leaving it with an error
    (or cancelled) cancels them; the settler gives the settlements still
    pending one shielded try within ``cleanup``, the run's cleanup budget,
    which starts when this nursery begins to unwind. Either way, from then
    on every call through the dispatcher raises :class:`RunEnded`.
    """
    async with open_nursery() as nursery:
        start_soon(nursery, setup.cleanup.watch)
        dispatcher = Dispatcher(setup, nursery)
        await start(nursery, dispatcher._settler.run)
        await start(nursery, dispatcher._leases.run)
        try:
            yield dispatcher
        finally:
            dispatcher.ended = True
        await dispatcher.drain()
        dispatcher.raise_if_latched(f"run {setup.run_id}")
        nursery.cancel_scope.cancel()
