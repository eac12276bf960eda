"""What a play and its resolvers hold: :class:`PlayContext` and :class:`RowContext`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ._errors import PlayDefinitionError
from ._events import RuntimeEvent, deliver
from ._keys import fetch_receipt_key, row_step_receipt_key, step_receipt_key
from ._map import Dataset
from ._receipts import Dispatcher, local_executor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from ._budget import ByteBudget
    from ._fetch import FetchResponse
    from ._limits import FetchTimeouts, Limits
    from ._runtime import Runtime
    from ._stall import MapStallObserver
    from ._store import Store
    from ._tools import ToolCall

play_log = logging.getLogger("trioplay.play")


class PlayContext:
    """The first argument of a play: datasets, sources, durable effects, logging.

    Every external effect (``tool``, ``fetch``, ``step``) is durable: recorded
    once in a receipt, replayed on rerun, never paid for twice.
    """

    def __init__(
        self, runtime: Runtime, dispatcher: Dispatcher, run_id: str, attempt: int, play: str
    ) -> None:
        self._runtime = runtime
        self._dispatcher = dispatcher
        self._run_id = run_id
        self._attempt = attempt
        self._play = play

    # -- identity -----------------------------------------------------------
    @property
    def run_id(self) -> str:
        """The id of this run; rerunning with it resumes."""
        return self._run_id

    @property
    def attempt(self) -> int:
        """1 on the first execution of this run, then 2, 3, ... on each resume."""
        return self._attempt

    @property
    def play_name(self) -> str:
        return self._play

    # -- engine plumbing used by the map ------------------------------------
    @property
    def store(self) -> Store:
        return self._runtime.store

    @property
    def limits(self) -> Limits:
        return self._runtime.limits

    @property
    def row_limiter(self) -> trio.CapacityLimiter:
        return self._runtime.row_limiter

    @property
    def row_budget(self) -> ByteBudget:
        return self._runtime.row_budget

    @property
    def owner(self) -> str:
        return self._runtime.owner

    @property
    def wall_clock(self) -> Callable[[], float]:
        return self._runtime.wall_clock

    @property
    def latch(self) -> BaseException | None:
        return self._dispatcher.latch

    async def receipts_written(self) -> None:
        """Wait until the receipts of every effect result delivered so far are written."""
        await self._dispatcher.settled_up_to_now()

    def emit(self, type: str, data: dict[str, Any]) -> None:
        deliver(
            self._runtime.on_event,
            RuntimeEvent(type=type, run_id=self._run_id, at=trio.current_time(), data=data),
        )

    def row_context(self, dataset: str, key: str, observer: MapStallObserver | None) -> RowContext:
        return RowContext(self, dataset, key, observer)

    # -- authoring API ------------------------------------------------------
    def dataset(self, key: str, rows: Iterable[Mapping[str, Any]]) -> Dataset:
        """A durable sheet named ``key`` over ``rows`` (a list, generator or source).

        Add columns with ``.with_column(name, resolver)`` and execute with
        ``.run(key=..., on_row_error=...)``.
        """
        return Dataset(self, key, rows)

    def csv(self, path: str, required: Sequence[str] = ()) -> Any:
        """Stream rows from a CSV file (UTF-8, header line first).

        The file is checked before any tool call: a missing file, a missing
        required column or a malformed line raises :class:`PlayInputError`
        naming the file, the line and the column.
        """
        from trioplay.adapters.readers import CsvSource  # adapters depend on the engine

        return CsvSource(path, required=required)

    def jsonl(self, path: str, required: Sequence[str] = ()) -> Any:
        """Stream rows from a JSON Lines file (one object per line); checked like :meth:`csv`."""
        from trioplay.adapters.readers import JsonlSource

        return JsonlSource(path, required=required)

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

        Raises :class:`UnknownToolError`, :class:`ToolExecutionError` (also
        replayed from a recorded failure), :class:`ProviderTransientError`,
        :class:`ReceiptWaitTimeout`, :class:`LeaseLost`,
        :class:`PersistenceLatchTripped`.
        """
        return await self._dispatcher.call_tool(
            tool_id,
            input,
            scope=self._play,
            force=force,
            stale_after=stale_after,
            timeout=timeout,
            receipt_wait=receipt_wait,
            key=key,
        )

    async def step(
        self, key: str, fn: Callable[[], Any], *, stale_after: float | None = None
    ) -> Any:
        """Run ``fn()`` (sync or async) once per run and remember its JSON result.

        On rerun the stored value is returned without calling ``fn``.
        """
        return await self._step(step_receipt_key(self._run_id, key), key, fn, stale_after)

    async def _step(
        self, receipt_key: str, name: str, fn: Callable[[], Any], stale_after: float | None
    ) -> Any:
        if not callable(fn):
            raise PlayDefinitionError(f"step {name!r}: fn must be callable")
        return await self._dispatcher.run_effect(
            operation="step",
            name=name,
            key=receipt_key,
            execute=local_executor(fn),
            kind="local",
            stale_after=stale_after,
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

        See ``docs/fetch.md``. Raises :class:`FetchTimeout`,
        :class:`UnsafeOutboundUrl`, :class:`FetchError`.
        """
        return await self._fetch(
            None,
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

    async def _fetch(
        self,
        row: RowContext | None,
        url: str,
        *,
        method: str,
        headers: Mapping[str, Any] | None,
        json: Any,
        content: bytes | str | None,
        auth: Any,
        timeouts: FetchTimeouts | None,
        stale_after: float | None,
        force: bool,
    ) -> FetchResponse:
        from ._fetch import FetchResponse

        fetcher = await self._runtime.fetcher()
        identity = fetcher.request_identity(
            url, method=method, headers=headers, json=json, content=content, auth=auth
        )
        receipt_key = fetch_receipt_key(self._run_id, identity)

        async def execute(_call: ToolCall) -> Any:
            response = await fetcher.fetch(
                url,
                method=method,
                headers=headers,
                json=json,
                content=content,
                auth=auth,
                timeouts=timeouts,
            )
            return response.to_record()

        observer_token = row.enter_fetch() if row is not None else None
        try:
            record = await self._dispatcher.run_effect(
                operation="fetch",
                name=f"{method.upper()} {fetcher.redact(url)}",
                key=receipt_key,
                execute=execute,
                kind="fetch",
                force=force,
                stale_after=stale_after,
                # The fetch deadlines bound it; the tool timeout is only a backstop.
                timeout=None,
            )
        finally:
            if row is not None and observer_token is not None:
                row.leave_fetch(observer_token)
        return FetchResponse.from_record(record)

    def log(self, message: str) -> None:
        """Log a line for this run (logger ``trioplay.play``, and a ``play.log`` event)."""
        play_log.info("[%s] %s", self._run_id, message)
        self.emit("play.log", {"message": str(message)})


class RowContext:
    """The second argument of a resolver: ``tool``, ``fetch``, ``step``, ``log`` for one row."""

    def __init__(
        self,
        ctx: PlayContext,
        dataset: str,
        key: str,
        observer: MapStallObserver | None,
    ) -> None:
        self._ctx = ctx
        self.dataset = dataset
        self.key = key
        self._observer = observer
        self.observer_token: int | None = None

    @property
    def run_id(self) -> str:
        return self._ctx.run_id

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
        ctx = self._ctx
        return await ctx._dispatcher.call_tool(
            tool_id,
            input,
            scope=ctx._play,
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
        receipt_key = row_step_receipt_key(self._ctx.run_id, self.dataset, self.key, key)
        return await self._ctx._step(receipt_key, key, fn, stale_after)

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
        """Same as :meth:`PlayContext.fetch`; the stall observer sees it as phase ``fetch``."""
        return await self._ctx._fetch(
            self,
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
        play_log.info("[%s] %s[%s]: %s", self._ctx.run_id, self.dataset, self.key, message)
        self._ctx.emit("play.log", {"message": str(message), "map": self.dataset, "row": self.key})

    def enter_fetch(self) -> int | None:
        if self._observer is None or self.observer_token is None:
            return None
        self._observer.set_phase(self.observer_token, "fetch")
        return self.observer_token

    def leave_fetch(self, token: int) -> None:
        if self._observer is not None:
            self._observer.set_phase(token, "resolver")
