"""What may leave the process: egress rules and secrets.

Every non-public destination is refused before any connection is attempted:
the transport and resolver doubles below record every attempt, and the tests
check there was none. A "public" destination is a fake resolver answer served
by an in-memory transport; nothing here reaches the internet.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_address
from pathlib import Path

import httpx
import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

import trioplay
from trioplay import FetchError, FetchTimeouts, Limits, UnsafeOutboundUrl
from trioplay._address_blocks import REFUSED_BLOCKS, Block
from trioplay._egress import EgressPolicy, PinnedTransport, inet_aton, parse_ip_host
from trioplay._fetch import REDACTED, Fetcher, FetchOptions, Secret, request_identity

PUBLIC_IP = "93.184.216.34"

Reply = Callable[[httpx.Request], httpx.Response]


class Recorder(httpx.AsyncBaseTransport):
    """An in-memory server that records every request it is asked to send."""

    def __init__(self, reply: Reply | None = None) -> None:
        self.reply = reply or (lambda request: httpx.Response(200, text="ok"))
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.reply(request)


class Resolver:
    """A DNS double: fixed answers per name (public by default), every lookup recorded."""

    def __init__(self, answers: Mapping[str, list[str]] | None = None) -> None:
        self.answers = dict(answers or {})
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return self.answers.get(host, [PUBLIC_IP])


def fetcher(
    transport: httpx.AsyncBaseTransport,
    resolver: Resolver | None = None,
    allow_networks: list[str] | None = None,
) -> Fetcher:
    return Fetcher(
        timeouts=FetchTimeouts(),
        limits=Limits(),
        allow_networks=allow_networks or [],
        transport=transport,
        resolve=resolver or Resolver(),
    )


async def assert_refused(url: str, resolver: Resolver | None = None) -> UnsafeOutboundUrl:
    transport, resolver = Recorder(), resolver or Resolver()
    async with fetcher(transport, resolver) as f:
        with pytest.raises(UnsafeOutboundUrl) as caught:
            await f.fetch(url)
    assert transport.requests == []
    return caught.value


# -- numeric hosts, read as a C resolver reads them --------------------------

UNSAFE_URLS = [
    "http://127.0.0.1/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/",
    "http://100.100.100.200/",  # Alibaba Cloud metadata, in CGNAT space
    "http://0.0.0.0/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://192.0.2.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.1/",
    "http://0x7F.0.0.1/",
    "http://127.1/",
    "http://0/",
    "http://012.0x1.2.3/",
    "http://127.0.0.1./",
    "http://[::1]/",
    "http://[::]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::127.0.0.1]/",
    "http://[::8.8.8.8]/",
    "http://[::ffff:0:a00:1]/",
    "http://[64:ff9b::a00:1]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[64:ff9b:1::1]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://[fd00:ec2::254]/",  # AWS IPv6 metadata
    "http://[fec0::1]/",
    "http://[ff02::1]/",
    "http://[2001:db8::1]/",
]


@pytest.mark.parametrize("url", UNSAFE_URLS)
async def test_non_public_numeric_hosts_are_refused_without_lookup_or_connection(
    url: str,
) -> None:
    resolver = Resolver()
    await assert_refused(url, resolver)
    assert resolver.lookups == []


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.0x10203", "10.1.2.3"),
        ("0xa.0.010.0x1", "10.0.8.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("[fe80::1%25eth0]", "fe80::1%eth0"),
        ("example.com", None),
        ("1.2.3.4.5", None),
        ("08.1.2.3", None),
        ("0x", None),
        ("256.1.1.1", None),
        ("1.16777216", None),
    ],
)
def test_numeric_hosts_parse_like_inet_aton(host: str, address: str | None) -> None:
    expected = None if address is None else ip_address(address)
    assert parse_ip_host(host) == expected


@pytest.mark.skipif(sys.platform != "linux", reason="compares with glibc's inet_aton")
@given(st.text(alphabet="0123456789abcdefxX.", max_size=24))
@example("0x.1")
@example("00x1")
@example("4294967295")
@example("4294967296")
def test_inet_aton_agrees_with_the_c_library(text: str) -> None:
    try:
        expected: IPv4Address | None = IPv4Address(socket.inet_aton(text))
    except OSError:
        expected = None
    assert inet_aton(text) == expected


UNSAFE_V4_BLOCKS = [
    IPv4Network(block)
    for block in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "100.64.0.0/10",
        "0.0.0.0/8",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]


@st.composite
def unsafe_ipv4(draw: st.DrawFn) -> IPv4Address:
    block = draw(st.sampled_from(UNSAFE_V4_BLOCKS))
    return block[draw(st.integers(0, block.num_addresses - 1))]


@st.composite
def c_number(draw: st.DrawFn, value: int) -> str:
    """``value`` in one of the spellings strtoul(base 0) reads."""
    padding = "0" * draw(st.integers(0, 3))
    base = draw(st.sampled_from(["dec", "oct", "hex"]))
    if base == "dec":
        return str(value)
    if base == "oct":
        return "0" + padding + format(value, "o")
    digits = format(value, "x")
    digits = "".join(draw(st.sampled_from([c.lower(), c.upper()])) for c in digits)
    return draw(st.sampled_from(["0x", "0X"])) + padding + digits


@st.composite
def ipv4_spelling(draw: st.DrawFn) -> str:
    """An inet_aton spelling of an unsafe address: 1-4 parts, mixed bases, maybe a final dot."""
    number = int(draw(unsafe_ipv4()))
    parts = draw(st.integers(1, 4))
    leading = [(number >> (24 - 8 * index)) & 0xFF for index in range(parts - 1)]
    last = number & ((1 << (8 * (5 - parts))) - 1)
    spelled = [draw(c_number(value)) for value in [*leading, last]]
    return ".".join(spelled) + draw(st.sampled_from(["", "."]))


UNSAFE_V6_BLOCKS = ["::1/128", "fe80::/10", "fc00::/7", "ff00::/8", "2001::/32", "fec0::/10"]


@st.composite
def ipv6_spelling(draw: st.DrawFn) -> str:
    """An IPv6 host that is, or smuggles, a non-public address, in varied spellings."""
    v4 = draw(unsafe_ipv4())
    high, low = int(v4) >> 16, int(v4) & 0xFFFF
    form = draw(st.sampled_from(["mapped", "mapped-hex", "compat", "nat64", "6to4", "native"]))
    if form == "mapped":
        text = f"::ffff:{v4}"
    elif form == "mapped-hex":
        text = f"0:0:0:0:0:ffff:{high:x}:{low:x}"
    elif form == "compat":
        text = f"::{v4}"
    elif form == "nat64":
        text = f"64:ff9b::{v4}"
    elif form == "6to4":
        text = f"2002:{high:x}:{low:x}::{draw(st.integers(0, 0xFFFF)):x}"
    else:
        block = draw(st.sampled_from(UNSAFE_V6_BLOCKS))
        network = ip_address(block.split("/")[0])
        size = 128 - int(block.split("/")[1])
        text = str(IPv6Address(int(network) | draw(st.integers(0, (1 << size) - 1))))
    address = IPv6Address(text)
    text = draw(st.sampled_from([text, address.compressed, address.exploded]))
    text = "".join(draw(st.sampled_from([c.lower(), c.upper()])) for c in text)
    zone = draw(st.sampled_from(["", "%25eth0", "%251"])) if address.is_link_local else ""
    return f"[{text}{zone}]"


@given(host=st.one_of(ipv4_spelling(), ipv6_spelling()), port=st.sampled_from(["", ":8080"]))
@example(host="0177.0.0.1", port="")
@example(host="0251.0376.0251.0376", port=":8080")
async def test_spellings_of_non_public_addresses_are_refused(host: str, port: str) -> None:
    # Every inet_aton spelling is read as its address and refused as that address,
    # dotted quads with leading zeros (which httpx alone rejects as invalid) included.
    transport, resolver = Recorder(), Resolver()
    async with fetcher(transport, resolver) as f:
        with pytest.raises(UnsafeOutboundUrl):
            await f.fetch(f"http://{host}{port}/")
    assert transport.requests == []
    assert resolver.lookups == []


# -- special-purpose and cloud-platform addresses (issue 16) ----------------


class NoConnection(httpx.AsyncBaseTransport):
    """A transport that fails the test if the policy lets anything reach it."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pytest.fail(f"the egress policy let {request.url} through")


