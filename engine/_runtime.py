"""The runtime: store, HTTP client, governor and row limiter shared by its runs.

``open_runtime`` owns everything it opens and closes all of it on exit. Each
``rt.run(...)`` opens a nursery of its own for the run's dispatcher (lanes,
settler, provider calls), so cancelling a run stops every task it started.
"""

from __future__ import annotations

import functools
import logging
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

import trio

from ._aborts import aborted
from ._budget import ByteBudget
from ._children import DepthAdmission, find_play
from ._cleanup import CleanupBudget
from ._collector import tuned_for_run
from ._context import PlayContext
from ._errors import (
    PlayDefinitionError,
    RunCancelled,
    RunIdConflict,
    RunWaiting,
    format_error,
)
from ._governor import Governor
from ._json import digest, dumps, dumps_output, play_input_json
from ._limits import FetchTimeouts, Limits
from ._loop_lag import LoopWatch
from ._owner import current_owner
from ._phase import StoreCalls
from ._plugins import DEFAULT_STORE_URL, open_store
from ._receipts import DispatchSetup, DispatchStats, open_dispatcher
from ._run import RunServices
from ._store import Store
from ._store_retry import retrying
from ._tools import ToolRegistry
from ._trace._listen import EventListener
from ._trace._recorder import Recorder
from ._trace._records import RunFinished, RunStarted
from ._wait_terms import MISSING, event_request, send_checked
from ._waits import run_waiting, suspension

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from ._children import Lineage
    from ._events import EventSink
    from ._fetch import Fetcher, FetchResponse
    from ._receipts import Dispatcher
    from ._records import RunRecord, RunStatus, SendRequest, SendResult

log = logging.getLogger("trioplay")


class Play(Protocol):
    def __call__(self, ctx: PlayContext, input: Any, /) -> Awaitable[Any]: ...


class RuntimeSettings(Protocol):
    """What ``open_runtime(settings=...)`` reads: the command line's configuration
    (``trioplay._cli._config.Settings``) and a scenario's ``Setup`` are such records."""

    @property
    def limits(self) -> Limits | None: ...
    @property
    def fetch_timeouts(self) -> FetchTimeouts | None: ...
    @property
    def allow_networks(self) -> Sequence[str]: ...


_P = TypeVar("_P", bound=Play)


@overload
def play(name: str | None = None) -> Callable[[_P], _P]: ...
@overload
def play(name: _P) -> _P: ...
def play(name: Any = None) -> Any:
    """Give a play a stable name: ``@trioplay.play("enrich-leads")``.

    The name scopes tool receipts (the same tool input in the same play is
    paid for once) and, with the input, derives the default run id. Without
    the decorator a play's name is its qualified function name.
    """
    if callable(name):
        return play(None)(name)

    def decorate(fn: _P) -> _P:
        fn.__trioplay_name__ = name or getattr(fn, "__qualname__", "play")  # type: ignore[attr-defined]
        return fn

    return decorate


def play_name(fn: Play) -> str:
    name = getattr(fn, "__trioplay_name__", None) or getattr(fn, "__qualname__", None)
    if not isinstance(name, str):
        raise PlayDefinitionError(f"{fn!r} is not a play: use an async def play(ctx, input)")
    return name


def default_run_id(name: str, input_json: str) -> str:
    """``<play>-<12 hex>`` from the play name and its canonical input."""
    return f"{name}-{digest(name, input_json)[:12]}"


