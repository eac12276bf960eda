"""Every error a trioplay user can see, in one small hierarchy.

All of them derive from :class:`TrioplayError`. Errors that are stored in a
receipt (so a rerun raises the same error without calling the provider again)
round-trip through :func:`error_to_record` / :func:`error_from_record`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

TransientCategory = Literal["rate_limit", "network", "upstream"]
FetchPhase = Literal["headers", "body", "total"]


class TrioplayError(Exception):
    """Base class of every trioplay error."""

    code: str = "TRIOPLAY_ERROR"


class PlayInputError(TrioplayError, ValueError):
    """The play's input is unusable: a missing file, a missing column, a bad line.

    Raised before any tool call is made. The message names the file, the line
    and the column where that makes sense.
    """

    code = "PLAY_INPUT"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        place = []
        if path is not None:
            place.append(str(path))
        if line is not None:
            place.append(f"line {line}")
        if column is not None:
            place.append(f"column {column!r}")
        prefix = ", ".join(place)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path = path
        self.line = line
        self.column = column


class PlayDefinitionError(TrioplayError, TypeError):
    """The play itself is wrong (unknown tool id, bad resolver, bad option).

    These are programming errors: they fail the run at once instead of being
    isolated to one row, because every row would fail the same way.
    """

    code = "PLAY_DEFINITION"


class RunIdConflict(TrioplayError, ValueError):
    """A run id already names a run of another play, or of another input.

    A run id names one play applied to one input: running it again resumes
    that run, which takes the same play and the same input. ``Runtime.run``
    raises this before anything runs, and the stored run is left as it was.
    ``stored_play`` and ``stored_input_digest`` describe the run as it was
    started, ``play`` and ``input_digest`` the one refused (a digest is the
    first 12 hex digits of the SHA-256 of the input's canonical JSON).
    """

    code = "RUN_ID_CONFLICT"

    def __init__(
        self,
        run_id: str,
        *,
        stored_play: str,
        stored_input_json: str,
        play: str,
        input_json: str,
    ) -> None:
        self.run_id = run_id
        self.stored_play = stored_play
        self.stored_input_digest = input_digest(stored_input_json)
        self.play = play
        self.input_digest = input_digest(input_json)
        differs = "play" if play != stored_play else "input"
        super().__init__(
            f"run {run_id!r} was started with play {stored_play!r} and input digest "
            f"{self.stored_input_digest} ({_preview(stored_input_json)}); this is play "
            f"{play!r} with input digest {self.input_digest} ({_preview(input_json)}), another "
            f"{differs}. To resume run {run_id!r}, run the same play and the same input; "
            "to start a new run, use another run id (or none: the default one is derived "
            "from the play and its input)"
        )


def input_digest(input_json: str) -> str:
    """The first 12 hex digits of the SHA-256 of a play input's canonical JSON."""
    import hashlib  # here: OpenSSL's load is a tenth of `trioplay runs list` (docs/cli.md)

    return hashlib.sha256(input_json.encode("utf-8")).hexdigest()[:12]


def _preview(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ToolExecutionError(TrioplayError):
    """A tool call failed permanently; the failure is recorded in its receipt.

    ``raised`` names the exception the tool's own code raised (``"TypeError"``)
    when the runtime wrapped it, or what made its return value unstorable: a
    failure that is probably a bug in the tool, which ``trioplay retry`` can
    forget once the code is fixed. It is ``None`` for a failure the tool
    reported itself.
    """

    code = "TOOL_EXECUTION"

    def __init__(
        self, message: str, *, tool_id: str | None = None, raised: str | None = None
    ) -> None:
        super().__init__(message)
        self.tool_id = tool_id
        self.raised = raised


class UnknownToolError(PlayDefinitionError):
    """``tool(tool_id, ...)`` named a tool that is not registered."""

    code = "UNKNOWN_TOOL"


TRANSIENT_CATEGORIES: tuple[TransientCategory, ...] = ("rate_limit", "network", "upstream")


class ProviderTransientError(TrioplayError):
    """A provider failed in a way that may succeed later.

    ``ProviderTransientError(category, message="", *, retry_after=None, tool_id=None)``:
    ``category`` is ``"rate_limit"``, ``"network"`` or ``"upstream"``;
    ``message`` says what happened; ``retry_after`` (finite seconds, at least
    0) is the provider's hint when it gave one; ``tool_id`` is filled in by
    the runtime when left out. Each is checked here: a category that is not
    one of the three is a ``ValueError`` naming them, a value of the wrong
    type a ``TypeError``. Transient failures are not recorded as failed
    receipts: the next attempt calls again.
    """

    code = "PROVIDER_TRANSIENT"

    def __init__(
        self,
        category: TransientCategory,
        message: str = "",
        *,
        retry_after: float | None = None,
        tool_id: str | None = None,
    ) -> None:
        _check_transient(category, message, retry_after, tool_id)
        text = f"[{category}] {message}" if message else f"[{category}] transient provider error"
        super().__init__(text)
        self.category: TransientCategory = category
        self.retry_after = retry_after
        self.tool_id = tool_id

    def __reduce__(self) -> tuple[Any, ...]:
        # copy.copy and pickle would call the class with its text as the
        # category: rebuild it without __init__, then restore its attributes.
        return (_restored, (type(self), self.args), self.__dict__)


def _restored(cls: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    error = cls.__new__(cls)
    error.args = args
    return error


def _check_transient(
    category: object, message: object, retry_after: object, tool_id: object
) -> None:
    """Refuse what :class:`ProviderTransientError` cannot be made of, saying what it accepts."""
    name = "ProviderTransientError"
    if category not in TRANSIENT_CATEGORIES:
        accepted = ", ".join(repr(c) for c in TRANSIENT_CATEGORIES)
        raise ValueError(
            f"{name}: category must be one of the three, got {category!r}; accepted: "
            f"{accepted} (the category comes first: {name}('network', 'what happened'))"
        )
    if not isinstance(message, str):
        raise TypeError(f"{name}: message must be a string, got {_shown(message)}")
    if retry_after is not None:
        if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
            raise TypeError(
                f"{name}: retry_after must be seconds (a number) or None, got {_shown(retry_after)}"
            )
        if not (math.isfinite(retry_after) and retry_after >= 0):
            raise ValueError(
                f"{name}: retry_after must be finite seconds of at least 0, got {retry_after!r}"
            )
    if tool_id is not None and not isinstance(tool_id, str):
        raise TypeError(f"{name}: tool_id must be a string or None, got {_shown(tool_id)}")


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


class ToolTimeout(ProviderTransientError):
    """A tool call ran longer than its ``timeout``."""

    code = "TOOL_TIMEOUT"

    def __init__(self, tool_id: str, timeout: float, operation: str = "tool") -> None:
        super().__init__(
            "upstream",
            f"{operation} {tool_id!r} exceeded its timeout of {timeout:g}s",
            tool_id=tool_id,
        )
        self.timeout = timeout


class FetchTimeout(TrioplayError):
    """``fetch`` ran past one of its deadlines.

    ``phase`` is ``"headers"``, ``"body"`` or ``"total"`` (the total deadline
    was the binding one); ``timeout`` is that phase's limit in seconds.
    """

    code = "CTX_FETCH_TIMEOUT"

    def __init__(self, phase: FetchPhase, timeout: float) -> None:
        timeout_ms = round(timeout * 1000)
        super().__init__(
            f"[CTX_FETCH_TIMEOUT phase={phase} timeout_ms={timeout_ms}] "
            f"fetch exceeded its {phase} deadline after {timeout_ms}ms."
        )
        self.phase: FetchPhase = phase
        self.timeout = timeout


class FetchError(TrioplayError):
    """``fetch`` failed for a reason other than a deadline (transport, body size)."""

    code = "CTX_FETCH"


class UnsafeOutboundUrl(FetchError):
    """``fetch`` refused a destination that is not a public address."""

    code = "UNSAFE_OUTBOUND_URL"


class LeaseLost(TrioplayError):
    """This process no longer owns the receipt it was executing."""

    code = "LEASE_LOST"

    def __init__(self, key: str, message: str = "") -> None:
        super().__init__(message or f"lease lost for receipt {key[:16]}")
        self.key = key


class ReceiptWaitTimeout(TrioplayError):
    """Another owner held a receipt longer than this call was willing to wait."""

    code = "RECEIPT_WAIT_TIMEOUT"

    def __init__(self, key: str, waited: float) -> None:
        super().__init__(
            f"receipt {key[:16]} is still held by another owner after waiting {waited:g}s"
        )
        self.key = key
        self.waited = waited


class CorruptReceipt(TrioplayError):
    """A stored receipt's payload does not read back (not JSON, or not the shape recorded).

    Only the callers of that receipt fail; the rest of the run goes on.
    ``what`` is ``"result"`` or ``"failure"``.
    """

    code = "CORRUPT_RECEIPT"

    def __init__(self, key: str, operation: str, name: str, what: str, problem: object) -> None:
        remedy = (
            "run the step again with stale_after=0"
            if operation == "step"
            else "call it with force=True to run it again"
        )
        super().__init__(
            f"the stored {what} of {operation} {name!r} (receipt {key}) does not read back "
            f"({problem}); {remedy}, which replaces the receipt"
        )
        self.key = key
        self.operation = operation
        self.name = name


class RowOutputNotJsonSerializable(TrioplayError, TypeError):
    """A resolver returned a value that cannot be stored as JSON."""

    code = "RUNTIME_ROW_OUTPUT_NOT_JSON_SERIALIZABLE"


class MapMemoryLimitError(TrioplayError, MemoryError):
    """A single row is larger than the active-rows memory budget allows."""

    code = "MAP_MEMORY_LIMIT"


class PersistenceLatchTripped(TrioplayError):
    """A provider call succeeded but its receipt could not be recorded.

    The latch stops every further provider call in the run, because calling on
    without being able to record results would pay for work twice.
    """

    code = "PERSISTENCE_LATCH_TRIPPED"


class StoreError(TrioplayError):
    """The store failed: no answer in time, connection lost, a lock held too long, disk full.

    The message starts with the store's URL and the operation. Where the store
    knows them, ``store`` (its URL, never with a password), ``operation`` (the
    store method) and ``elapsed`` (seconds the call took) say the same as
    fields. ``outcome_unknown`` is true for a write whose commit was sent but
    never confirmed (the connection died during the commit): it may or may
    not have taken effect, and nothing it wrote was reported committed.
    ``retryable`` is true when the store knows the call did nothing and may
    be made again as it was (the connection was refused, or lost before
    anything was committed): the runtime then tries again, within
    ``Limits.store_retry``, before the run fails. ``retry_with``, when the
    store sets it, is the call to make instead of the same one again: a
    write whose outcome is unknown but can be confirmed by reading back
    (it reads, and writes again only what did not take effect).
    """

    code = "STORE"

    def __init__(
        self,
        message: str,
        *,
        store: str | None = None,
        operation: str | None = None,
        elapsed: float | None = None,
        outcome_unknown: bool = False,
        retryable: bool = False,
        retry_with: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.store = store
        self.operation = operation
        self.elapsed = elapsed
        self.outcome_unknown = outcome_unknown
        self.retryable = retryable
        self.retry_with = retry_with


class ReceiptNotRecorded(PersistenceLatchTripped, StoreError):
    """A call succeeded, but its receipt could not be recorded: the caller gets this, not the value.

    Its row is therefore not committed as completed. It is a
    :class:`StoreError` (the write failed; the store's own error is its
    ``__cause__``) and a :class:`PersistenceLatchTripped` (the latch trips: no
    further provider call starts in the run). ``key`` is the receipt key.
    """

    code = "RECEIPT_NOT_RECORDED"

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class PlayAborted(TrioplayError):
    """Play, resolver or tool code raised an exception that is not an ``Exception``.

    ``SystemExit`` (``sys.exit()``), ``KeyboardInterrupt``, ``GeneratorExit``
    and any other ``BaseException`` raised by the play's own code would
    otherwise unwind through the engine as if the process were being stopped:
    a ``sys.exit(0)`` in a resolver made the command line exit 0 with data
    missing. The engine turns each into this error instead: a resolver's
    row is recorded failed and the run fails (whatever ``on_row_error``
    says), a tool's receipt is released (never recorded as its result). Only
    Trio's cancellation and a real Ctrl-C (a ``KeyboardInterrupt`` raised by
    Trio's signal handling) go through as they are. ``raised`` is the type
    name of what was raised, ``where`` says whose code raised it; the
    original exception is the ``__cause__``.
    """

    code = "PLAY_ABORTED"

    def __init__(self, where: str, raised: BaseException) -> None:
        self.where = where
        self.raised = type(raised).__name__
        super().__init__(
            f"{where} raised {raised!r}, which is not an Exception, so the run failed"
            " (raise an Exception to fail only the row or the call)"
        )


class RunCancelled(TrioplayError):
    """The run was cancelled for good (``trioplay cancel``): it does not run again."""

    code = "RUN_CANCELLED"

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} was cancelled for good (trioplay cancel) and does not run again; "
            "start a new run with another run id (--run-id)"
        )
        self.run_id = run_id


class RunEnded(TrioplayError, RuntimeError):
    """A context (``ctx``, ``rc``) was used after the run it belongs to ended.

    Tools, steps, fetches and datasets work only while their run runs: keep
    calls inside the play (or its resolvers) instead of keeping the context.
    """

    code = "RUN_ENDED"

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} has ended: this context belongs to a run that ended, so it can "
            "call no tool, step or fetch; make the call inside the play while it runs"
        )
        self.run_id = run_id