async def no_lookup(host: str, port: int) -> list[str]:
    pytest.fail(f"a numeric host was sent to the resolver: {host!r}")


def ipv4_spellings(address: IPv4Address) -> list[str]:
    """URL hosts that all name ``address``: the forms a C resolver (and a browser) reads."""
    number, octets = int(address), str(address).split(".")
    return [
        str(address),
        str(number),
        f"0x{number:08x}",
        ".".join(f"0{int(octet):o}" for octet in octets),
        f"0{number:o}",
        f"{octets[0]}.{number & 0xFFFFFF}",
        f"{address}.",
        f"[::ffff:{address}]",
        f"[::ffff:{number >> 16:x}:{number & 0xFFFF:x}]",
        f"[64:ff9b::{address}]",
    ]


def ipv6_spellings(address: IPv6Address) -> list[str]:
    """URL hosts that all name ``address``: compressed, exploded, upper case, dotted tail."""
    groups = address.exploded.split(":")
    dotted_tail = ":".join(groups[:6]) + ":" + str(IPv4Address(int(address) & 0xFFFFFFFF))
    return [
        f"[{text}]" for text in (str(address), address.exploded, str(address).upper(), dotted_tail)
    ]


def spellings(address: IPv4Address | IPv6Address) -> list[str]:
    if isinstance(address, IPv4Address):
        return ipv4_spellings(address)
    return ipv6_spellings(address)