class Runtime:
    """A running trioplay engine; get one from :func:`open_runtime`."""

    def __init__(
        self,
        *,
        store: Store,
        tools: ToolRegistry,
        limits: Limits,
        fetch_timeouts: FetchTimeouts,
        allow_networks: Sequence[str],
        http_transport: Any,
        exit_stack: AsyncExitStack,
        on_event: EventSink | None,
        wall_clock: Callable[[], float],
        recorder: Recorder | None = None,
        plays: Sequence[Play] = (),
    ) -> None:
        self.store = store
        self.plays: dict[str, Play] = {play_name(fn): fn for fn in plays}
        """The plays a child call may name (``ctx.play("name", input)``), by name."""
        # What the runs use: the store, its calls retried within limits.store_retry.
        self._store = retrying(store, limits.store_retry)
        self.tools = tools
        self.limits = limits
        self.fetch_timeouts = fetch_timeouts
        self.allow_networks = tuple(allow_networks)
        self._http_transport = http_transport
        self._exit_stack = exit_stack
        self._fetcher: Fetcher | None = None
        self._fetcher_lock = trio.Lock()
        self.on_event = on_event
        self.facts = recorder
        """Where every event goes (``open_runtime(recorder=...)``, with the ``on_event``
        listener attached), or ``None`` when nobody listens."""
        self.trace = recorder if recorder is not None and recorder.detailed else None
        """:attr:`facts` when a sink wants every event (a row's, a call's), else ``None``."""
        self.wall_clock = wall_clock
        self.governor = Governor(limits.max_concurrent_external_calls, limits.max_provider_share)
        self.row_limiter = trio.CapacityLimiter(limits.max_concurrent_rows)
        self.row_budget = ByteBudget(limits.active_rows_budget_bytes)
        # The rows of child plays, by depth (0: row_limiter and row_budget).
        self.depths = DepthAdmission(limits, self.row_limiter, self.row_budget)
        self.owner = current_owner()
        self.last_stats: DispatchStats | None = None

    async def fetcher(self) -> Fetcher:
        """The runtime's HTTP client, opened on first use and closed with the runtime."""
        if self._fetcher is None:
            async with self._fetcher_lock:
                if self._fetcher is None:
                    from ._fetch import Fetcher

                    self._fetcher = await self._exit_stack.enter_async_context(
                        Fetcher(
                            timeouts=self.fetch_timeouts,
                            limits=self.limits,
                            allow_networks=self.allow_networks,
                            transport=self._http_transport,
                            trace=self.trace,
                        )
                    )
        return self._fetcher

    async def raw_fetch(self, url: str, **options: Any) -> FetchResponse:
        """A fetch with deadlines and egress rules but no receipt (for tools)."""
        from ._fetch import FetchOptions

        return await (await self.fetcher()).fetch(url, FetchOptions(**options))

    def find_play(self, child: Any) -> tuple[Play, str]:
        """A child play and its name (see :func:`trioplay._children.find_play`)."""
        return find_play(self.plays, child, play_name)

    async def run_child(self, play: Play, input: Any, run_id: str, lineage: Lineage) -> Any:
        """Run a child play as the run ``run_id``, in the caller's task (see ``_children``)."""
        return await self._run(play, input, run_id, lineage)

    async def run(
        self,
        play: Play,
        input: Any = None,
        *,
        run_id: str | None = None,
        play_ref: str | None = None,
    ) -> Any:
        """Run ``play(ctx, input)`` durably and return what it returns.

        ``run_id`` defaults to one derived from the play name and the input,
        so running the same play on the same input again resumes it: committed
        rows are skipped and completed receipts replayed. The run's counters
        are in :attr:`last_stats` afterwards. ``play_ref`` (``FILE.py:PLAY``)
        is recorded with the run, for ``trioplay resume RUN``.

        A run whose rows (or play) wait for outside events ends ``waiting``
        and raises :class:`RunWaiting` (its open waits, the next deadline):
        send the events (:meth:`send_event`, ``trioplay send-event``), then
        run it again to resume.

        A ``KeyboardInterrupt`` (Ctrl-C under ``trio.run``) ends the run as
        ``cancelled`` and is raised again. This method's own bookkeeping is
        protected from it (it arrives at a checkpoint, never between
        beginning the attempt and the ``try`` that records its end); the
        play's code is not.

        While it runs, the garbage collector is tuned for it
        (:func:`~trioplay._collector.tuned_for_run`).
        """
        with tuned_for_run():
            return await self._run(play, input, run_id, None, play_ref)

    @trio.lowlevel.enable_ki_protection
    async def _run(
        self,
        play: Play,
        input: Any,
        run_id: str | None,
        lineage: Lineage | None,
        play_ref: str | None = None,
    ) -> Any:
        """:meth:`run`, of a root (``lineage`` ``None``) or of a child play."""
        name = play_name(play)
        self.plays.setdefault(name, play)
        record = await _begin_attempt(
            self._store, name, input, run_id, lineage, play_ref, now=self.wall_clock()
        )
        run_id = record.run_id
        if self.facts is not None:
            self.facts.add(RunStarted, run_id, name, record.attempt)
        status: RunStatus = "failed"
        error: str | None = None
        output_json: str | None = None
        stats = DispatchStats()
        # Every shielded cleanup of the run, recording its end included, shares it.
        cleanup = CleanupBudget(self.limits.cleanup_timeout)
        dispatcher: Dispatcher | None = None
        try:
            store_calls = StoreCalls()
            setup = DispatchSetup(
                run_id=run_id,
                attempt=record.attempt,
                play=name,
                owner=self.owner,
                lineage=lineage,
                store=store_calls.watch(self._store),
                store_calls=store_calls,
                limits=self.limits,
                wall_clock=self.wall_clock,
                cleanup=cleanup,
                facts=self.facts,
                trace=self.trace,
                governor=self.governor,
                tools=self.tools,
                fetch=self.raw_fetch,
            )
            async with open_dispatcher(setup) as dispatcher:
                stats = dispatcher.stats
                loop_watch = LoopWatch(self.limits.loop_lag_threshold, self.facts, run_id)
                services = RunServices(run=setup, receipts=dispatcher, runtime=self)
                returned: list[Any] = []
                done = trio.Event()

                async def body() -> None:
                    try:
                        returned.append(await _call_play(play, PlayContext(services), input))
                    except BaseException as exc:
                        # A suspension (a wait of the play, or a map's waiting
                        # rows) ends the play, not the run: it ends waiting.
                        if suspension(exc) is None:
                            raise
                    await dispatcher.drain()
                    done.set()

                # The play runs in a task of the run's nursery, so that the
                # caller's task waits here: a KeyboardInterrupt, delivered to
                # it, then cancels the whole run at once (the map's writer and
                # the settler clean up side by side), as a cancel would.
                store_calls.loop_watch = loop_watch
                dispatcher.start_soon(loop_watch.run)
                dispatcher.start_soon(body)
                await done.wait()
            if services.waits.suspended:
                status = "waiting"
                raise await run_waiting(
                    self._store, run_id, list(services.waits.suspended.values()), self.wall_clock()
                )
            [output] = returned
            try:
                output_json = dumps_output(output)
            except (TypeError, ValueError, RecursionError):
                log.warning("run %s: the play's output is not JSON and was not stored", run_id)
            status = "completed"
            return output
        except (trio.Cancelled, KeyboardInterrupt):
            status = "interrupted"
            error = "interrupted"
            raise
        except RunWaiting:
            raise
        except BaseException as exc:
            error = format_error(exc)
            raise
        finally:
            if lineage is None:  # a child's counters are its own run's, not the caller's
                self.last_stats = stats
            if dispatcher is not None:
                await dispatcher.settle_late()
            # Fenced by the attempt: if another process began a later attempt
            # of this run meanwhile, the run's status is that attempt's to write.
            finish = functools.partial(
                self._store.finish_attempt,
                run_id,
                status,
                attempt=record.attempt,
                now=self.wall_clock(),
                output_json=output_json,
                error=error,
                stats_json=dumps(_stats_dict(stats)),
            )
            # Not even tried if the store left a cleanup unanswered: the run
            # stays `running`, and its next attempt takes it over.
            with cleanup.shielded():
                await _record_end(finish, run_id, record.attempt, status)
            if self.facts is not None:
                self.facts.add(RunFinished, run_id, status, error, _stats_dict(stats))

    async def send_event(
        self,
        run_id: str,
        name: str | None = None,
        key: Any = None,
        *,
        data: Any = MISSING,
        reject: str | None = None,
        event_id: str | None = None,
        token: str | None = None,
    ) -> SendResult:
        """Send the event ``name`` with ``key`` to run ``run_id``; say what became of it.

        ``data`` is the payload (any JSON value, at most
        ``Limits.max_event_payload_bytes`` as JSON); ``reject`` a reason
        instead (the waiting row fails with :class:`EventRejected`).
        ``token`` addresses one wait by its token instead of ``name`` and
        ``key``. ``event_id`` makes a resend a no-op (``duplicate``); the
        same id with another content raises :class:`EventConflict`.

        The result's ``outcome``: ``delivered`` (to the oldest open wait,
        named by ``wait_key``, ``dataset`` and ``row_key``), ``buffered``
        (no wait yet: the first to register takes it) or ``duplicate``.
        Resume the run to let a delivered row go on. Raises
        :class:`InvalidWait` (bad input, nothing written),
        :class:`UnknownRun`, :class:`EventRefused` (the run is completed
        or cancelled).
        """
        request = event_request(
            run_id,
            name,
            key,
            data=data,
            reject=reject,
            event_id=event_id,
            token=token,
            limits=self.limits,
        )
        return await self.send_request(request)

    async def send_request(self, request: SendRequest) -> SendResult:
        """Send an event already checked (``trioplay._wait_terms.event_request`` made it)."""
        return await send_checked(self._store, request, now=self.wall_clock(), facts=self.facts)