class PlayDepthExceeded(PlayDefinitionError):
    """A child play would nest deeper than ``Limits.max_play_depth`` (a root is depth 0).

    Raised before anything of the child is written; ``lineage`` lists the plays
    from the root to the refused child.
    """

    code = "PLAY_DEPTH_EXCEEDED"

    def __init__(self, lineage: tuple[str, ...], limit: int) -> None:
        self.lineage = lineage
        self.limit = limit
        super().__init__(
            f"child play {lineage[-1]!r} would run at depth {len(lineage) - 1}, past "
            f"Limits.max_play_depth={limit} (lineage: {' → '.join(lineage)}); nest less, "
            "or raise Limits.max_play_depth"
        )


class PlayCycleError(PlayDefinitionError):
    """A child play is already one of its caller's ancestors (``a → b → a``).

    Raised before anything of the child is written: the cycle would never end.
    ``path`` lists the plays from the root to the repeated one. The same play
    reached twice by two branches (a diamond) is no cycle.
    """

    code = "PLAY_CYCLE"

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        super().__init__(
            f"child play {path[-1]!r} is already running above itself: "
            f"{' → '.join(path)}; a play cannot call one of its callers"
        )


class ChildLimitExceeded(TrioplayError):
    """A row or a run started more child plays than its limit allows.

    ``limit`` names the field of :class:`Limits` (``max_children_per_row`` or
    ``max_children_per_run``); raise it to allow more.
    """

    code = "CHILD_LIMIT"

    def __init__(self, where: str, limit: str, value: int) -> None:
        self.limit = limit
        self.value = value
        super().__init__(
            f"{where} started more than {value:,} child plays (Limits.{limit}={value:,}); "
            f"pass Limits({limit}=...) to open_runtime to allow more"
        )


