"""HTTP fetches that never hang: phase deadlines, retries, redirects, secrets.

This is the machinery under ``ctx.fetch``, without receipts. A
:class:`Fetcher` owns one ``httpx.AsyncClient`` for a runtime and runs each
fetch under three deadlines, built from nested Trio cancel scopes:

- **total** around everything: name resolution, every attempt, the sleeps
  between attempts, every redirect hop and the body;
- **headers** from sending a request (resolving its host included) until the
  response head arrives, once per attempt;
- **body** while the body streams in.

Each phase runs for ``min(phase limit, remaining total)``; when the total is
what ends it, the error says ``phase="total"``. An expired deadline raises
:class:`FetchTimeout`; a cancellation that comes from the caller propagates as
``trio.Cancelled`` and is never reported as a timeout. The response is closed
(its connection dropped) whatever goes wrong.

Transport failures (connect errors, resets, a body that breaks off) are
retried for GET, HEAD and OPTIONS: ``Limits.fetch_retry_attempts`` attempts,
sleeping ``fetch_retry_delay × attempt`` in between, inside the total
deadline. Other methods get one attempt, since the server may have acted on
the request. Redirects are followed by hand (at most 10), each hop's
destination vetted again by :mod:`._egress`. Closing a response is bounded
too, and never outlasts the total deadline.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import sys
from collections.abc import Mapping
from contextlib import contextmanager
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING, Any, Literal, Self

import attrs
import httpx
import trio
from httpx._decoders import SUPPORTED_DECODERS

from ._egress import (
    DEFAULT_PORTS,
    Destination,
    EgressPolicy,
    PinnedTransport,
    Resolver,
    parse_url,
    pinned,
    plain_numeric_location,
    resolve_host,
)
from ._errors import FetchError, FetchTimeout, UnsafeOutboundUrl
from ._json import canonical_json, loads
from ._phase import current_row
from ._trace._records import FetchFinished, FetchPhase, FetchStarted

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from types import TracebackType

    from ._limits import FetchTimeouts, Limits
    from ._trace import Recorder

MAX_REDIRECTS = 10
MAX_PORT = 65535
# httpx's own table of the Content-Encodings it can decode (gzip, deflate, and br
# or zstd when their packages are installed): a body in any other encoding
# would come out as its encoded bytes.
DECODABLE = frozenset(SUPPORTED_DECODERS)
REDACTED = "[REDACTED]"
"""What :meth:`Fetcher.redact` puts where a secret value was."""
SECRET_PLACEHOLDER = "[SECRET]"
"""What :func:`request_identity` records instead of a secret header value."""

_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
_RETRYABLE = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.TimeoutException)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Headers that only make sense for the origin they were written for.
_ORIGIN_BOUND = frozenset({"authorization", "proxy-authorization", "cookie", "host"})
_BODY_HEADERS = frozenset({"content-type", "content-length", "content-encoding"})


def _printable(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    # The value itself never appears in the message.
    if not isinstance(value, str) or not value:
        raise ValueError("Secret needs a non-empty string")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("Secret must not contain control characters")


@attrs.frozen(repr=False)
class Secret:
    """A value ``fetch`` sends but never shows.

    ``auth=Secret("tok")`` sends ``Authorization: Bearer tok``; a header value
    may be a Secret too (``headers={"X-Api-Key": Secret("k")}``). A request
    carrying a Secret is refused over plain ``http://``, before any connection.
    Its value is replaced by ``[REDACTED]`` in responses, error messages and
    anything passed through :func:`redact`, and by ``[SECRET]`` in
    :func:`request_identity`. ``repr`` and ``str`` never show it; ``.value``
    does.
    """

    value: str = attrs.field(validator=_printable)

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    __str__ = __repr__


def redact(text: str, secrets: Iterable[Secret]) -> str:
    """``text`` with the value of each of ``secrets`` replaced by ``[REDACTED]``.

    What ``fetch`` does to responses, error messages and logs, for text of
    your own (a tool's message quoting what a provider answered). Longer
    values go first, so a secret that contains another is replaced whole.
    """
    for value in sorted({secret.value for secret in secrets}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def redact_bytes(body: bytes, secrets: Iterable[Secret]) -> bytes:
    """:func:`redact` for a body as bytes: each secret's UTF-8 bytes become ``[REDACTED]``."""
    for value in sorted({secret.value for secret in secrets}, key=len, reverse=True):
        body = body.replace(value.encode("utf-8"), REDACTED.encode("ascii"))
    return body


def _utf8_of_text(response: FetchResponse) -> bytes:
    return response.text.encode("utf-8")


@attrs.frozen
class FetchResponse:
    """A fetched response, whole: what ``ctx.fetch`` returns and its receipt stores.

    ``headers`` keeps every header in order, names lower-cased. ``text`` is
    the body decoded (by its charset, UTF-8 when it names none; bytes that do
    not decode become U+FFFD); ``content`` is the body as bytes, as the
    server sent it once its Content-Encoding is undone: use it for images,
    archives and other binary bodies. Known secret values are already
    redacted from ``text``, ``content``, ``headers`` and ``url``, so a
    replayed response equals the one first returned.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    text: str
    url: str
    content: bytes = attrs.field(default=attrs.Factory(_utf8_of_text, takes_self=True), repr=False)

    @property
    def ok(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status < 300

    @property
    def json(self) -> Any:
        """The body parsed as JSON; raises ``ValueError`` when it is not JSON."""
        return loads(self.text)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or ``None``."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key == wanted), None)

    def to_record(self) -> dict[str, Any]:
        """The JSON-able form stored in a ``fetch`` receipt.

        ``content`` is stored only when it is not ``text`` in UTF-8 (a binary
        body, or text in another charset), as ``content_base64``: JSON holds
        no bytes. A record without it (a text body, or a receipt written
        before ``content`` existed) gives back ``text`` encoded as UTF-8.
        """
        record: dict[str, Any] = {
            "status": self.status,
            "headers": [list(pair) for pair in self.headers],
            "text": self.text,
            "url": self.url,
        }
        if self.content != self.text.encode("utf-8"):
            record["content_base64"] = base64.b64encode(self.content).decode("ascii")
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> FetchResponse:
        """Rebuild a response from :meth:`to_record`'s output."""
        text = str(record["text"])
        encoded = record.get("content_base64")
        content = text.encode("utf-8") if encoded is None else _unbase64(encoded)
        return cls(
            status=int(record["status"]),
            headers=tuple((str(key), str(value)) for key, value in record["headers"]),
            text=text,
            url=str(record["url"]),
            content=content,
        )


def _unbase64(encoded: Any) -> bytes:
    if not isinstance(encoded, str):
        raise TypeError(f"content_base64 must be a string, got {type(encoded).__name__}")
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"content_base64 is not base64: {exc}") from None