async def assert_every_spelling_refused(addresses: list[IPv4Address | IPv6Address]) -> None:
    """Fetch every spelling of every address; each must be refused before any I/O."""
    async with Fetcher(
        timeouts=FetchTimeouts(),
        limits=Limits(),
        allow_networks=[],
        transport=NoConnection(),
        resolve=no_lookup,
    ) as f:
        for address in addresses:
            for host in spellings(address):
                with pytest.raises(UnsafeOutboundUrl):
                    await f.fetch(f"http://{host}/")


def first_middle_last(block: Block) -> list[IPv4Address | IPv6Address]:
    network = block.network
    return [network.network_address, network[network.num_addresses // 2], network[-1]]


@pytest.mark.parametrize("block", REFUSED_BLOCKS, ids=lambda block: str(block.network))
async def test_every_block_of_the_table_is_refused_in_every_spelling(block: Block) -> None:
    await assert_every_spelling_refused(first_middle_last(block))


@pytest.mark.parametrize("block", REFUSED_BLOCKS, ids=lambda block: str(block.network))
def test_every_refusal_names_its_block_and_why(block: Block) -> None:
    for address in first_middle_last(block):
        reason = EgressPolicy().refusal(address)
        assert reason is not None
        # The most specific block is named: the one itself, or a narrower one inside it.
        named = next(other for other in REFUSED_BLOCKS if other.describe() in reason)
        assert named.network.subnet_of(block.network)
        assert named.why in reason


@pytest.mark.parametrize("block", REFUSED_BLOCKS, ids=lambda block: str(block.network))
async def test_allow_networks_opens_every_refused_block(block: Block) -> None:
    policy = EgressPolicy.from_cidrs([str(block.network)])
    addresses = first_middle_last(block)
    for address in addresses:
        assert policy.refusal(address) is None
        if isinstance(address, IPv4Address):
            assert policy.refusal(IPv6Address(f"::ffff:{address}")) is None
    transport = Recorder()
    async with fetcher(transport, Resolver({}), allow_networks=[str(block.network)]) as f:
        for address in addresses:
            host = address if isinstance(address, IPv4Address) else f"[{address}]"
            assert (await f.fetch(f"http://{host}/")).ok
    assert len(transport.requests) == len(addresses)


def test_every_block_says_where_and_when_it_was_read() -> None:
    networks = [block.network for block in REFUSED_BLOCKS]
    assert len(set(networks)) == len(networks)
    for block in REFUSED_BLOCKS:
        assert block.name
        assert block.why
        assert block.ref
        assert block.source.url.startswith("https://")
        assert block.source.read.startswith("2026-")


def test_the_docs_list_every_refused_block() -> None:
    docs = (Path(__file__).parent.parent / "docs" / "fetch.md").read_text(encoding="utf-8")
    missing = [str(block.network) for block in REFUSED_BLOCKS if f"`{block.network}`" not in docs]
    assert missing == []


def test_the_decision_uses_no_ipaddress_classification() -> None:
    # ipaddress's is_private/is_global/... tables differ between Python versions.
    import trioplay._address_blocks
    import trioplay._egress

    for module in (trioplay._egress, trioplay._address_blocks):
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        assert re.findall(r"\.(?:is_\w+|teredo|sixtofour|ipv4_mapped)\b", source) == []


# The addresses issue 16 found let through, and what the refusal must name.
ISSUE_16 = [
    ("192.0.0.192", "Oracle Cloud"),
    ("192.0.0.100", "IETF Protocol Assignments"),
    ("192.0.0.255", "IETF Protocol Assignments"),
    ("168.63.129.16", "Azure WireServer"),
    ("100.100.100.200", "Alibaba Cloud"),
    ("169.254.169.254", "metadata"),
    ("192.52.193.1", "AMT"),
    ("192.31.196.1", "AS112"),
    ("192.175.48.1", "AS112"),
    ("192.88.99.1", "6to4 Relay Anycast"),
    ("2620:4f:8000::1", "AS112"),
    ("3fff::1", "Documentation"),
    ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "Documentation"),
    ("fd00:ec2::254", "AWS"),
    ("2002:808:808::1", "6to4"),
    ("2001:1::1", "Port Control Protocol"),
    ("5f00::1", "SRv6"),
    ("100:0:0:1::1", "Dummy"),
]


@pytest.mark.parametrize(("address", "named"), ISSUE_16)
def test_the_policy_alone_refuses_special_purpose_and_cloud_addresses(
    address: str, named: str
) -> None:
    # Asked directly: a pure function of the address, nothing is resolved or connected.
    reason = EgressPolicy().refusal(ip_address(address))
    assert reason is not None, f"{address} is let through"
    assert named in reason


@pytest.mark.parametrize(("address", "named"), ISSUE_16)
async def test_special_purpose_and_cloud_addresses_are_refused_in_every_spelling(
    address: str, named: str
) -> None:
    await assert_every_spelling_refused([ip_address(address)])


async def test_a_refusal_names_the_block_and_why() -> None:
    error = await assert_refused("http://0300.0.0.0300/opc/v2/instance/")
    assert "192.0.0.192/32" in str(error)
    assert "Oracle Cloud" in str(error)
    assert "metadata" in str(error)
    error = await assert_refused("http://[::ffff:c01f:c401]/")
    assert "192.31.196.0/24" in str(error)
    assert "AS112" in str(error)


PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    PUBLIC_IP,
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "168.63.129.15",
    "168.63.129.17",
    "169.253.255.255",
    "169.255.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "191.255.255.255",
    "192.0.1.0",
    "192.0.1.1",
    "192.0.3.0",
    "192.31.195.255",
    "192.31.197.0",
    "192.52.192.255",
    "192.52.194.0",
    "192.88.98.255",
    "192.88.100.0",
    "192.167.255.255",
    "192.169.0.0",
    "192.175.47.255",
    "192.175.49.0",
    "198.17.255.255",
    "198.20.0.0",
    "198.51.99.255",
    "198.51.101.0",
    "203.0.112.255",
    "203.0.114.0",
    "223.255.255.255",
    "2000::1",
    "2001:200::1",
    "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
    "2001:db9::1",
    "2001:4860:4860::8888",
    "2003::1",
    "2606:4700:4700::1111",
    "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
    "2620:4f:8001::",
    "3ffe:ffff::1",
    "3fff:1000::",
    "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "::ffff:8.8.8.8",
    "::ffff:192.0.1.1",
    "64:ff9b::808:808",
    "64:ff9b::192.52.192.255",
]