class ChildPlayFailed(TrioplayError):
    """A child play failed: ``child_run_id`` names its run, ``__cause__`` is its error.

    Its receipt is not recorded as a success: rerunning the caller resumes
    the child run (its committed rows and receipts replay).
    """

    code = "CHILD_PLAY_FAILED"

    def __init__(self, child_run_id: str, cause: BaseException) -> None:
        self.child_run_id = child_run_id
        self.cause = format_error(cause)
        super().__init__(
            f"child run {child_run_id!r} failed: {self.cause}; fix the cause and rerun "
            "the caller to resume it"
        )


class InvalidWait(TrioplayError, ValueError):
    """A wait or an event was given a bad value: the message names the field and what it accepts.

    Raised before anything is written (a wait without a bound, a NaN or
    too-long timeout, an empty name, a key or payload that is not JSON, a
    payload over ``Limits.max_event_payload_bytes``, a forged or foreign
    token). ``field`` is the name of the offending argument.
    """

    code = "INVALID_WAIT"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


class EventWaitTimeout(TrioplayError):
    """A wait's deadline passed with no event (and no ``default``): the row fails with this.

    ``deadline`` is the wall-clock instant written when the wait was first
    registered; a restart never moves it.
    """

    code = "EVENT_WAIT_TIMEOUT"

    def __init__(self, name: str, key_json: str, deadline: float) -> None:
        super().__init__(
            f"no event {name!r} with key {key_json} arrived by the wait's deadline "
            f"({deadline:.3f}, epoch seconds)"
        )
        self.name = name
        self.key_json = key_json
        self.deadline = deadline


