"""The address blocks ``fetch`` refuses by default, each with where it comes from.

This table, not :mod:`ipaddress`'s ``is_private``/``is_global``/``is_reserved``,
decides what is public: those properties follow tables that differ between
Python versions (3.11, 3.12 and 3.13 disagree on 192.0.0.0/24, 2001::/23,
64:ff9b:1::/48 and 6to4) and know nothing of cloud platforms. Here
:mod:`ipaddress` only parses; the same address gets the same answer on every
Python.

What is in it:

- every entry of the IANA IPv4 and IPv6 Special-Purpose Address Registries
  whose "Globally Reachable" is False or N/A (and the terminated ones, whose
  columns are empty);
- the entries of those registries that IANA marks globally reachable but that
  are infrastructure anycast (AS112, AMT, PCP, TURN, DNS-SD SRP) or identifier
  prefixes (ORCHIDv2, DETs): services no fetch has business with;
- the IPv4 and IPv6 multicast spaces, and the IPv6 space outside global
  unicast (2000::/3) that IANA keeps "Reserved by IETF";
- the cloud platforms' metadata and host addresses.

Two registry entries are deliberately *not* refusals: ``::ffff:0:0/96``
(IPv4-mapped) and ``64:ff9b::/96`` (NAT64's well-known prefix) are judged by
the IPv4 address they carry, since a connection to them goes to that IPv4
host (see ``_egress.non_public_reason``).

An address is judged by the most specific block it falls in, so that
192.0.0.192 is named as Oracle's metadata service and not as the IETF
protocol block around it. A block inside a refused block is refused whatever
its own status. ``allow_networks`` opens any of them.

Compiled on 2026-12-01. IANA cannot be reached from where this was written:
the registry rows follow a verbatim copy of the registries' CSV files dated
2026-07-18 (a public repository's snapshot), checked against the registries
as remembered and against the stored iana.org page of the IPv6 registry; the
revisions followed are the ones that list 192.88.99.2/32 (IPv4) and
100:0:0:1::/64 (IPv6, RFC 9780, 2025-04). When a registry changes, change the
rows here and the table in ``docs/fetch.md``; ``tests/test_egress.py`` checks
first, middle and last address of every block in every spelling.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

import attrs

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network


@attrs.frozen
class Source:
    """Where a block was read, which revision of it, and when."""

    title: str
    url: str
    revision: str
    read: str


IANA_V4 = Source(
    "IANA IPv4 Special-Purpose Address Registry",
    "https://www.iana.org/assignments/iana-ipv4-special-registry/",
    "the revision listing 192.88.99.2/32 (6a44 relay); rows as in a CSV copy of 2026-07-18",
    "2026-12-01",
)
IANA_V6 = Source(
    "IANA IPv6 Special-Purpose Address Registry",
    "https://www.iana.org/assignments/iana-ipv6-special-registry/",
    "the revision listing 100:0:0:1::/64 (RFC 9780, 2025-04); rows as in a CSV copy of 2026-07-18",
    "2026-12-01",
)
IANA_V6_SPACE = Source(
    "IANA Internet Protocol Version 6 Address Space",
    "https://www.iana.org/assignments/ipv6-address-space/",
    "as remembered: every block outside 2000::/3, fc00::/7, fe80::/10 and ff00::/8 "
    "is 'Reserved by IETF'",
    "2026-12-01",
)
IANA_MULTICAST = Source(
    "IANA IPv4 and IPv6 Multicast Address Space Registries",
    "https://www.iana.org/assignments/multicast-addresses/ and "
    "https://www.iana.org/assignments/ipv6-multicast-addresses/",
    "224.0.0.0/4 (RFC 5771) and ff00::/8 (RFC 4291 §2.7) as a whole",
    "2026-12-01",
)
AWS_IMDS = Source(
    "Amazon EC2 User Guide, 'Access instance metadata for an EC2 instance'",
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html",
    "169.254.169.254 and [fd00:ec2::254] (IPv6: Nitro instances only)",
    "2026-12-01 (stored copy)",
)
AWS_CONTAINERS = Source(
    "Amazon ECS task IAM role credentials and the EKS Pod Identity Agent",
    "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html and "
    "https://docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html",
    "169.254.170.2 (ECS), 169.254.170.23 and [fd00:ec2::23] (EKS)",
    "2026-12-01 (as remembered, not re-read)",
)
GCP_METADATA = Source(
    "Google Compute Engine, 'About VM metadata'",
    "https://cloud.google.com/compute/docs/metadata/overview",
    "169.254.169.254 (metadata.google.internal) and fd20:ce::254 for IPv6-only VMs",
    "2026-12-01 (IPv6 address as remembered, not re-read)",
)
AZURE_HOST = Source(
    "Microsoft Learn, 'What is IP address 168.63.129.16?'",
    "https://learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16",
    "WireServer: VM agent, DHCP, DNS, health probes; the Azure Linux agent's fallback endpoint",
    "2026-12-01 (as remembered; the fallback seen in a stored coreos/afterburn pull request)",
)
OCI_METADATA = Source(
    "Oracle Cloud Infrastructure, 'Getting Instance Metadata' (169.254.169.254), and issue 16",
    "https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/gettingmetadata.htm",
    "192.0.0.192 as the issue reports it (OCI's other metadata address)",
    "2026-12-01 (stored copy names 169.254.169.254 only)",
)
ALIBABA_METADATA = Source(
    "cloud-init, AliYun datasource",
    "https://cloudinit.readthedocs.io/en/latest/reference/datasources/aliyun.html",
    "http://100.100.100.200/",
    "2026-12-01 (stored copy)",
)


@attrs.frozen
class Block:
    """One refused block: what it is, why fetch refuses it, and where it was read."""

    network: IPNetwork
    name: str
    why: str
    ref: str
    source: Source

    def describe(self) -> str:
        """``in <block>, <name> (<why>)``: what a refusal says."""
        return f"in {self.network}, {self.name} ({self.why})"


# Why a block is refused: one phrase per category, shown in refusals and docs.
NOT_GLOBAL = "not globally reachable"
DEPRECATED = "deprecated, no longer assigned"
TUNNEL = "a tunnel to arbitrary IPv4 hosts"
ANYCAST = "infrastructure anycast, not a web host"
IDENTIFIER = "an identifier prefix, not a routable locator"
MULTICAST = "multicast, not a single host"
RESERVED = "reserved by the IETF, outside global unicast 2000::/3"
METADATA = "cloud metadata service: hands out the machine's credentials"
HOST_SERVICE = "cloud host service, reachable from every VM"

_ROWS: tuple[tuple[str, str, str, str, Source], ...] = (
    # IANA IPv4 Special-Purpose Address Registry, in its order.
    ("0.0.0.0/8", '"This network"', NOT_GLOBAL, "RFC 791 §3.2", IANA_V4),
    ("0.0.0.0/32", '"This host on this network"', NOT_GLOBAL, "RFC 1122", IANA_V4),
    ("10.0.0.0/8", "Private-Use", NOT_GLOBAL, "RFC 1918", IANA_V4),
    ("100.64.0.0/10", "Shared Address Space (CGNAT)", NOT_GLOBAL, "RFC 6598", IANA_V4),
    ("127.0.0.0/8", "Loopback", NOT_GLOBAL, "RFC 1122", IANA_V4),
    ("169.254.0.0/16", "Link Local", NOT_GLOBAL, "RFC 3927", IANA_V4),
    ("172.16.0.0/12", "Private-Use", NOT_GLOBAL, "RFC 1918", IANA_V4),
    ("192.0.0.0/24", "IETF Protocol Assignments", NOT_GLOBAL, "RFC 6890", IANA_V4),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix", NOT_GLOBAL, "RFC 7335", IANA_V4),
    ("192.0.0.8/32", "IPv4 dummy address", NOT_GLOBAL, "RFC 7600", IANA_V4),
    ("192.0.0.9/32", "Port Control Protocol Anycast", ANYCAST, "RFC 7723", IANA_V4),
    ("192.0.0.10/32", "TURN Anycast", ANYCAST, "RFC 8155", IANA_V4),
    ("192.0.0.170/32", "NAT64/DNS64 Discovery", NOT_GLOBAL, "RFC 8880", IANA_V4),
    ("192.0.0.171/32", "NAT64/DNS64 Discovery", NOT_GLOBAL, "RFC 8880", IANA_V4),
    ("192.0.2.0/24", "Documentation (TEST-NET-1)", NOT_GLOBAL, "RFC 5737", IANA_V4),
    ("192.31.196.0/24", "AS112-v4", ANYCAST, "RFC 7535", IANA_V4),
    ("192.52.193.0/24", "AMT", ANYCAST, "RFC 7450", IANA_V4),
    ("192.88.99.0/24", "6to4 Relay Anycast", DEPRECATED, "RFC 7526", IANA_V4),
    ("192.88.99.2/32", "6a44-relay anycast address", NOT_GLOBAL, "RFC 6751", IANA_V4),
    ("192.168.0.0/16", "Private-Use", NOT_GLOBAL, "RFC 1918", IANA_V4),
    ("192.175.48.0/24", "AS112 Direct Delegation", ANYCAST, "RFC 7534", IANA_V4),
    ("198.18.0.0/15", "Benchmarking", NOT_GLOBAL, "RFC 2544", IANA_V4),
    ("198.51.100.0/24", "Documentation (TEST-NET-2)", NOT_GLOBAL, "RFC 5737", IANA_V4),
    ("203.0.113.0/24", "Documentation (TEST-NET-3)", NOT_GLOBAL, "RFC 5737", IANA_V4),
    ("240.0.0.0/4", "Reserved", NOT_GLOBAL, "RFC 1112 §4", IANA_V4),
    ("255.255.255.255/32", "Limited Broadcast", NOT_GLOBAL, "RFC 919 §7", IANA_V4),
    ("224.0.0.0/4", "IPv4 multicast", MULTICAST, "RFC 5771", IANA_MULTICAST),
    # IANA IPv6 Special-Purpose Address Registry, in its order, without
    # ::ffff:0:0/96 and 64:ff9b::/96 (judged by the IPv4 address they carry).
    ("::1/128", "Loopback Address", NOT_GLOBAL, "RFC 4291", IANA_V6),
    ("::/128", "Unspecified Address", NOT_GLOBAL, "RFC 4291", IANA_V6),
    ("64:ff9b:1::/48", "Local-use IPv4/IPv6 Translation", NOT_GLOBAL, "RFC 8215", IANA_V6),
    ("100::/64", "Discard-Only Address Block", NOT_GLOBAL, "RFC 6666", IANA_V6),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix", NOT_GLOBAL, "RFC 9780", IANA_V6),
    ("2001::/23", "IETF Protocol Assignments", NOT_GLOBAL, "RFC 2928", IANA_V6),
    ("2001::/32", "Teredo", TUNNEL, "RFC 4380", IANA_V6),
    ("2001:1::1/128", "Port Control Protocol Anycast", ANYCAST, "RFC 7723", IANA_V6),
    ("2001:1::2/128", "TURN Anycast", ANYCAST, "RFC 8155", IANA_V6),
    ("2001:1::3/128", "DNS-SD Service Registration Anycast", ANYCAST, "RFC 9665", IANA_V6),
    ("2001:2::/48", "Benchmarking", NOT_GLOBAL, "RFC 5180", IANA_V6),
    ("2001:3::/32", "AMT", ANYCAST, "RFC 7450", IANA_V6),
    ("2001:4:112::/48", "AS112-v6", ANYCAST, "RFC 7535", IANA_V6),
    ("2001:10::/28", "ORCHID (previously)", DEPRECATED, "RFC 4843", IANA_V6),
    ("2001:20::/28", "ORCHIDv2", IDENTIFIER, "RFC 7343", IANA_V6),
    ("2001:30::/28", "Drone Remote ID Entity Tags", IDENTIFIER, "RFC 9374", IANA_V6),
    ("2001:db8::/32", "Documentation", NOT_GLOBAL, "RFC 3849", IANA_V6),
    ("2002::/16", "6to4", TUNNEL + ", deprecated", "RFC 7526", IANA_V6),
    ("2620:4f:8000::/48", "AS112 Direct Delegation", ANYCAST, "RFC 7534", IANA_V6),
    ("3fff::/20", "Documentation", NOT_GLOBAL, "RFC 9637", IANA_V6),
    ("5f00::/16", "Segment Routing (SRv6) SIDs", NOT_GLOBAL, "RFC 9602", IANA_V6),
    ("fc00::/7", "Unique-Local", NOT_GLOBAL, "RFC 4193", IANA_V6),
    ("fe80::/10", "Link-Local Unicast", NOT_GLOBAL, "RFC 4291", IANA_V6),
    ("ff00::/8", "IPv6 multicast", MULTICAST, "RFC 4291 §2.7", IANA_MULTICAST),
    # The rest of the IPv6 space outside 2000::/3, and two forms inside ::/8
    # that carry an IPv4 address but do not reach it.
    ("::/96", "IPv4-compatible address", DEPRECATED, "RFC 4291 §2.5.5.1", IANA_V6_SPACE),
    ("::ffff:0:0:0/96", "IPv4-translated address", NOT_GLOBAL, "RFC 2765", IANA_V6_SPACE),
    ("::/8", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("100::/8", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("200::/7", "Reserved by IETF", RESERVED, "RFC 4048", IANA_V6_SPACE),
    ("400::/6", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("800::/5", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("1000::/4", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("4000::/3", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("6000::/3", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("8000::/3", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("a000::/3", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("c000::/3", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("e000::/4", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("f000::/5", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("f800::/6", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("fe00::/9", "Reserved by IETF", RESERVED, "RFC 4291", IANA_V6_SPACE),
    ("fec0::/10", "Site-local (deprecated)", DEPRECATED, "RFC 3879", IANA_V6_SPACE),
    # Cloud platforms: metadata services and host addresses.
    (
        "169.254.169.254/32",
        "instance metadata service (AWS, GCP, Azure, Oracle, OpenStack and others)",
        METADATA,
        "AWS IMDS",
        AWS_IMDS,
    ),
    ("fd00:ec2::254/128", "AWS instance metadata service (IPv6)", METADATA, "AWS IMDS", AWS_IMDS),
    ("169.254.170.2/32", "AWS ECS task metadata and credentials", METADATA, "ECS", AWS_CONTAINERS),
    ("169.254.170.23/32", "AWS EKS Pod Identity Agent", METADATA, "EKS", AWS_CONTAINERS),
    ("fd00:ec2::23/128", "AWS EKS Pod Identity Agent (IPv6)", METADATA, "EKS", AWS_CONTAINERS),
    ("fd20:ce::254/128", "GCP metadata server (IPv6)", METADATA, "GCE", GCP_METADATA),
    ("168.63.129.16/32", "Azure WireServer", HOST_SERVICE, "Azure", AZURE_HOST),
    ("192.0.0.192/32", "Oracle Cloud metadata service", METADATA, "OCI", OCI_METADATA),
    ("100.100.100.200/32", "Alibaba Cloud metadata service", METADATA, "ECS", ALIBABA_METADATA),
)

REFUSED_BLOCKS: tuple[Block, ...] = tuple(
    Block(ip_network(cidr), name, why, ref, source) for cidr, name, why, ref, source in _ROWS
)
"""Every block ``fetch`` refuses unless ``allow_networks`` opens it, in table order."""

# Most specific first, so the first match names the narrowest block.
_V4 = sorted(
    (block for block in REFUSED_BLOCKS if block.network.version == 4),
    key=lambda block: -block.network.prefixlen,
)
_V6 = sorted(
    (block for block in REFUSED_BLOCKS if block.network.version == 6),
    key=lambda block: -block.network.prefixlen,
)


def refused_block(address: IPAddress) -> Block | None:
    """The most specific refused block ``address`` is in, or ``None``."""
    blocks = _V4 if isinstance(address, IPv4Address) else _V6
    return next((block for block in blocks if address in block.network), None)