@pytest.mark.parametrize("address", PUBLIC)
async def test_public_addresses_next_to_refused_blocks_are_allowed(address: str) -> None:
    assert EgressPolicy().refusal(ip_address(address)) is None
    parsed = ip_address(address)
    hosts = spellings(parsed) if isinstance(parsed, IPv4Address) else [f"[{parsed}]"]
    transport = Recorder()
    async with fetcher(transport, Resolver({})) as f:
        for host in hosts:
            assert (await f.fetch(f"http://{host}/")).ok
    assert len(transport.requests) == len(hosts)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("0177.0.0.1", "127.0.0.1"),
        ("0300.0250.01.01", "192.168.1.1"),
        ("010.0.0.1", "8.0.0.1"),
        ("0x7f.0.0.1.", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
    ],
)
async def test_an_inet_aton_host_is_read_as_the_address_it_names(host: str, address: str) -> None:
    # Opened with allow_networks, the request goes to that address, spelled plainly.
    transport = Recorder()
    async with fetcher(transport, allow_networks=["127.0.0.0/8", "192.168.0.0/16"]) as f:
        response = await f.fetch(f"http://{host}:8080/x")
    assert response.ok
    assert transport.requests[0].url.host == address
    assert response.url == f"http://{address}:8080/x"


async def test_a_redirect_to_an_octal_host_is_refused_as_its_address() -> None:
    transport = Recorder(
        lambda request: httpx.Response(302, headers={"location": "http://0177.0.0.1/"})
    )
    async with fetcher(transport) as f:
        with pytest.raises(UnsafeOutboundUrl, match=r"127\.0\.0\.0/8"):
            await f.fetch("https://api.example.test/start")
    assert len(transport.requests) == 1