async def _begin_attempt(
    store: Store,
    name: str,
    input: Any,
    run_id: str | None,
    lineage: Lineage | None,
    play_ref: str | None,
    *,
    now: float,
) -> RunRecord:
    """Begin the run's next attempt in the store, or refuse the run (before anything runs)."""
    input_json = play_input_json(input, "play input")
    if run_id is None:
        run_id = default_run_id(name, input_json)
    begin: dict[str, Any] = {} if play_ref is None else {"play_ref": play_ref}
    if lineage is not None:  # the store records the root and the depth from the parent
        begin["parent_run_id"] = lineage.parent_run_id
    record = await store.begin_attempt(run_id, name, input_json, now=now, **begin)
    if record.status == "cancelled":
        raise RunCancelled(run_id)
    if (record.play, record.input_json) != (name, input_json):
        raise RunIdConflict(
            run_id,
            stored_play=record.play,
            stored_input_json=record.input_json,
            play=name,
            input_json=input_json,
        )
    return record


async def _record_end(
    finish: Callable[[], Awaitable[bool]], run_id: str, attempt: int, status: str
) -> None:
    """Record the attempt's end (``finish``); a failure to is logged, never raised."""
    try:
        try:
            recorded = await finish()
        except KeyboardInterrupt:
            # Ctrl-C arrived as the end was being recorded, maybe before it
            # was: record it all the same, then let it through.
            await finish()
            raise
        if not recorded:
            log.info(
                "run %s: attempt %d ended %s; a later attempt holds the run, "
                "so its status is that attempt's to record",
                run_id,
                attempt,
                status,
            )
    except Exception as exc:
        log.warning("run %s: could not record its end: %s", run_id, exc)


