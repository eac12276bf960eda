"""Claims: a batch of calls claimed in one store call, and what becomes of each outcome.

Claims take the run's **hydration turn** one batch at a time: the store's
answer carries the payloads of completed receipts, which can parse into many
times their size, so at most one batch's payloads are fetched and decoded at
once. Inside the turn, completed receipts are replayed and recorded failures
raised again; a payload that does not read back fails its callers with
:class:`CorruptReceipt` and nothing else. Calls that turn out to be ours to
run leave the turn before they run: they form a cohort, whose leases the
run's heartbeat renews together, and go to the executor. Receipts held by
another live owner are waited on by the run's **poller**, which claims every
waiting key again in one store call per ``receipt_wait_delay``, its sleep
outside the turn.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._errors import CorruptReceipt, ReceiptWaitTimeout, error_from_record
from .._json import loads
from .._owner import owner_is_dead
from .._records import Claimed, ClaimRequest, Lease, Settled
from .._trace._records import ReceiptClaimed, ReceiptReplayed, ReceiptWaited
from ._call import CLAIMED, SETTLING, _Cohort

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._records import ClaimOutcome, Receipt
    from .._tools import ToolSpec
    from ._call import DispatchStats, _Call
    from ._execute import Executor
    from ._leases import Leases
    from ._setup import DispatchSetup


# Poll times are sums of the interval; a wait's deadline is one product. They
# drift apart by far less than this, which is far less than any interval.
_EPSILON = 1e-6


class Claimer:
    """Claims calls for one run and acts on each outcome (see the module docstring)."""

    def __init__(
        self,
        setup: DispatchSetup,
        *,
        spawn: Callable[..., None],
        stats: DispatchStats,
        deliver: Callable[..., None],
        executor: Executor,
        leases: Leases,
    ) -> None:
        self._trace = setup.trace
        self._store = setup.store
        self._run_id = setup.run_id
        self._owner = setup.owner
        self._limits = setup.limits
        self._now = setup.wall_clock
        self._spawn = spawn
        self._stats = stats
        self._deliver = deliver
        # Bound once: a claim's outcomes go on to the executor and the heartbeat.
        self._admit = executor.admit
        self._execute = executor.execute
        self._watch = leases.watch
        self._release_shielded = leases.release_shielded
        self._turn = trio.Lock()  # the hydration turn (fair: batches take it in order)
        self._waits: list[_Wait] = []  # calls waiting on another owner's receipt
        self._poll_now = trio.Event()  # a takeover is due: poll without waiting the interval
        self._polling = False

    def flush(self, calls: list[_Call], spec: ToolSpec) -> None:
        """Claim a lane's batch in a task of its own."""
        self._spawn(self.claim, calls, spec)

    async def claim(self, calls: list[_Call], spec: ToolSpec | None = None) -> None:
        """Claim ``calls`` in one store call and act on each outcome."""
        answer = await self._claim_in_turn(calls, [self._request(call) for call in calls])
        if answer is None:
            return
        owned, held, gone = answer
        self._start(owned, spec)
        self._wait(held)
        if gone:
            await self._release_shielded(gone)

    def _request(self, call: _Call, takeover: str | None = None) -> ClaimRequest:
        return ClaimRequest(
            key=call.key,
            operation=call.operation,
            name=call.name,
            run_id=self._run_id,
            force=call.force,
            stale_after=call.stale_after,
            takeover_lease=takeover,
        )

    async def _claim_in_turn(
        self, calls: list[_Call], requests: list[ClaimRequest]
    ) -> tuple[list[tuple[_Call, Claimed]], list[tuple[_Call, Receipt]], list[Lease]] | None:
        """Claim in the hydration turn and replay what is settled; ``(owned, held, gone)``.

        ``None``: the claim failed, and every call got its error. The payloads
        of the answer are dropped on return, before anything of the batch runs.
        """
        async with self._turn:
            try:
                outcomes = await self._store.claim_many(
                    requests,
                    owner=self._owner,
                    lease_ttl=self._limits.lease_ttl,
                    now=self._now(),
                )
            except Exception as exc:
                for call in calls:
                    self._deliver(call, error=exc)
                return None
            owned, settled, held, gone = sort_outcomes(calls, outcomes)
            self._replay(settled)
        return owned, held, gone

    def _replay(self, settled: list[tuple[_Call, Receipt]]) -> None:
        deliver = self._deliver
        for call, receipt in settled:
            if call.state >= SETTLING:
                continue  # its owner left while the claim was out
            self._stats.replayed += 1
            value, error = replayed(receipt)
            if self._trace is not None:
                status = "corrupt" if isinstance(error, CorruptReceipt) else receipt.status
                self._trace.add(ReceiptReplayed, call.key, status)
            deliver(call, value, error)

    def _start(self, owned: list[tuple[_Call, Claimed]], spec: ToolSpec | None) -> None:
        """Hand claimed calls to their owners (or native batch requests), as one cohort."""
        if not owned:
            return
        cohort = _Cohort([call for call, _ in owned], len(owned))
        trace = self._trace
        for call, claim in owned:
            if trace is not None:
                trace.add(ReceiptClaimed, call.key)
            call.state = CLAIMED
            call.lease_id = claim.lease_id
            call.expires_at = claim.lease_expires_at
            call.cohort = cohort
        self._watch(cohort)
        if spec is not None and spec.batch is not None:
            size = spec.batch_max or self._limits.tool_batch_max
            for start in range(0, len(owned), size):
                self._spawn(self._execute, owned[start : start + size], spec.batch)
        else:
            for call, claim in owned:
                call.claim = claim
                self._admit(call)  # its owner runs it (see Executor.run_owned)

    # -- waits on other owners' receipts ------------------------------------
    def _wait(self, held: list[tuple[_Call, Receipt]]) -> None:
        """Leave held receipts to the poller; time out at once a call that waits for nothing."""
        if not held:
            return
        delay = self._limits.receipt_wait_delay
        now = trio.current_time()
        for call, receipt in held:
            if call.state >= SETTLING:
                continue
            self._stats.waited += 1
            if self._trace is not None:
                self._trace.add(ReceiptWaited, call.key, receipt.owner or "")
            if call.row is not None:
                call.row.waiting_for(receipt.owner or "")
            attempts = self._limits.receipt_wait_attempts
            if call.receipt_wait is not None:
                attempts = max(0, math.ceil(call.receipt_wait / delay))
            wait = _Wait(call, now, now + attempts * delay)
            if not self._learn(wait, receipt) and attempts == 0:
                self._deliver(call, error=ReceiptWaitTimeout(call.key, 0.0))
                continue
            self._waits.append(wait)
        if self._waits and not self._polling:
            self._polling = True
            self._spawn(self._poll)

    def _learn(self, wait: _Wait, receipt: Receipt) -> bool:
        """Note the receipt a wait found; whether its owner is dead (take it over at once)."""
        wait.takeover = receipt.lease_id if owner_is_dead(receipt.owner) else None
        if wait.takeover is None:
            return False
        self._poll_now.set()
        return True

    async def _poll(self) -> None:
        """Claim the waiting keys again every interval, while any call waits.

        One store call per ``tool_batch_max`` keys: a batch like any claim,
        so the turn's bound holds.
        """
        size = self._limits.tool_batch_max
        try:
            while self._waits:
                with trio.move_on_after(self._limits.receipt_wait_delay):
                    await self._poll_now.wait()
                self._poll_now = trio.Event()
                waits = [wait for wait in self._waits if wait.call.state < SETTLING]
                self._waits = []
                for start in range(0, len(waits), size):
                    await self._poll_once(waits[start : start + size])
        finally:
            self._polling = False

    async def _poll_once(self, waits: list[_Wait]) -> None:
        calls = [wait.call for wait in waits]
        requests = [self._request(wait.call, wait.takeover) for wait in waits]
        answer = await self._claim_in_turn(calls, requests)
        if answer is None:
            return
        owned, held, gone = answer
        now = trio.current_time()
        by_call = {wait.call: wait for wait in waits}
        for call, receipt in held:
            if call.state >= SETTLING:
                continue
            wait = by_call[call]
            if not self._learn(wait, receipt) and now + _EPSILON >= wait.deadline:
                self._deliver(call, error=ReceiptWaitTimeout(call.key, now - wait.since))
                continue
            self._waits.append(wait)
        for call, _ in owned:
            if call.row is not None:
                call.row.receipt_ours()
        self._start(owned, None)
        if gone:
            await self._release_shielded(gone)