HeaderValue = str | Secret
Headers = tuple[tuple[str, HeaderValue], ...]


def _header_pairs(headers: Mapping[str, HeaderValue] | Headers | None) -> Headers:
    """The headers as ``(lower-case name, value)`` pairs, each value checked."""
    items = headers.items() if isinstance(headers, Mapping) else headers or ()
    pairs: list[tuple[str, HeaderValue]] = []
    for name, value in items:
        if not isinstance(value, str | Secret):
            raise TypeError(f"header {name!r} must be a str or a trioplay.Secret")
        pairs.append((name.lower(), value))
    return tuple(pairs)


def _secret_or_none(_instance: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, Secret):
        raise TypeError("fetch auth must be a trioplay.Secret")


@attrs.frozen
class FetchOptions:
    """What one fetch asks for besides its URL, checked once where the call comes in.

    The keywords of ``ctx.fetch``, ``rc.fetch`` and ``ToolCall.fetch``, built
    into this record at that edge and passed whole from there down to the
    request that is sent. ``json`` is sent as a JSON body (canonical JSON),
    ``content`` as raw bytes (or UTF-8 text); ``auth=Secret(token)`` sends a
    bearer token; ``headers`` (a mapping, kept as ``(lower-case name,
    value)`` pairs) may hold Secrets too; ``timeouts`` overrides the
    runtime's. The receipt's own options (``stale_after``, ``force``) are not
    here: the HTTP client has no receipt. Raises ``TypeError`` for a header
    value or ``auth`` that is neither a str nor a :class:`Secret`, and
    ``ValueError`` for both ``json`` and ``content``.
    """

    method: str = "GET"
    headers: Headers = attrs.field(default=(), converter=_header_pairs)
    json: Any = None
    content: bytes | str | None = None
    auth: Secret | None = attrs.field(default=None, validator=_secret_or_none)
    timeouts: FetchTimeouts | None = None

    def __attrs_post_init__(self) -> None:
        if self.json is not None and self.content is not None:
            raise ValueError("fetch takes json= or content=, not both")

    def secrets(self) -> list[Secret]:
        """Every Secret the request carries (header values and ``auth``)."""
        found = [value for _, value in self.headers if isinstance(value, Secret)]
        return found if self.auth is None else [*found, self.auth]