@trio.lowlevel.disable_ki_protection
async def _call_play(play: Play, ctx: PlayContext, input: Any) -> Any:
    """The play, outside :meth:`Runtime.run`'s protection: Ctrl-C interrupts it where it lands.

    A ``SystemExit`` or another ``BaseException`` of its own fails the run
    as a :class:`PlayAborted` (see ``_aborts``).
    """
    try:
        return await play(ctx, input)
    except BaseException as exc:
        failure = aborted(exc, f"play {play_name(play)!r}")
        if failure is None:
            raise
        raise failure from exc


def send_event(
    store: Store | str,
    run_id: str,
    name: str | None = None,
    key: Any = None,
    *,
    data: Any = MISSING,
    reject: str | None = None,
    event_id: str | None = None,
    token: str | None = None,
    limits: Limits | None = None,
) -> SendResult:
    """Blocking form of :meth:`Runtime.send_event`, for scripts: opens ``store``, sends, closes.

    ``store`` is a :class:`Store` or a URL, as for :func:`open_runtime`. Bad
    input raises :class:`InvalidWait` before the store is opened.
    """
    request = event_request(
        run_id,
        name,
        key,
        data=data,
        reject=reject,
        event_id=event_id,
        token=token,
        limits=limits or Limits(),
    )

    async def main() -> SendResult:
        async with open_runtime(store=store, limits=limits) as rt:
            return await rt.send_request(request)

    return trio.run(main)


