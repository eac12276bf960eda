"""Egress safety: which addresses ``fetch`` may connect to, and connecting only there.

``fetch`` is meant to be pointed at user-supplied URLs, so by default it only
reaches public addresses. Every block in the project's own table
(:mod:`._address_blocks`: the IANA special-purpose registries, multicast, the
reserved IPv6 space and the cloud platforms' metadata and host addresses) is
refused with :class:`UnsafeOutboundUrl`, the same on every Python.
IPv4-mapped (``::ffff:0:0/96``) and NAT64 (``64:ff9b::/96``) addresses are
judged by the IPv4 address they carry, since that is where they connect.
``allow_networks`` opens specific CIDR blocks, for example
``["127.0.0.0/8"]`` for a local test server.

The check is made on the address that is actually connected. A host name is
resolved once, every address it resolves to is judged (one unsafe answer
refuses the whole name: a name that mixes public and private answers is a DNS
rebinding attempt, not a misconfiguration to route around), and
:class:`PinnedTransport` then connects to exactly those vetted addresses while
the request keeps its ``Host`` header and TLS verifies the certificate for the
host name. A numeric host is read the way a C resolver reads it
(``inet_aton``: ``2130706433``, ``0177.0.0.1``, ``0x7f.1`` and ``127.1`` all
name 127.0.0.1; :func:`parse_url` spells it as that address) and judged as
that address, without asking any resolver.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address, ip_network
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import attrs
import httpcore
import httpx
import trio

from ._address_blocks import IPAddress, IPNetwork, refused_block
from ._errors import UnsafeOutboundUrl

if TYPE_CHECKING:
    import ssl

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``resolve(host, port)`` returns the addresses ``host`` names, as strings."""

DEFAULT_PORTS = {"http": 80, "https": 443}

# The IPv6 forms whose connections go to the IPv4 address in their last 32 bits.
_IPV4_MAPPED = IPv6Network("::ffff:0:0/96")
_NAT64 = IPv6Network("64:ff9b::/96")
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset("0123456789abcdef")}


def inet_aton(text: str) -> IPv4Address | None:
    """The IPv4 address a C resolver's ``inet_aton`` reads in ``text``, or ``None``.

    One to four dot-separated numbers, each decimal, octal (leading ``0``) or
    hex (leading ``0x``); the last number fills all the remaining bytes, so
    ``127.1`` is 127.0.0.1 and ``2130706433`` is too. Anything else is not a
    numeric host and is left to DNS.
    """
    values: list[int] = []
    for part in text.split("."):
        value = _c_number(part)
        if value is None:
            return None
        values.append(value)
    *leading, last = values
    if len(leading) > 3 or any(value > 0xFF for value in leading):
        return None
    if last >= 1 << (8 * (4 - len(leading))):
        return None
    number = last
    for index, value in enumerate(leading):
        number |= value << (24 - 8 * index)
    return IPv4Address(number)


def _c_number(part: str) -> int | None:
    # strtoul with base 0, as inet_aton uses it: 0x → hex, 0 → octal, else decimal.
    if part[:2].lower() == "0x":
        digits, base = part[2:].lower(), 16
    elif part.startswith("0"):
        digits, base = part, 8
    else:
        digits, base = part, 10
    if not digits or not _DIGITS[base].issuperset(digits):
        return None
    return int(digits, base)


def parse_ip_host(host: str) -> IPAddress | None:
    """The address a URL host spells numerically, or ``None`` when it is a DNS name.

    IPv6 hosts may carry brackets and a zone id (``fe80::1%25eth0``). Raises
    :class:`UnsafeOutboundUrl` for an IPv6-looking host that does not parse,
    since nothing can vouch for it.
    """
    if ":" in host:
        try:
            return IPv6Address(unquote(host.strip("[]")))
        except ValueError:
            raise UnsafeOutboundUrl(f"{host!r} is not a valid IPv6 address") from None
    # A trailing dot makes a name absolute; browsers read "127.0.0.1." as an address too.
    return inet_aton(host.removesuffix("."))


def parse_url(text: str) -> httpx.URL:
    """``httpx.URL(text)``, with a numeric IPv4 host spelled as the address it names.

    A host that :func:`inet_aton` reads (``0177.0.0.1``, ``2130706433``,
    ``0x7f.1``, ``127.1``, ``127.0.0.1.``) becomes its dotted quad, as browsers
    do, so that the request, its receipt and the egress check all see the same
    address (and httpx, which rejects dotted quads with leading zeros, sees a
    plain one). Relative references pass through. Raises ``httpx.InvalidURL``.
    """
    return httpx.URL(_plain_numeric_host(text))


async def plain_numeric_location(response: httpx.Response) -> None:
    """An httpx response hook: a redirect's numeric ``Location`` host, spelled plainly.

    httpx parses ``Location`` itself before the caller sees the response, and
    would fail on ``http://0177.0.0.1/`` instead of letting the hop be vetted.
    """
    location = response.headers.get("location")
    if location:
        response.headers["location"] = _plain_numeric_host(location)


def _plain_numeric_host(text: str) -> str:
    match = _AUTHORITY_HOST.match(text)
    if match is not None:
        address = inet_aton(match["host"].removesuffix("."))
        if address is not None:
            return f"{match['head']}{address}{text[match.end() :]}"
    return text