class EventRejected(TrioplayError):
    """The sender rejected the wait (``send-event --reject REASON``): the row fails with this."""

    code = "EVENT_REJECTED"

    def __init__(self, name: str, key_json: str, reason: str) -> None:
        super().__init__(f"event {name!r} with key {key_json} was rejected: {reason}")
        self.name = name
        self.key_json = key_json
        self.reason = reason


class EventConflict(TrioplayError, ValueError):
    """An event id was sent again with another content (name, key, payload or reject reason).

    A resend with the same id and the same content is a no-op (``duplicate``);
    another content under a used id is refused, and nothing is written.
    """

    code = "EVENT_CONFLICT"

    def __init__(self, run_id: str, event_id: str) -> None:
        super().__init__(
            f"event id {event_id!r} of run {run_id!r} was already sent with another content; "
            "send it with a new id (or without --id)"
        )
        self.run_id = run_id
        self.event_id = event_id


class EventRefused(TrioplayError):
    """An event for a run that is over (``completed`` or ``cancelled``): nothing is written."""

    code = "EVENT_REFUSED"

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id!r} is {status}: it takes no more events")
        self.run_id = run_id
        self.status = status


class UnknownRun(TrioplayError, LookupError):
    """No run of this id in this store (an event for it is refused, nothing is written)."""

    code = "UNKNOWN_RUN"

    def __init__(self, run_id: str, store: str) -> None:
        super().__init__(f"no run {run_id!r} in {store}")
        self.run_id = run_id
        self.store = store