_NO_OPTIONS = FetchOptions()


@attrs.frozen
class _Outgoing:
    # One hop's request, with secrets still wrapped.
    method: str
    url: httpx.URL
    headers: Headers
    body: bytes | None

    def __attrs_post_init__(self) -> None:
        if self.url.scheme != "https" and any(isinstance(v, Secret) for _, v in self.headers):
            raise FetchError(
                f"refusing to send a Secret over plain http to {self.url.host!r}; "
                "use an https:// URL"
            )

    @classmethod
    def first(cls, url: str, options: FetchOptions) -> _Outgoing:
        """The first hop of a fetch of ``url`` with ``options``."""
        try:
            parsed = _checked(parse_url(url))
        except httpx.InvalidURL as exc:
            raise FetchError(f"invalid URL: {exc}") from None
        pairs = list(options.headers)
        if options.auth is not None:
            pairs = [pair for pair in pairs if pair[0] != "authorization"]
            pairs.append(("authorization", Secret(f"Bearer {options.auth.value}")))
        body: bytes | None = None
        if options.json is not None:
            # Canonical JSON: the same value always sends (and identifies as) the same bytes.
            body = canonical_json(options.json).encode("utf-8")
            if not any(name == "content-type" for name, _ in pairs):
                pairs.append(("content-type", "application/json"))
        elif options.content is not None:
            content = options.content
            body = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        return cls(method=options.method.upper(), url=parsed, headers=tuple(pairs), body=body)

    def wire_headers(self) -> list[tuple[str, str]]:
        return [
            (name, value.value if isinstance(value, Secret) else value)
            for name, value in self.headers
        ]

    def identity(self) -> dict[str, Any]:
        headers = sorted(
            [name, SECRET_PLACEHOLDER if isinstance(value, Secret) else value]
            for name, value in self.headers
        )
        body = None if self.body is None else hashlib.sha256(self.body).hexdigest()
        return {
            "method": self.method,
            "url": str(self.url),
            "headers": headers,
            "body_sha256": body,
        }


def request_identity(url: str, options: FetchOptions = _NO_OPTIONS) -> dict[str, Any]:
    """A stable, JSON-able description of a request, with no secret in it.

    Returns ``{"method", "url", "headers", "body_sha256"}``: the normalised
    URL, the caller's headers sorted and lower-cased with every Secret
    replaced by ``[SECRET]`` (``auth`` shows as an ``authorization`` header),
    and the SHA-256 of the body (``None`` without one). ``json=`` bodies are
    sent as canonical JSON, so key order changes neither the bytes nor the
    identity. Two requests with the same identity are the same request,
    whatever their secret values: rotating a token does not invalidate
    stored responses. Raises what ``fetch`` raises for an unusable request,
    before any I/O.
    """
    return _Outgoing.first(url, options).identity()


@attrs.frozen
class _Deadlines:
    """The deadlines of one fetch, and the one place an expired one becomes FetchTimeout."""

    timeouts: FetchTimeouts
    total_at: float

    @classmethod
    def start(cls, timeouts: FetchTimeouts) -> _Deadlines:
        return cls(timeouts, trio.current_time() + timeouts.total)

    @contextmanager
    def total(self) -> Iterator[None]:
        with trio.CancelScope(deadline=self.total_at) as scope:
            yield
        # Only our own deadline sets cancelled_caught: a cancelled caller's
        # scope is visible to ours, so its Cancelled passes through untouched.
        # (`from None`: the Cancelled we caught is an implementation detail.)
        if scope.cancelled_caught:
            raise FetchTimeout("total", self.timeouts.total) from None

    @contextmanager
    def phase(self, phase: Literal["headers", "body"]) -> Iterator[None]:
        limit = self.timeouts.headers if phase == "headers" else self.timeouts.body
        phase_at = trio.current_time() + limit
        # When the total would end first, leave it to the enclosing total
        # scope, so the error names the deadline that actually bound.
        with trio.CancelScope(deadline=phase_at if phase_at < self.total_at else math.inf) as scope:
            yield
        if scope.cancelled_caught:
            raise FetchTimeout(phase, limit) from None