# -- names, redirects and allow_networks -----------------------------------


@pytest.mark.parametrize(
    "answers",
    [["10.0.0.7"], ["127.0.0.1"], ["169.254.169.254"], ["::1"], [PUBLIC_IP, "192.168.0.5"]],
)
async def test_a_name_resolving_to_a_non_public_address_is_refused(answers: list[str]) -> None:
    resolver = Resolver({"internal.example.test": answers})
    error = await assert_refused("https://internal.example.test/", resolver)
    assert resolver.lookups == ["internal.example.test"]
    assert "internal.example.test" in str(error)


async def test_a_resolver_answer_that_is_not_an_address_is_refused() -> None:
    await assert_refused("https://odd.example.test/", Resolver({"odd.example.test": ["nope"]}))


async def test_a_public_name_is_resolved_once_per_hop_even_across_retries() -> None:
    calls = 0

    def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, text="ok")

    transport, resolver = Recorder(flaky), Resolver()
    async with fetcher(transport, resolver) as f:
        response = await f.fetch("https://api.example.test/")
    assert response.ok
    assert resolver.lookups == ["api.example.test"]
    assert len(transport.requests) == 3


@pytest.mark.parametrize("location", ["http://10.0.0.1/admin", "https://internal.example.test/"])
async def test_a_redirect_to_a_non_public_address_is_refused(location: str) -> None:
    transport = Recorder(lambda request: httpx.Response(302, headers={"location": location}))
    resolver = Resolver({"internal.example.test": ["10.9.8.7"]})
    async with fetcher(transport, resolver) as f:
        with pytest.raises(UnsafeOutboundUrl):
            await f.fetch("https://api.example.test/start")
    assert [str(request.url) for request in transport.requests] == [
        "https://api.example.test/start"
    ]


async def test_redirects_stop_after_ten_hops() -> None:
    def loop(request: httpx.Request) -> httpx.Response:
        hop = int(request.url.params.get("hop", "0"))
        return httpx.Response(302, headers={"location": f"/loop?hop={hop + 1}"})

    transport = Recorder(loop)
    async with fetcher(transport) as f:
        with pytest.raises(FetchError, match="more than 10 redirects"):
            await f.fetch("https://api.example.test/loop")
    assert len(transport.requests) == 11