def _stats_dict(stats: DispatchStats) -> dict[str, int]:
    return {
        "provider_calls": stats.provider_calls,
        "replayed": stats.replayed,
        "followed": stats.followed,
        "waited": stats.waited,
        "failed_calls": stats.failed_calls,
        "steps_run": stats.steps_run,
        "fetches": stats.fetches,
        "children_run": stats.children_run,
    }


def _resolve_store(store: Store | str | None) -> Store:
    if store is None or isinstance(store, str):
        resolved: Store = open_store(store or DEFAULT_STORE_URL)
        return resolved
    if not isinstance(store, Store):
        raise PlayDefinitionError(f"store must be a Store or a URL string, got {store!r}")
    return store


@asynccontextmanager
@trio.lowlevel.enable_ki_protection
async def open_runtime(
    *,
    store: Store | str | None = None,
    tools: ToolRegistry | None = None,
    limits: Limits | None = None,
    fetch_timeouts: FetchTimeouts | None = None,
    allow_networks: Sequence[str] = (),
    on_event: EventSink | None = None,
    http_transport: Any = None,
    wall_clock: Callable[[], float] = time.time,
    recorder: Recorder | None = None,
    plays: Sequence[Play] = (),
    settings: RuntimeSettings | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime: ``async with open_runtime(store=..., tools=...) as rt:``.

    ``store`` is a :class:`Store` or a URL (``memory://``,
    ``sqlite:///path.db`` — the default is ``sqlite:///.trioplay/trioplay.db``
    — or ``postgresql://...``). ``allow_networks`` lists CIDR blocks
    ``fetch`` may reach although they are not public. ``on_event`` receives
    every :class:`RuntimeEvent`; ``recorder`` (a :class:`trioplay.Recorder`) every typed
    event of ``docs/events.md``. ``http_transport`` replaces the network for
    ``fetch`` (tests, scenarios); ``wall_clock`` is the clock of lease
    expiry and stored timestamps. ``plays`` are the plays a child call may
    name (``ctx.play("score-account", input)``); a play run here is known too.
    ``settings`` gives ``limits``, ``fetch_timeouts`` and ``allow_networks``
    as one record, instead of those three keywords (with any of them: ``TypeError``).

    On exit every task, socket and connection the runtime opened is closed.
    """
    if settings is not None:
        if limits is not None or fetch_timeouts is not None or allow_networks:
            raise TypeError("open_runtime: give settings= or its three keywords, not both")
        limits, fetch_timeouts = settings.limits, settings.fetch_timeouts
        allow_networks = settings.allow_networks
    limits = limits or Limits()
    # on_event is a sink of the recorder's, live: the recorder is the one stream.
    listener = EventListener(on_event) if on_event is not None else None
    owned = recorder is None and listener is not None
    if listener is not None:
        if recorder is None:
            recorder = Recorder(listener)
        else:
            recorder.attach(listener)
    if recorder is not None:
        recorder.bind_clock()
    try:
        resolved = _resolve_store(store)
        await resolved.open()
        try:
            async with AsyncExitStack() as exit_stack:
                yield Runtime(
                    store=resolved,
                    tools=tools if tools is not None else ToolRegistry(),
                    limits=limits,
                    fetch_timeouts=fetch_timeouts or FetchTimeouts(),
                    allow_networks=allow_networks,
                    http_transport=http_transport,
                    exit_stack=exit_stack,
                    on_event=on_event,
                    wall_clock=wall_clock,
                    recorder=recorder,
                    plays=plays,
                )
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + limits.cleanup_timeout
                await resolved.aclose()
    finally:
        if recorder is not None and listener is not None:
            if owned:
                recorder.close()
            else:
                recorder.detach(listener)


def run(play: Play, input: Any = None, *, run_id: str | None = None, **options: Any) -> Any:
    """Blocking form of ``rt.run``: opens a runtime with ``options``, runs, closes.

    ``options`` are those of :func:`open_runtime`.
    """

    async def main() -> Any:
        async with open_runtime(**options) as rt:
            return await rt.run(play, input, run_id=run_id)

    return trio.run(main)
