"""A tool that POSTs JSON to an HTTP endpoint, with an optional batch endpoint.

:class:`HttpTool` sends its input through the runtime's fetch machinery
(``ToolCall.fetch``: the same deadlines, egress rules and secret handling as
``ctx.fetch``, without a receipt of its own, since the tool's receipt already
makes the call durable) and turns the answer into a tool result or into the
error the dispatcher knows how to treat:

=====================================  =============================================
what happened                          what the tool raises
=====================================  =============================================
2xx with a JSON body                   nothing: returns ``result(body)``
2xx whose body is not JSON             :class:`ToolExecutionError` (recorded)
429                                    ``ProviderTransientError("rate_limit",
                                       retry_after=...)`` from ``Retry-After``
5xx                                    ``ProviderTransientError("upstream")``
transport failure or fetch deadline    ``ProviderTransientError("network")``,
                                       the fetch error as its ``__cause__``
any other status (4xx, unfollowed 3xx) :class:`ToolExecutionError` naming the status
                                       and a short, redacted excerpt of the body
a refused destination, a body over     the fetch error itself (recorded)
the size cap, too many redirects
=====================================  =============================================

Transient errors release the receipt (a later attempt calls again, with the
same ``Idempotency-Key``); recorded errors fail it (a rerun raises the same
error without a request).

Batch wire format (when ``batch_url`` is set). One request for many calls::

    POST <batch_url>
    Idempotency-Key: <digest of the members' idempotency keys, in order>
    {"items": [{"idempotency_key": "<call.idempotency_key>", "input": {...}}, ...]}

and one answer entry per item, in the same order::

    200 OK
    {"results": [{"ok": true, "result": <value>},
                 {"ok": false, "error": "<message>", "retryable": false}, ...]}

A member with ``"ok": true`` returns ``result(<value>)``; one with ``"ok":
false`` fails alone, as ``ProviderTransientError("upstream")`` when
``retryable`` is true and as :class:`ToolExecutionError` otherwise. A status,
transport or format failure of the whole request fails every member the way
it would fail a single call.
"""

from __future__ import annotations

import functools
import hashlib
import http
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from trioplay import (
    FetchError,
    FetchTimeout,
    PlayDefinitionError,
    ProviderTransientError,
    Secret,
    ToolExecutionError,
    ToolSpec,
    canonical_json,
    redact,
)

from ._common import in_requests, registry_entry

MAX_PORT = 65535

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trioplay import FetchResponse, FetchTimeouts, Rate, ToolCall

# What ``ToolCall.fetch`` is: the runtime's fetch, without a receipt.
_Fetch = Callable[..., Awaitable["FetchResponse"]]

EXCERPT_CHARS = 200
"""At most this many characters of a response body go into an error message."""
IDEMPOTENCY_HEADER = "Idempotency-Key"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header value, or ``None``.

    Reads both forms of RFC 9110: delay-seconds (``"2"``, and leniently
    ``"1.5"``) and an HTTP-date, counted from ``now`` (seconds since the
    epoch; the wall clock by default). A date in the past gives ``0.0``;
    anything unreadable gives ``None``.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; parsedate leaves "-0000" naive
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _check_url(tool_id: str, name: str, url: str, carries_secret: bool) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise PlayDefinitionError(f"HttpTool {tool_id!r}: invalid {name}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise PlayDefinitionError(
            f"HttpTool {tool_id!r}: {name} must be an absolute http(s) URL, got {url!r}"
        )
    if parsed.port is not None and parsed.port > MAX_PORT:  # else it would wrap modulo 65536
        raise PlayDefinitionError(
            f"HttpTool {tool_id!r}: invalid {name}: port {parsed.port} is out of range 0-{MAX_PORT}"
        )
    if carries_secret and parsed.scheme != "https":
        raise PlayDefinitionError(
            f"HttpTool {tool_id!r}: refusing to send a Secret over plain http to "
            f"{parsed.host!r} ({name}); use an https:// URL"
        )
    return parsed