class Fetcher:
    """One runtime's HTTP client: deadlines, retries, safe egress and secrets.

    Use it as an async context manager (it owns an ``httpx.AsyncClient`` and
    its connection pool)::

        async with Fetcher(timeouts=FetchTimeouts(), limits=Limits()) as fetcher:
            options = FetchOptions(auth=Secret(token))
            response = await fetcher.fetch("https://api.example/v1/x", options)

    ``allow_networks`` lists CIDR blocks that may be reached although they are
    not public. ``transport`` replaces the default :class:`PinnedTransport`
    (tests pass in-memory transports; the egress check still runs first) and
    ``resolve`` replaces DNS resolution (``resolve(host, port) -> [address,
    ...]``).

    The client keeps no cookies between fetches and ignores proxy and netrc
    settings from the environment: every fetch stands alone, so a replayed
    receipt means the same thing as the call it recorded.
    """

    def __init__(
        self,
        *,
        timeouts: FetchTimeouts,
        limits: Limits,
        allow_networks: Sequence[str] = (),
        transport: httpx.AsyncBaseTransport | None = None,
        resolve: Resolver | None = None,
        trace: Recorder | None = None,
    ) -> None:
        self._trace = trace
        self._fetches = 0  # numbers the fetches in the events
        self._timeouts = timeouts
        self._limits = limits
        self._policy = EgressPolicy.from_cidrs(allow_networks)
        self._resolve = resolve or resolve_host
        self._secrets: set[Secret] = set()
        self._transport = transport
        self._opened: httpx.AsyncClient | None = None

    @property
    def _client(self) -> httpx.AsyncClient:
        if self._opened is None:
            raise RuntimeError("Fetcher is used as `async with Fetcher(...) as fetcher:`")
        return self._opened

    def _new_client(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=transport or PinnedTransport(),
            timeout=None,  # the cancel scopes are the deadlines
            follow_redirects=False,
            trust_env=False,
            # A jar that refuses every cookie: fetches share no state.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            headers={"user-agent": "trioplay"},
            event_hooks={"response": [plain_numeric_location]},
        )

    async def __aenter__(self) -> Self:
        """Build the HTTP client and its TLS context in a worker thread, then open it.

        Loading the TLS context's CA certificates takes 50-300 ms of CPU, which
        on the event loop would stop every task (and overrun their deadlines).
        Cancellable: a caller cancelled meanwhile leaves the thread to finish
        alone. Built on the loop instead: with a transport passed in (tests,
        scenarios), which has no TLS context to load, and under a mock clock,
        where the loop's CPU time costs no virtual time while a wait for a
        thread would let an autojumping clock skip to the next deadline.
        """
        if self._transport is None and not _mock_clock():
            client = await trio.to_thread.run_sync(self._new_client, None, abandon_on_cancel=True)
        else:
            client = self._new_client(self._transport)
        await client.__aenter__()
        self._opened = client
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        client, self._opened = self._opened, None
        if client is None:
            return
        with trio.move_on_after(self._limits.cleanup_timeout, shield=True):
            await client.__aexit__(exc_type, exc_value, traceback)

    def prepare(self, url: str, options: FetchOptions = _NO_OPTIONS) -> _Outgoing:
        """The request :meth:`fetch` would send (checked, before any I/O), for :meth:`send`.

        Remembers the request's secrets for :meth:`redact`: call it before
        deciding whether to fetch or to replay a receipt (its ``identity()``
        is :func:`request_identity`'s), so that a run that only replays still
        redacts the secrets its play passed.
        """
        outgoing = _Outgoing.first(url, options)
        # The bare values: a server may echo a token without its "Bearer ".
        self._secrets.update(options.secrets())
        return outgoing

    def redact(self, text: str) -> str:
        """``text`` with every secret value this fetcher has seen replaced by ``[REDACTED]``."""
        return redact(text, self._secrets)

    async def fetch(self, url: str, options: FetchOptions = _NO_OPTIONS) -> FetchResponse:
        """Send one request and read its whole response, within the deadlines.

        Any status is returned as a response (check ``.ok``); redirects are
        followed. ``options.timeouts`` overrides the fetcher's for this call.

        Raises :class:`FetchTimeout` when a deadline expires,
        :class:`UnsafeOutboundUrl` for a refused destination (also on a
        redirect hop), and :class:`FetchError` for a Secret over http, a
        transport failure after the allowed attempts (the httpx error is its
        ``__cause__``), a body over ``fetch_max_body_bytes`` or too many
        redirects.
        """
        return await self.send(self.prepare(url, options), timeouts=options.timeouts)

    async def send(
        self, outgoing: _Outgoing, *, timeouts: FetchTimeouts | None = None
    ) -> FetchResponse:
        """:meth:`fetch` of a request :meth:`prepare` made (parsed and checked once)."""
        deadlines = _Deadlines.start(timeouts or self._timeouts)
        trace = self._trace
        if trace is None:
            with deadlines.total():
                return await self._follow(outgoing, deadlines, 0)
        self._fetches += 1
        number = self._fetches
        row = current_row()
        trace.add(
            FetchStarted,
            number,
            outgoing.method,
            self.redact(str(outgoing.url)),
            row.key if row is not None else None,
        )
        try:
            with deadlines.total():
                response = await self._follow(outgoing, deadlines, number)
        except BaseException as exc:
            trace.add(FetchFinished, number, None, 0, type(exc).__name__)
            raise
        trace.add(FetchFinished, number, response.status, len(response.text), None)
        return response

    def _phase(self, number: int, phase: str, attempt: int) -> None:
        if self._trace is not None:
            self._trace.add(FetchPhase, number, phase, attempt)

    async def _follow(
        self, outgoing: _Outgoing, deadlines: _Deadlines, number: int
    ) -> FetchResponse:
        for _hop in range(MAX_REDIRECTS + 1):
            response, body, next_hop = await self._hop(outgoing, deadlines, number)
            if next_hop is None:
                return self._finish(response, body)
            outgoing = next_hop
        raise FetchError(f"more than {MAX_REDIRECTS} redirects, last to {_describe(outgoing.url)}")

    async def _hop(
        self, outgoing: _Outgoing, deadlines: _Deadlines, number: int
    ) -> tuple[httpx.Response, bytes, _Outgoing | None]:
        """Send one hop's request and read its body (none for a redirect: its next hop).

        One attempt is the request and its body: a transport failure in
        either is tried again for an idempotent method.
        """
        request = self._client.build_request(
            outgoing.method, outgoing.url, headers=outgoing.wire_headers(), content=outgoing.body
        )
        attempts = self._limits.fetch_retry_attempts if outgoing.method in _IDEMPOTENT else 1
        destination: Destination | None = None  # resolved once per hop, reused by retries
        attempt = 0
        while True:
            attempt += 1
            reading = False
            self._phase(number, "headers", attempt)
            try:
                with deadlines.phase("headers"):
                    if destination is None:
                        destination = await self._policy.vet(outgoing.url, self._resolve)
                    with pinned(destination):
                        response = await self._client.send(request, stream=True)
                try:
                    next_hop = _redirect(outgoing, response)
                    reading = next_hop is None
                    if reading:
                        self._phase(number, "body", attempt)
                    body = await self._read_body(response, deadlines) if reading else b""
                finally:
                    await self._close(response, deadlines)
                return response, body, next_hop
            except httpx.TransportError as exc:
                if attempt >= attempts or not isinstance(exc, _RETRYABLE):
                    what = (
                        f"reading the body of {_describe(outgoing.url)}"
                        if reading
                        else f"{outgoing.method} {_describe(outgoing.url)}"
                    )
                    raise FetchError(
                        self.redact(
                            f"{what} failed after {attempt} attempt(s): {type(exc).__name__}: {exc}"
                        )
                    ) from exc
            self._phase(number, "retry", attempt)
            await trio.sleep(self._limits.fetch_retry_delay * attempt)

    async def _read_body(self, response: httpx.Response, deadlines: _Deadlines) -> bytes:
        """The whole body; transport errors propagate (the caller may retry them)."""
        unknown = _undecodable(response)
        if unknown:
            raise FetchError(
                f"{_describe(response.url)} answered with Content-Encoding {unknown!r}, which "
                f"this client cannot decode (it decodes {', '.join(sorted(DECODABLE))}); "
                "ask for another with an accept-encoding header"
            )
        cap = self._limits.fetch_max_body_bytes
        too_large = f"response body exceeds fetch_max_body_bytes={cap}"
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise FetchError(too_large)
        body = bytearray()
        try:
            with deadlines.phase("body"), trio.CancelScope() as stop_reading:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > cap:
                        # Raising here would leave httpx's stream generators
                        # suspended (Trio warns when they are collected);
                        # cancelling makes their next read raise, which
                        # unwinds them all.
                        stop_reading.cancel()
        except httpx.DecodingError as exc:
            raise FetchError(
                self.redact(
                    f"reading the body of {_describe(response.url)} failed: "
                    f"{type(exc).__name__}: {exc}"
                )
            ) from exc
        if len(body) > cap:
            raise FetchError(too_large)
        return bytes(body)

    def _finish(self, response: httpx.Response, body: bytes) -> FetchResponse:
        return FetchResponse(
            status=response.status_code,
            headers=tuple(
                (name, self.redact(value)) for name, value in response.headers.multi_items()
            ),
            text=self.redact(body.decode(response.encoding or "utf-8", errors="replace")),
            url=self.redact(str(response.url)),
            content=redact_bytes(body, self._secrets),
        )

    async def _close(self, response: httpx.Response, deadlines: _Deadlines) -> None:
        # Shielded so a cancelled caller still drops the connection, bounded
        # so a peer that will not let go cannot hold the caller, and never
        # past the total deadline (the total stays total).
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = min(
                trio.current_time() + self._limits.cleanup_timeout, deadlines.total_at
            )
            await response.aclose()


