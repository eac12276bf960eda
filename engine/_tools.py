"""Tool registration: what a tool is and how it is called.

A tool is ``async def tool(input: dict, call: ToolCall) -> Any``. It may also
declare a native batch operation, ``async def batch(inputs: list[dict], calls:
list[ToolCall]) -> list[Any | BaseException]``, which gets one provider request
for many rows (an exception in the list fails only that member).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, TypeVar, Unpack

import attrs

from ._errors import PlayDefinitionError, UnknownToolError
from ._limits import COUNT, COUNT_OR_ZERO, NUMBER, SECONDS, Accepts

if TYPE_CHECKING:
    from ._fetch import FetchResponse


class FetchFunction(Protocol):
    """The non-durable ``fetch`` a tool may use (its own receipt covers it)."""

    def __call__(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | str | None = None,
        auth: Any = None,
        timeouts: Any = None,
    ) -> Awaitable[FetchResponse]: ...


@attrs.frozen
class Rate:
    """At most ``n`` provider calls in any window of ``per`` seconds.

    The calls of a provider are spaced ``per / n`` seconds apart, counted from
    the moment each is admitted (a generic cell rate algorithm), so the rate
    holds in *every* window of ``per`` seconds, the first one included, and
    also for calls that waited for a global slot.

    ``burst`` is an explicit opt-in that **exceeds** the rate: a provider that
    was idle may take up to ``burst`` calls at once, and a window of ``per``
    seconds may then hold up to ``n + burst - 1`` calls. Use it only for a
    provider that tolerates short bursts. The default (``None``) is no burst.
    """

    n: float = attrs.field(validator=NUMBER.validator)
    per: float = attrs.field(default=1.0, validator=NUMBER.validator)
    burst: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(COUNT.validator)
    )

    @property
    def interval(self) -> float:
        """Seconds between two calls: ``per / n``."""
        return self.per / self.n


@attrs.frozen
class ToolCall:
    """What a tool learns about the call it is serving.

    ``idempotency_key`` is stable for one receipt (pass it to the provider so a
    retried request is not billed twice); ``attempt`` is 1 on the first try
    and grows with every retry and every later claim of the receipt;
    ``deadline`` is the Trio clock time by which the call is cancelled;
    ``fetch`` is the runtime's HTTP client with its deadlines and egress
    rules, without a receipt of its own.
    """

    tool_id: str
    idempotency_key: str
    attempt: int
    deadline: float
    fetch: FetchFunction | None = attrs.field(default=None, repr=False, eq=False)


ToolFunction = Callable[[dict[str, Any], ToolCall], Awaitable[Any]]
BatchFunction = Callable[[list[dict[str, Any]], list[ToolCall]], Awaitable[Sequence[Any]]]
_F = TypeVar("_F", bound=ToolFunction)


@attrs.frozen
class ToolSpec:
    """A registered tool and its governor settings."""

    tool_id: str
    fn: ToolFunction
    provider: str
    rate: Rate | None = None
    concurrency: int | None = None
    batch: BatchFunction | None = None
    batch_max: int | None = None
    timeout: float | None = None
    retries: int = 0


class ToolSettings(TypedDict, total=False):
    """The settings of a tool (:meth:`ToolRegistry.tool`, :meth:`ToolRegistry.add`).

    ``provider`` is the name the governor limits by (the tool id by
    default); ``rate`` and ``concurrency`` are its limits; ``batch`` a native
    batch operation of up to ``batch_max`` calls per request; ``timeout``
    (seconds) bounds each call; ``retries`` transient failures are tried
    again within one claim. See :class:`ToolSpec`.
    """

    provider: str
    rate: Rate | None
    concurrency: int | None
    batch: BatchFunction | None
    batch_max: int | None
    timeout: float | None
    retries: int


_CHECKED: tuple[tuple[Literal["concurrency", "batch_max", "timeout", "retries"], Accepts], ...] = (
    ("concurrency", COUNT),
    ("batch_max", COUNT),
    ("timeout", SECONDS),
    ("retries", COUNT_OR_ZERO),
)


class ToolRegistry:
    """The tools a runtime may call, by id.

    Register with the decorator ``@registry.tool("finder_a", provider="acme",
    rate=Rate(10, per=1.0), concurrency=8)`` or with :meth:`add`. Objects that
    carry their own spec (adapters such as ``SimulatedProvider`` and
    ``HttpTool``) are added with :meth:`add_tool`.
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def tool(self, tool_id: str, **settings: Unpack[ToolSettings]) -> Callable[[_F], _F]:
        """A decorator that registers its function as ``tool_id`` (see :meth:`add`)."""

        def decorate(fn: _F) -> _F:
            self.add(tool_id, fn, **settings)
            return fn

        return decorate

    def add(self, tool_id: str, fn: ToolFunction, **settings: Unpack[ToolSettings]) -> ToolSpec:
        """Register ``fn`` as the tool ``tool_id``, with the :class:`ToolSettings` given.

        Raises :class:`PlayDefinitionError` for an empty or taken id, a
        function that is not async, or a setting out of its range, and
        ``TypeError`` for a setting that does not exist.
        """
        if not tool_id or not isinstance(tool_id, str):
            raise PlayDefinitionError(f"tool id must be a non-empty string, got {tool_id!r}")
        if tool_id in self._tools:
            raise PlayDefinitionError(f"tool {tool_id!r} is already registered")
        if not inspect.iscoroutinefunction(fn) and not inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count
        ):
            raise PlayDefinitionError(
                f"tool {tool_id!r} must be an async function (input, call) -> result"
            )
        unknown = sorted(settings.keys() - ToolSettings.__optional_keys__)
        if unknown:
            known = ", ".join(sorted(ToolSettings.__optional_keys__))
            raise TypeError(
                f"tool {tool_id!r}: no setting {', '.join(unknown)}; the settings: {known}"
            )
        for name, accepts in _CHECKED:
            value = settings.get(name)
            problem = None if value is None else accepts.problem(value)
            if problem is not None:
                raise PlayDefinitionError(f"tool {tool_id!r}: {name} {problem}")
        provider = settings.pop("provider", None) or tool_id  # None: the tool id too
        spec = attrs.evolve(ToolSpec(tool_id, fn, provider), **settings)
        self._tools[tool_id] = spec
        return spec

    def add_tool(self, tool: HasToolSpec) -> ToolSpec:
        spec = tool.tool_spec()
        if spec.tool_id in self._tools:
            raise PlayDefinitionError(f"tool {spec.tool_id!r} is already registered")
        self._tools[spec.tool_id] = spec
        return spec

    def get(self, tool_id: str) -> ToolSpec:
        try:
            return self._tools[tool_id]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownToolError(
                f"unknown tool id {tool_id!r}; registered tools: {known}"
            ) from None

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


class HasToolSpec(Protocol):
    def tool_spec(self) -> ToolSpec: ...