@attrs.define(eq=False)
class _Wait:
    """A call waiting on another owner's receipt: when it began, when it gives up."""

    call: _Call
    since: float  # trio time
    deadline: float  # a poll at or after it that finds the receipt held times the call out
    takeover: str | None = None  # the lease of a dead owner, to claim over


def replayed(receipt: Receipt) -> tuple[Any, BaseException | None]:
    """What a settled receipt replays: ``(value, None)`` or ``(None, its recorded error)``.

    A payload that does not read back (not JSON text, or a failure that is
    not a JSON object) replays as :class:`CorruptReceipt`, for its callers only.
    """
    failed = receipt.status == "failed"
    text = (receipt.error_json or "{}") if failed else receipt.result_json
    if text is None:
        return None, None
    try:
        value = loads(text)  # TypeError: not text at all (a BLOB in SQLite, say)
        if failed and not isinstance(value, dict):
            raise ValueError(f"a JSON object was expected, not {type(value).__name__}")
    except (TypeError, ValueError, RecursionError) as exc:
        what = "failure" if failed else "result"
        return None, CorruptReceipt(receipt.key, receipt.operation, receipt.name, what, exc)
    if failed:
        return None, error_from_record(value)
    return value, None


def sort_outcomes(
    calls: list[_Call], outcomes: list[ClaimOutcome]
) -> tuple[
    list[tuple[_Call, Claimed]],
    list[tuple[_Call, Receipt]],
    list[tuple[_Call, Receipt]],
    list[Lease],
]:
    """Sort the outcomes of a claim: ``(owned, settled, held, gone)``.

    ``owned``: claimed, ours to run; ``settled``: to replay; ``held``: leased
    by another owner, to wait on; ``gone``: claimed for a caller cancelled
    while its claim was in flight, so nobody runs it: its lease goes back
    (and it takes no slot).
    """
    owned: list[tuple[_Call, Claimed]] = []
    settled: list[tuple[_Call, Receipt]] = []
    held: list[tuple[_Call, Receipt]] = []
    gone: list[Lease] = []
    for call, outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, Claimed):
            if call.state >= SETTLING:
                gone.append(Lease(call.key, outcome.lease_id))
            else:
                owned.append((call, outcome))
        elif isinstance(outcome, Settled):
            settled.append((call, outcome.receipt))
        else:
            held.append((call, outcome.receipt))
    return owned, settled, held, gone