# The host of an absolute or scheme-relative URL, as httpx splits it: after the
# last "@" of the authority, up to a port, path, query or fragment.
_AUTHORITY_HOST = re.compile(
    r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*:)?//(?:[^/?#]*@)?)(?P<host>[^/?#:@\[\]]*)"
)


def non_public_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or ``None`` when it is one."""
    carried = _carried_ipv4(address)
    if carried is not None:
        reason = non_public_reason(carried)
        return None if reason is None else f"a spelling of {carried}, which is {reason}"
    block = refused_block(address)
    return None if block is None else block.describe()


def _carried_ipv4(
    address: IPAddress, forms: tuple[IPv6Network, ...] = (_IPV4_MAPPED, _NAT64)
) -> IPv4Address | None:
    # IPv4-mapped and NAT64 addresses connect to the IPv4 host they carry.
    if isinstance(address, IPv6Address) and any(address in form for form in forms):
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


@attrs.frozen
class Destination:
    """A host and port with the vetted addresses a connection to it may use."""

    host: str
    port: int
    addresses: tuple[str, ...]


@attrs.frozen
class EgressPolicy:
    """Which destinations ``fetch`` may connect to: public ones, plus ``allow_networks``."""

    allow_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_cidrs(cls, cidrs: Iterable[str]) -> EgressPolicy:
        """Build a policy from CIDR strings; raises ``ValueError`` for a malformed one."""
        return cls(tuple(ip_network(cidr, strict=False) for cidr in cidrs))

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` is refused, or ``None`` when a connection may go there."""
        # An IPv4-mapped address reaches its IPv4 host, so that host's block opens it too.
        mapped = _carried_ipv4(address, forms=(_IPV4_MAPPED,))
        candidates = [address] if mapped is None else [address, mapped]
        if any(ip in network for ip in candidates for network in self.allow_networks):
            return None
        return non_public_reason(address)

    async def vet(self, url: httpx.URL, resolve: Resolver) -> Destination:
        """Resolve ``url``'s host once and check every address it names.

        Raises :class:`UnsafeOutboundUrl` when any address is refused, and
        ``httpx.ConnectError`` when the name does not resolve (a transport
        failure, retried like one).
        """
        host = url.raw_host.decode("ascii")
        port = url.port or DEFAULT_PORTS[url.scheme]
        literal = parse_ip_host(host)
        if literal is not None:
            addresses: list[IPAddress] = [literal]
        else:
            try:
                answers = await resolve(host, port)
            except OSError as exc:
                raise httpx.ConnectError(f"could not resolve {host!r}: {exc}") from exc
            if not answers:
                raise httpx.ConnectError(f"{host!r} resolved to no address")
            addresses = [_parse_answer(host, answer) for answer in answers]
        for address in addresses:
            reason = self.refusal(address)
            if reason is not None:
                raise UnsafeOutboundUrl(
                    f"refusing to connect to {host!r}: {address} is {reason}; "
                    "allow_networks can open it"
                )
        return Destination(host, port, tuple(str(address) for address in addresses))


def _parse_answer(host: str, answer: str) -> IPAddress:
    try:
        return ip_address(answer)
    except ValueError:
        raise UnsafeOutboundUrl(
            f"{host!r} resolved to {answer!r}, which is not an address"
        ) from None


async def resolve_host(host: str, port: int) -> list[str]:
    """The default resolver: ``getaddrinfo``, answers in order, without duplicates."""
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# The destination the current task vetted. httpcore opens a connection in the
# task whose request needs it, so the backend below reads the pin of exactly
# the request it connects for.
_pinned: ContextVar[Destination | None] = ContextVar("trioplay_pinned", default=None)


@contextmanager
def pinned(destination: Destination) -> Iterator[None]:
    """Connections opened inside this block go to ``destination``'s vetted addresses."""
    token = _pinned.set(destination)
    try:
        yield
    finally:
        _pinned.reset(token)


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    # The `timeout` parameters below are httpcore's interface; the pool passes
    # None because fetch's deadlines are cancel scopes around the whole call.
    def __init__(self) -> None:
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        destination = _pinned.get()
        if destination is None or (destination.host, destination.port) != (host, port):
            raise UnsafeOutboundUrl(f"no vetted address for {host}:{port}; refusing to connect")
        # Every address was vetted; try them in the resolver's order.
        *others, last = destination.addresses
        for address in others:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError:
                continue
        return await self._inner.connect_tcp(last, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise UnsafeOutboundUrl("fetch does not connect to unix sockets")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class PinnedTransport(httpx.AsyncBaseTransport):
    """The default ``fetch`` transport: connects only to the vetted addresses.

    A plain httpcore connection pool whose network backend replaces the host
    name with the addresses :meth:`EgressPolicy.vet` approved (see
    :func:`pinned`); TLS still sends and verifies the host name. Connections
    are pooled per host name, so a kept-alive connection stays on the address
    it was vetted for.
    """

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_PinnedBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            core_response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=_ResponseStream(core_response),
            extensions=core_response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: httpcore.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._response.aiter_stream().__aiter__()
        while True:
            with _as_httpx_errors():
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    return
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


# httpx's own transport translates httpcore errors the same way; callers (and
# the retry rules in _fetch) only ever see httpx's exception types.
_HTTPX_ERRORS: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
}


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        kind = next((_HTTPX_ERRORS[t] for t in type(exc).__mro__ if t in _HTTPX_ERRORS), None)
        if kind is None:
            raise
        raise kind(str(exc)) from exc