def _redirect(outgoing: _Outgoing, response: httpx.Response) -> _Outgoing | None:
    """The next hop a redirect response asks for, or ``None`` when it is not one."""
    location = response.headers.get("location")
    if response.status_code not in _REDIRECTS or not location:
        return None
    try:
        url = _checked(response.url.join(location))
    except httpx.InvalidURL as exc:
        raise FetchError(f"redirect to an invalid URL: {exc}") from None
    method, body, headers = outgoing.method, outgoing.body, outgoing.headers
    # What browsers (and httpx) do: 303 turns into GET, and so do 301/302 after POST.
    if (response.status_code == 303 and method != "HEAD") or (
        response.status_code in (301, 302) and method == "POST"
    ):
        method, body = "GET", None
        headers = tuple(pair for pair in headers if pair[0] not in _BODY_HEADERS)
    if _origin(url) != _origin(outgoing.url):
        headers = tuple(
            (name, value)
            for name, value in headers
            if name not in _ORIGIN_BOUND and not isinstance(value, Secret)
        )
    return _Outgoing(method=method, url=url, headers=headers, body=body)


def _checked(url: httpx.URL) -> httpx.URL:
    """``url`` when fetch may use it; the same rules for the first hop and redirects."""
    if url.port is not None and not 0 <= url.port <= MAX_PORT:
        # httpx keeps it, and the socket layer would wrap it modulo 65536.
        raise httpx.InvalidURL(f"port {url.port} is out of range 0-{MAX_PORT}")
    if url.scheme not in DEFAULT_PORTS:
        raise UnsafeOutboundUrl(f"fetch only reaches http and https URLs, not {url.scheme!r}")
    if url.userinfo:
        raise FetchError(
            "credentials in a URL would be stored in receipts and logs; "
            "pass auth=trioplay.Secret(...) instead"
        )
    return url


def _mock_clock() -> bool:
    """Whether this run's clock is Trio's ``MockClock`` (never true if nothing imported it:
    ``trio.testing`` costs an import the command line does without)."""
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock)


def _undecodable(response: httpx.Response) -> str | None:
    """The first Content-Encoding of ``response`` that httpx cannot decode, if any."""
    for value in response.headers.get_list("content-encoding", split_commas=True):
        encoding = value.strip().lower()
        if encoding and encoding not in DECODABLE:
            return encoding
    return None


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return (url.scheme, url.host, url.port or DEFAULT_PORTS[url.scheme])


def _describe(url: httpx.URL) -> str:
    # Without the query: it may carry tokens we cannot recognise.
    return f"{url.scheme}://{url.netloc.decode('ascii')}{url.path}"