class RunWaiting(TrioplayError):
    """The run stopped with rows (or the play) waiting for outside events.

    Its status is ``waiting``. ``waits`` are the open waits (``WaitRecord``),
    ``next_deadline`` the earliest of their deadlines. Send the events
    (``trioplay send-event``), then resume the run (a rerun).
    """

    code = "RUN_WAITING"

    def __init__(self, run_id: str, waits: tuple[Any, ...], next_deadline: float | None) -> None:
        count = len(waits)
        super().__init__(
            f"run {run_id!r} is waiting for {count} event{'s' if count != 1 else ''}"
            + (f" (next deadline {next_deadline:.3f})" if next_deadline is not None else "")
        )
        self.run_id = run_id
        self.waits = waits
        self.next_deadline = next_deadline


class RowSuspended(BaseException):
    """Internal: a row (or play) suspends on an open wait.

    A ``BaseException``, as ``trio.Cancelled`` is, so ``except Exception`` in
    user code cannot swallow it. ``wait`` is the open ``WaitRecord``.
    """

    def __init__(self, wait: Any) -> None:
        super().__init__(getattr(wait, "wait_key", wait))
        self.wait = wait


class MapSuspended(RowSuspended):
    """Internal: a map ended with rows waiting, and stops the play (``on_waiting="stop"``).

    Raised once the map's writer has committed every other row; ``waits``
    are the waits of its waiting rows.
    """

    def __init__(self, dataset: str, waits: tuple[Any, ...]) -> None:
        BaseException.__init__(self, f"dataset {dataset!r}: {len(waits)} row(s) waiting")
        self.wait = waits[0] if waits else None
        self.waits = waits
        self.dataset = dataset


class MapAccountingError(TrioplayError, RuntimeError):
    """A map's counts do not add up to the rows it read: a row went missing.

    completed + failed + waiting + skipped (duplicates included) + rows left
    to another process must equal the rows read. ``missing`` holds up to
    ten input positions that no count accounts for.
    """

    code = "MAP_ACCOUNTING"

    def __init__(self, dataset: str, read: int, counted: int, missing: list[int]) -> None:
        where = ", ".join(str(position) for position in missing) or "none"
        super().__init__(
            f"dataset {dataset!r}: {read:,} rows were read but {counted:,} are accounted for "
            f"(completed + failed + waiting + skipped + left to another process); "
            f"positions not accounted for (at most 10): {where}"
        )
        self.dataset = dataset
        self.read = read
        self.counted = counted
        self.missing = missing


def format_error(error: BaseException) -> str:
    """One line naming the error type and its message, as stored for failed rows."""
    message = str(error)
    name = type(error).__name__
    return f"{name}: {message}" if message else name


# Errors that survive a receipt round-trip, by name.
_RECORDABLE: dict[str, type[TrioplayError]] = {
    cls.__name__: cls for cls in (ToolExecutionError, FetchError, UnsafeOutboundUrl)
}


def error_to_record(error: BaseException) -> dict[str, Any]:
    """The JSON-able form of an error stored in a failed receipt."""
    record: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    tool_id = getattr(error, "tool_id", None)
    if tool_id is not None:
        record["tool_id"] = tool_id
    raised = getattr(error, "raised", None)
    if raised is not None:
        record["raised"] = raised
    return record


def error_from_record(record: dict[str, Any]) -> TrioplayError:
    """Rebuild the error a failed receipt recorded (as ToolExecutionError if unknown)."""
    cls = _RECORDABLE.get(str(record.get("type")), ToolExecutionError)
    message = str(record.get("message", ""))
    if issubclass(cls, ToolExecutionError):
        raised = record.get("raised")
        return cls(
            message,
            tool_id=record.get("tool_id"),
            raised=raised if isinstance(raised, str) else None,
        )
    return cls(message)