@pytest.mark.parametrize(
    ("status", "method", "has_body"),
    [(303, "GET", False), (302, "GET", False), (307, "POST", True)],
)
async def test_redirects_resend_or_drop_the_body_as_browsers_do(
    status: int, method: str, has_body: bool
) -> None:
    def redirect_once(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/form":
            return httpx.Response(status, headers={"location": "/result"})
        return httpx.Response(200, text="done")

    transport = Recorder(redirect_once)
    async with fetcher(transport) as f:
        await f.fetch("https://api.example.test/form", FetchOptions(method="POST", json={"a": 1}))
    final = transport.requests[-1]
    assert final.method == method
    assert (final.content == b'{"a":1}', "content-type" in final.headers) == (has_body, has_body)


async def test_fetches_share_no_cookies() -> None:
    transport = Recorder(lambda request: httpx.Response(200, headers={"set-cookie": "s=1; Path=/"}))
    async with fetcher(transport) as f:
        await f.fetch("https://api.example.test/login")
        await f.fetch("https://api.example.test/next")
    assert "cookie" not in transport.requests[1].headers


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://10.1.2.3/", True),
        ("http://10.1.255.255/", True),
        ("http://[::ffff:10.1.0.9]/", True),
        ("http://10.2.0.1/", False),
        ("http://127.0.0.1/", False),
        ("http://192.168.1.1/", False),
        ("http://[fd00::1]/", False),
    ],
)
async def test_allow_networks_opens_only_its_block(url: str, allowed: bool) -> None:
    transport = Recorder()
    async with fetcher(transport, allow_networks=["10.1.0.0/16"]) as f:
        if allowed:
            assert (await f.fetch(url)).ok
        else:
            with pytest.raises(UnsafeOutboundUrl):
                await f.fetch(url)
    assert len(transport.requests) == int(allowed)


@pytest.mark.parametrize("url", ["ftp://example.test/file", "file:///etc/passwd"])
async def test_only_http_and_https_are_reachable(url: str) -> None:
    await assert_refused(url)


async def test_credentials_in_the_url_are_refused() -> None:
    transport = Recorder()
    async with fetcher(transport) as f:
        with pytest.raises(FetchError, match=r"auth=trioplay\.Secret"):
            await f.fetch("https://user:hunter2@api.example.test/")
    assert transport.requests == []


# -- the default transport connects to the vetted address ------------------


@asynccontextmanager
async def local_server(seen: list[bytes]) -> AsyncIterator[int]:
    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some()
        seen.append(data)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_pinned_transport_connects_to_the_vetted_address_and_keeps_the_host() -> None:
    seen: list[bytes] = []
    resolver = Resolver({"service.example.test": ["127.0.0.1"]})
    async with (
        local_server(seen) as port,
        Fetcher(
            timeouts=FetchTimeouts(),
            limits=Limits(),
            allow_networks=["127.0.0.0/8"],
            resolve=resolver,
        ) as f,
    ):
        response = await f.fetch(f"http://service.example.test:{port}/x")
    assert response.text == "hi"
    assert f"host: service.example.test:{port}".encode() in seen[0].lower()
    assert resolver.lookups == ["service.example.test"]


async def test_pinned_transport_refuses_a_connection_nobody_vetted() -> None:
    async with PinnedTransport() as transport:
        with pytest.raises(UnsafeOutboundUrl, match="no vetted address"):
            await transport.handle_async_request(httpx.Request("GET", "http://127.0.0.1:9/"))


# -- secrets ----------------------------------------------------------------

TOKEN = "tok-5f1c2e9a-secret"
API_KEY = "key-77d0b3-secret"


@pytest.mark.parametrize(
    "options",
    [{"auth": Secret(TOKEN)}, {"headers": {"X-Api-Key": Secret(API_KEY)}}],
)
async def test_a_secret_over_plain_http_is_refused_before_connecting(
    options: dict[str, object],
) -> None:
    transport, resolver = Recorder(), Resolver()
    async with fetcher(transport, resolver) as f:
        with pytest.raises(FetchError, match="https") as caught:
            await f.fetch("http://api.example.test/", FetchOptions(**options))  # type: ignore[arg-type]
    assert TOKEN not in str(caught.value)
    assert API_KEY not in str(caught.value)
    assert transport.requests == []
    assert resolver.lookups == []


def test_fetch_options_keep_headers_as_lower_case_pairs_in_order() -> None:
    options = FetchOptions(headers={"X-B": "2", "Accept": Secret(API_KEY)})
    assert options.headers == (("x-b", "2"), ("accept", Secret(API_KEY)))
    assert options.secrets() == [Secret(API_KEY)]
    assert FetchOptions(auth=Secret(TOKEN)).secrets() == [Secret(TOKEN)]


def echo(request: httpx.Request) -> httpx.Response:
    """A server that echoes the credentials it got, the way debugging endpoints do."""
    received = {"authorization": request.headers.get("authorization"), "key": TOKEN}
    return httpx.Response(
        200,
        headers={"x-echo": request.headers.get("x-api-key", "")},
        json=received,
    )