def _describe(url: httpx.URL) -> str:
    # Without the query: it may carry tokens nobody declared as a Secret.
    return f"{url.scheme}://{url.netloc.decode('ascii')}{url.path}"


def _status_text(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


@attrs.define(kw_only=True, eq=False)
class HttpTool:
    """A tool that POSTs its input as JSON to ``url``; register it with ``add_tool``.

    ::

        registry.add_tool(HttpTool(
            tool_id="finder_a",
            url="https://api.acme.example/v1/find",
            auth=trioplay.Secret(os.environ["ACME_TOKEN"]),
            rate=trioplay.Rate(10, per=1.0),
            result=lambda body: body["data"],
        ))

    Each call sends ``POST url`` with the tool input as the JSON body, the
    ``headers`` given here, ``Authorization: Bearer <auth>`` when ``auth`` is
    a :class:`trioplay.Secret`, and ``Idempotency-Key: <call.idempotency_key>``
    (stable for one receipt, so a retried call is recognisable upstream). The
    parsed JSON body goes through ``result`` (the identity by default) to
    become the tool's result. ``timeouts`` overrides the runtime's
    ``FetchTimeouts`` for this tool's requests; ``provider``, ``rate`` and
    ``concurrency`` are the governor settings, as for any tool.

    With ``batch_url`` set the tool also declares a native batch operation
    (:meth:`batch`) that sends up to ``batch_max`` calls in one request; the
    wire format is in this module's docstring and in ``docs/fetch.md``.

    A Secret (``auth`` or a header value) with an ``http://`` URL is refused
    here, when the tool is built, with :class:`trioplay.PlayDefinitionError`:
    long before anything connects.
    """

    tool_id: str
    url: str
    headers: Mapping[str, str | Secret] = attrs.field(factory=dict)
    auth: Secret | None = None
    provider: str | None = None
    rate: Rate | None = None
    concurrency: int | None = None
    timeouts: FetchTimeouts | None = None
    batch_url: str | None = None
    batch_max: int | None = None
    result: Callable[[Any], Any] | None = None

    _url: httpx.URL = attrs.field(init=False, repr=False)
    _batch: httpx.URL | None = attrs.field(init=False, repr=False, default=None)
    _secrets: tuple[Secret, ...] = attrs.field(init=False, repr=False, default=())

    def __attrs_post_init__(self) -> None:
        tool = self.tool_id
        if not tool or not isinstance(tool, str):
            raise PlayDefinitionError(f"HttpTool needs a non-empty tool_id, got {tool!r}")
        if self.auth is not None and not isinstance(self.auth, Secret):
            raise PlayDefinitionError(
                f"HttpTool {tool!r}: auth must be a trioplay.Secret (or None), "
                f"not {type(self.auth).__name__}"
            )
        secrets: list[Secret] = [self.auth] if self.auth is not None else []
        for name, value in self.headers.items():
            if name.lower() == IDEMPOTENCY_HEADER.lower():
                raise PlayDefinitionError(
                    f"HttpTool {tool!r}: {IDEMPOTENCY_HEADER} is set per call by the tool"
                )
            if isinstance(value, Secret):
                secrets.append(value)
            elif not isinstance(value, str):
                raise PlayDefinitionError(
                    f"HttpTool {tool!r}: header {name!r} must be a str or a trioplay.Secret"
                )
        self._secrets = tuple(secrets)
        self._url = _check_url(tool, "url", self.url, bool(secrets))
        if self.batch_url is not None:
            self._batch = _check_url(tool, "batch_url", self.batch_url, bool(secrets))
        elif self.batch_max is not None:
            raise PlayDefinitionError(f"HttpTool {tool!r}: batch_max needs a batch_url")
        if self.batch_max is not None and self.batch_max < 1:
            raise PlayDefinitionError(f"HttpTool {tool!r}: batch_max must be at least 1")
        if self.concurrency is not None and self.concurrency < 1:
            raise PlayDefinitionError(f"HttpTool {tool!r}: concurrency must be at least 1")

    def tool_spec(self) -> ToolSpec:
        """The registry entry: this object as the tool, :meth:`batch` when ``batch_url`` is set."""
        return registry_entry(self, batches=self._batch is not None, batch_max=self.batch_max)

    # -- one call ---------------------------------------------------------
    async def __call__(self, input: dict[str, Any], call: ToolCall) -> Any:
        """Send one call; see the class docstring for what it returns and raises."""
        response = await self._post(_fetch_of(call), self._url, input, call.idempotency_key)
        error = self._status_error(response, self._url)
        if error is not None:
            raise error
        return self._convert(self._body(response, self._url))

    # -- many calls -------------------------------------------------------
    async def batch(self, inputs: list[dict[str, Any]], calls: list[ToolCall]) -> list[Any]:
        """The native batch operation: one result or exception per input, in order.

        Sends ``batch_max`` items per request (all in one when it is unset),
        the requests of one batch concurrently. Never raises for a provider
        failure: a failed request puts one exception per member in the list.
        """
        url = self._batch
        if url is None:
            raise PlayDefinitionError(f"HttpTool {self.tool_id!r} has no batch_url")
        if calls:
            _fetch_of(calls[0])  # without the runtime's fetch: one error, before any request
        request = functools.partial(self._batch_request, url)
        return await in_requests(inputs, calls, self.batch_max, request)

    async def _batch_request(
        self,
        url: httpx.URL,
        inputs: Sequence[dict[str, Any]],
        calls: Sequence[ToolCall],
        results: list[Any],
        offset: int,
    ) -> None:
        fetch = _fetch_of(calls[0])  # a slice is never empty
        keys = [call.idempotency_key for call in calls]
        items = [
            {"idempotency_key": key, "input": input}
            for key, input in zip(keys, inputs, strict=True)
        ]
        batch_key = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32]
        members: list[Any]
        try:
            response = await self._post(fetch, url, {"items": items}, batch_key)
            error = self._status_error(response, url)
            if error is not None:
                raise error
            members = self._split(self._body(response, url), len(inputs), url)
        except (ProviderTransientError, FetchError, ToolExecutionError) as exc:
            # The whole request failed: every member fails the way a single
            # call would, each with an exception of its own (each is raised
            # in its own caller), the request's error as their cause.
            members = [self._for_member(exc) for _ in inputs]
        results[offset : offset + len(inputs)] = members

    def _split(self, body: Any, n: int, url: httpx.URL) -> list[Any]:
        entries = body.get("results") if isinstance(body, dict) else None
        if not isinstance(entries, list) or len(entries) != n:
            got = f"{len(entries)} results" if isinstance(entries, list) else "no results list"
            raise ToolExecutionError(
                f"HTTP tool {self.tool_id!r}: POST {_describe(url)} answered {got} "
                f'for {n} items (expected {{"results": [...]}} with one entry per item)',
                tool_id=self.tool_id,
            )
        return [self._member(entry, index) for index, entry in enumerate(entries)]

    def _member(self, entry: Any, index: int) -> Any:
        if not isinstance(entry, dict) or not isinstance(entry.get("ok"), bool):
            return ToolExecutionError(
                f"HTTP tool {self.tool_id!r}: batch result {index} is malformed: "
                f"{self._excerpt(_shown(entry))}",
                tool_id=self.tool_id,
            )
        if entry["ok"]:
            try:
                return self._convert(entry.get("result"))
            except Exception as exc:  # the user's result function; fails only this member
                error = ToolExecutionError(
                    f"HTTP tool {self.tool_id!r}: result() raised {type(exc).__name__}: {exc}",
                    tool_id=self.tool_id,
                )
                error.__cause__ = exc
                return error
        message = self._excerpt(str(entry.get("error") or "batch member failed"))
        if entry.get("retryable") is True:
            return ProviderTransientError("upstream", message, tool_id=self.tool_id)
        return ToolExecutionError(
            f"HTTP tool {self.tool_id!r}: batch member failed: {message}", tool_id=self.tool_id
        )

    # -- shared -------------------------------------------------------------
    async def _post(
        self, fetch: _Fetch, url: httpx.URL, payload: Any, idempotency_key: str
    ) -> FetchResponse:
        headers: dict[str, str | Secret] = {**self.headers, IDEMPOTENCY_HEADER: idempotency_key}
        try:
            return await fetch(
                str(url),
                method="POST",
                headers=headers,
                json=payload,
                auth=self.auth,
                timeouts=self.timeouts,
            )
        except FetchTimeout as exc:
            raise ProviderTransientError(
                "network", f"POST {_describe(url)}: {exc}", tool_id=self.tool_id
            ) from exc
        except FetchError as exc:
            # Fetcher chains the httpx error for transport failures only; a
            # refused destination, an oversized body or a redirect loop has no
            # httpx cause and will not get better by retrying.
            if isinstance(exc.__cause__, httpx.TransportError):
                raise ProviderTransientError(
                    "network", self._redact(str(exc)), tool_id=self.tool_id
                ) from exc
            raise

    def _status_error(
        self, response: FetchResponse, url: httpx.URL
    ) -> ProviderTransientError | ToolExecutionError | None:
        status = response.status
        if 200 <= status < 300:
            return None
        where = f"POST {_describe(url)} answered {_status_text(status)}"
        if status == 429:
            retry_after = parse_retry_after(response.header("retry-after"))
            return ProviderTransientError(
                "rate_limit", where, retry_after=retry_after, tool_id=self.tool_id
            )
        excerpt = self._excerpt(response.text)
        if status >= 500:
            retry_after = parse_retry_after(response.header("retry-after"))
            return ProviderTransientError(
                "upstream",
                f"{where}: {excerpt}" if excerpt else where,
                retry_after=retry_after,
                tool_id=self.tool_id,
            )
        return ToolExecutionError(
            f"HTTP tool {self.tool_id!r}: {where}: {excerpt or '(empty body)'}",
            tool_id=self.tool_id,
        )

    def _body(self, response: FetchResponse, url: httpx.URL) -> Any:
        if response.status == 204 and not response.text:
            return None
        try:
            return response.json
        except ValueError:
            raise ToolExecutionError(
                f"HTTP tool {self.tool_id!r}: POST {_describe(url)} answered "
                f"{_status_text(response.status)} with a body that is not JSON: "
                f"{self._excerpt(response.text) or '(empty body)'}",
                tool_id=self.tool_id,
            ) from None

    def _convert(self, body: Any) -> Any:
        return body if self.result is None else self.result(body)

    def _for_member(self, error: Exception) -> Exception:
        """A batch member's own error for a failure of its whole request."""
        copy: Exception
        if isinstance(error, ProviderTransientError):
            copy = ProviderTransientError(
                error.category,
                str(error).removeprefix(f"[{error.category}] "),
                retry_after=error.retry_after,
                tool_id=self.tool_id,
            )
        elif isinstance(error, ToolExecutionError):
            copy = ToolExecutionError(str(error), tool_id=self.tool_id)
        else:
            copy = ToolExecutionError(
                f"HTTP tool {self.tool_id!r}: batch request failed: "
                f"{type(error).__name__}: {error}",
                tool_id=self.tool_id,
            )
        copy.__cause__ = error
        return copy

    def _redact(self, text: str) -> str:
        # The fetcher already redacts the secrets it was handed; this keeps the
        # tool's own messages safe even if a _Fetch double does not.
        return redact(text, self._secrets)

    def _excerpt(self, text: str) -> str:
        flat = " ".join(self._redact(text).split())
        return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def _shown(entry: Any) -> str:
    """A malformed batch entry as it reads in an error message."""
    try:
        return canonical_json(entry)
    except ValueError:  # NaN, say: JSON as Python reads it, but no canonical spelling
        return repr(entry)


def _fetch_of(call: ToolCall) -> _Fetch:
    if call.fetch is None:
        raise TypeError(
            f"HttpTool {call.tool_id!r} needs ToolCall.fetch; the trioplay runtime provides it"
        )
    return call.fetch