async def test_secrets_reach_the_server_but_not_the_response_record() -> None:
    transport = Recorder(echo)
    async with fetcher(transport) as f:
        response = await f.fetch(
            "https://api.example.test/whoami",
            FetchOptions(auth=Secret(TOKEN), headers={"X-Api-Key": Secret(API_KEY)}),
        )
        assert f.redact(f"log line with {TOKEN} and {API_KEY}") == (
            f"log line with {REDACTED} and {REDACTED}"
        )
    sent = transport.requests[0].headers
    assert (sent["authorization"], sent["x-api-key"]) == (f"Bearer {TOKEN}", API_KEY)
    stored = json.dumps(response.to_record())
    assert TOKEN not in stored
    assert API_KEY not in stored
    assert response.json == {"authorization": f"Bearer {REDACTED}", "key": REDACTED}
    assert response.header("X-Echo") == REDACTED


async def test_secrets_do_not_appear_in_error_messages() -> None:
    def leaky(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused while sending {request.headers['authorization']}")

    async with fetcher(Recorder(leaky)) as f:
        with pytest.raises(FetchError) as caught:
            await f.fetch("https://api.example.test/", FetchOptions(auth=Secret(TOKEN)))
    assert TOKEN not in str(caught.value)
    assert REDACTED in str(caught.value)


def test_request_identity_is_stable_and_holds_no_secret() -> None:
    def identity(token: str, body: dict[str, int]) -> dict[str, object]:
        return request_identity(
            "https://API.example.test/v1?q=1",
            FetchOptions(
                method="post",
                headers={"X-Api-Key": Secret(API_KEY), "Accept": "application/json"},
                json=body,
                auth=Secret(token),
            ),
        )

    first = identity(TOKEN, {"a": 1, "b": 2})
    assert TOKEN not in json.dumps(first)
    assert API_KEY not in json.dumps(first)
    assert first == identity("another-token", {"b": 2, "a": 1})
    assert first["method"] == "POST"
    assert first["url"] == "https://api.example.test/v1?q=1"
    assert ["authorization", "[SECRET]"] in first["headers"]  # type: ignore[operator]
    assert first != identity(TOKEN, {"a": 1, "b": 3})


async def test_preparing_a_request_teaches_redact_the_secrets() -> None:
    async with fetcher(Recorder()) as f:
        f.prepare("https://api.example.test/", FetchOptions(auth=Secret(TOKEN)))
        assert f.redact(TOKEN) == REDACTED


def test_redact_replaces_every_secret_whole() -> None:
    inner, outer = Secret("abc"), Secret("xabcx")
    text = "xabcx abc xabcx"
    assert trioplay.redact(text, [inner, outer]) == "[REDACTED] [REDACTED] [REDACTED]"
    assert trioplay.redact(text, []) == text


def test_canonical_json_is_the_one_spelling_of_a_value() -> None:
    assert trioplay.canonical_json({"b": [1, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'
    with pytest.raises(ValueError, match="Out of range"):
        trioplay.canonical_json({"a": float("nan")})


def test_secret_never_shows_its_value() -> None:
    secret = Secret(TOKEN)
    assert TOKEN not in repr(secret)
    assert TOKEN not in str(secret)
    assert TOKEN not in repr({"auth": secret})
    with pytest.raises(ValueError, match="control characters") as caught:
        Secret("bad\nvalue")
    assert "bad" not in str(caught.value)


@pytest.mark.parametrize(
    ("location", "keeps_secrets"),
    [
        ("/next", True),
        ("https://other.example.test/next", False),
        ("http://api.example.test/", False),
    ],
)
async def test_secrets_follow_redirects_only_within_the_origin(
    location: str, keeps_secrets: bool
) -> None:
    def redirect_once(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/start":
            return httpx.Response(307, headers={"location": location})
        return httpx.Response(200, text="done")

    transport = Recorder(redirect_once)
    async with fetcher(transport) as f:
        await f.fetch(
            "https://api.example.test/start",
            FetchOptions(
                auth=Secret(TOKEN),
                headers={"X-Api-Key": Secret(API_KEY), "Accept": "text/plain"},
            ),
        )
    final = transport.requests[-1].headers
    assert ("authorization" in final, "x-api-key" in final) == (keeps_secrets, keeps_secrets)
    assert final["accept"] == "text/plain"
