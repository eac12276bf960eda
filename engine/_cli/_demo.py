"""The bundled example play, ``enrich-leads``, that ``trioplay demo`` runs.

It is DESIGN §2's example made real: a CSV of leads, a durable sheet
``leads_enriched`` with two tool columns (``company`` from one provider,
``email`` from a waterfall over two finders) and a pure column, on simulated
providers that are slow now and then, flaky a few percent of the time, and
refuse a few inputs for good. Everything is seeded, so every run of the demo
sees the same failures on the same rows.

``examples/enrich_leads.py`` re-exports this module so that the same play runs
with ``trioplay run examples/enrich_leads.py --csv <file>``; the bundled CSV
is ``trioplay/_demo_data/leads.csv`` (``engine/_demo_data/leads.csv`` in a
checkout), which :func:`write_leads_csv` regenerates byte for byte.

Why ``company`` comes before ``email``: a row that failed is run again on the
next attempt, and a transient provider error is deliberately not recorded
(the next attempt should call again). A row that failed *after* its email
waterfall had hit a transient error would therefore call ``finder_a`` again
on every rerun. With ``company`` first, every row that can fail fails on a
recorded receipt, so a rerun of the demo replays everything and makes no
provider call at all.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import random
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trioplay
from trioplay.adapters import Latency, SimulatedProvider

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager

PLAY_NAME = "enrich-leads"
DATASET = "leads_enriched"
CSV_COLUMNS = ("domain", "first_name", "last_name", "title", "country")
BUNDLED_ROWS = 1200
"""How many data rows ``_demo_data/leads.csv`` holds."""


@trioplay.play(PLAY_NAME)
async def enrich_leads(ctx: trioplay.PlayContext, input: dict[str, Any]) -> dict[str, Any]:
    """Enrich a CSV of leads (column ``domain`` required) with a company and an email."""
    if not isinstance(input, dict) or not input.get("csv"):
        raise trioplay.PlayInputError(
            'input needs "csv": the path of a CSV file with a "domain" column '
            "(trioplay run ... --csv leads.csv)"
        )
    return await _enrich(ctx, input["csv"])


@trioplay.play(PLAY_NAME)
async def demo_leads(ctx: trioplay.PlayContext, input: dict[str, Any]) -> dict[str, Any]:
    """What ``trioplay demo`` runs: :func:`enrich_leads` on the first ``input["rows"]`` leads.

    The input names the leads, not a file: the bundled CSV's path depends on
    where trioplay is installed, and a generated one lives in a temporary
    folder, so a path would make every demo a new run (a run id names one
    input). The same play name keeps the tool receipts of both plays shared.
    """
    rows = int(input["rows"])
    with contextlib.ExitStack() as stack:
        if rows == BUNDLED_ROWS:
            path = stack.enter_context(bundled_csv())
        else:
            # Generated leads are the bundled ones extended (or cut short), so
            # `--rows 200` runs the first 200 rows of the bundled file.
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="trioplay-demo-"))
            path = Path(folder) / f"leads-{rows}.csv"
            write_leads_csv(path, rows)
        return await _enrich(ctx, str(path))


async def _enrich(ctx: trioplay.PlayContext, csv_path: str) -> dict[str, Any]:
    leads = ctx.csv(csv_path, required=["domain"])
    result = await (
        ctx.dataset(DATASET, leads)
        .with_column("company", lookup_company)
        .with_column("email", find_email)
        .with_column("miss", lambda row, rc: None if row["email"] else "not_found")
        .run(key="domain", on_row_error="isolate")
    )
    ctx.log(
        f"{result.completed_count:,} leads enriched, {result.failed_count:,} failed, "
        f"{result.skipped_count:,} skipped"
    )
    return result.to_dict()


async def lookup_company(row: trioplay.Row, rc: trioplay.RowContext) -> str:
    """The company's name; a domain the provider rejects fails the row (recorded)."""
    hit = await rc.tool("company_lookup", {"domain": row["domain"]})
    return str(hit["name"])


async def find_email(row: trioplay.Row, rc: trioplay.RowContext) -> str | None:
    """A waterfall: ``finder_a`` first; on a transient error or a miss, ``finder_b``."""
    person = {
        "domain": row["domain"],
        "first_name": row.get("first_name", ""),
        "last_name": row.get("last_name", ""),
    }
    try:
        hit = await rc.tool("finder_a", person)
        if hit.get("email"):
            return str(hit["email"])
    except trioplay.ProviderTransientError:
        pass  # the next leg of the waterfall
    hit = await rc.tool("finder_b", person)
    email = hit.get("email")
    return str(email) if email else None


# -- the simulated providers ----------------------------------------------


def tools() -> trioplay.ToolRegistry:
    """The demo's tools: three seeded :class:`SimulatedProvider` instances.

    Latencies are log-normal with medians of 30-50 ms and a long tail (one
    call in a hundred takes 0.3-0.5 s). ``finder_a`` fails transiently 4% of
    the time (1% of them as 429s) and refuses 1% of inputs for good;
    ``company_lookup`` refuses 2% of domains for good; ``finder_b`` never
    fails but often finds nothing.
    """
    registry = trioplay.ToolRegistry()
    registry.add_tool(
        SimulatedProvider(
            tool_id="company_lookup",
            provider="sim-firmographics",
            seed=11,
            latency=Latency(median=0.04, p99=0.35),
            error_rate=0.02,
            result=_company,
            concurrency=32,
        )
    )
    registry.add_tool(
        SimulatedProvider(
            tool_id="finder_a",
            provider="sim-finder-a",
            seed=12,
            latency=Latency(median=0.03, p99=0.3),
            error_rate=0.01,
            transient_rate=0.03,
            rate_limit_rate=0.01,
            retry_after=0.05,
            result=_finder_a,
            concurrency=32,
        )
    )
    registry.add_tool(
        SimulatedProvider(
            tool_id="finder_b",
            provider="sim-finder-b",
            seed=13,
            latency=Latency(median=0.05, p99=0.5),
            result=_finder_b,
            concurrency=16,
        )
    )
    return registry


def _fraction(*parts: str) -> float:
    """A stable number in [0, 1) for ``parts`` (the same in every process)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _company(input: dict[str, Any]) -> dict[str, Any]:
    domain = str(input["domain"])
    stem = domain.split(".", 1)[0]
    name = " ".join(part.capitalize() for part in stem.split("-"))
    pick = _fraction("company", domain)
    return {
        "name": name,
        "industry": _INDUSTRIES[int(pick * len(_INDUSTRIES))],
        "employees": int(10 ** (1 + 3.5 * _fraction("employees", domain))),
    }


def _email_finder(
    name: str, *, finds: float, local: Callable[[str, str], str], fallback: str, confidence: float
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A finder that knows an address for a ``finds`` share of domains, spelled by ``local``."""

    def find(input: dict[str, Any]) -> dict[str, Any]:
        domain = str(input["domain"])
        if _fraction(name, domain) >= finds:
            return {"email": None}
        first = str(input.get("first_name", "")).lower()
        last = str(input.get("last_name", "")).lower()
        part = local(first, last) if first and last else fallback
        return {"email": f"{part}@{domain}", "confidence": confidence}

    return find


_finder_a = _email_finder(
    "finder_a",
    finds=0.7,
    local=lambda first, last: f"{first}.{last}",
    fallback="contact",
    confidence=0.9,
)
_finder_b = _email_finder(
    "finder_b",
    finds=0.6,
    local=lambda first, last: f"{first[:1]}{last}",
    fallback="info",
    confidence=0.6,
)


# -- the bundled leads ----------------------------------------------------


def bundled_csv() -> AbstractContextManager[Path]:
    """``with bundled_csv() as path:`` the installed ``leads.csv`` as a real file."""
    return resources.as_file(resources.files("trioplay").joinpath("_demo_data", "leads.csv"))


def generate_leads(count: int) -> Iterator[dict[str, str]]:
    """``count`` realistic-looking leads, the same in every process.

    Row ``i`` depends only on ``i``, so the first ``n`` rows of a longer list
    are the ``n`` rows of a shorter one. Domains are distinct, except that
    every fiftieth lead repeats an earlier one (real exports have duplicates).
    """
    if count < 0:
        raise ValueError(f"count must be zero or positive, got {count}")
    for index in range(count):
        yield _lead(index - 17 if index % 50 == 49 else index)


def write_leads_csv(path: str | Path, count: int) -> None:
    """Write :func:`generate_leads` ``(count)`` as CSV (how the bundled file was made)."""
    Path(path).write_text(leads_csv_text(count), encoding="utf-8", newline="")


def leads_csv_text(count: int) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(generate_leads(count))
    return buffer.getvalue()


def _lead(index: int) -> dict[str, str]:
    rng = random.Random(f"trioplay-demo-lead:{index}")
    return {
        "domain": _domain(index),
        "first_name": rng.choice(_FIRST_NAMES),
        "last_name": rng.choice(_LAST_NAMES),
        "title": rng.choice(_TITLES),
        "country": rng.choice(_COUNTRIES),
    }


def _domain(index: int) -> str:
    # A bijection from index to (prefix, core, suffix, tld): distinct domains
    # for every index below _DOMAIN_SPACE, scattered across the word lists.
    code = (index * _DOMAIN_STRIDE + 7919) % _DOMAIN_SPACE
    code, prefix = divmod(code, len(_PREFIXES))
    code, core = divmod(code, len(_CORES))
    code, suffix = divmod(code, len(_SUFFIXES))
    tld = code % len(_TLDS)
    name = _PREFIXES[prefix] + _CORES[core]
    if _SUFFIXES[suffix]:
        name = f"{name}-{_SUFFIXES[suffix]}"
    return f"{name}.{_TLDS[tld]}"


_PREFIXES = (
    "blue", "north", "bright", "silver", "red", "green", "iron", "swift", "clear", "deep",
    "true", "open", "quantum", "urban", "solid", "prime", "nova", "alpine", "coastal", "summit",
    "amber", "cedar", "lunar", "polar", "rapid", "golden", "hidden", "noble", "vivid", "crimson",
    "stellar", "modern", "civic", "atlas", "orbit", "pixel", "harbor", "granite", "maple", "echo",
)  # fmt: skip
_CORES = (
    "peak", "wind", "field", "stone", "bridge", "river", "forge", "leaf", "wave", "point",
    "path", "light", "spring", "gate", "works", "craft", "mill", "line", "grid", "hive",
    "nest", "stack", "frame", "loop", "shift", "spark", "trail", "yard", "well", "crest",
    "ridge", "harvest", "beacon", "anchor", "compass", "meadow", "signal", "vector", "canvas",
    "ledger", "orchard", "pilot", "quarry", "relay", "sprout", "tide", "vault", "willow",
    "zenith", "kite",
)  # fmt: skip
_SUFFIXES = (
    "", "labs", "analytics", "systems", "health", "logistics", "studio", "cloud", "group",
    "digital", "ventures", "software", "bio", "energy", "media", "robotics",
)  # fmt: skip
_TLDS = ("com", "io", "co", "net", "ai", "dev", "de", "fr", "nl", "app")
# 40 * 50 * 16 * 10 = 320,000 codes (the words are distinct, so distinct codes
# are distinct domains); the stride is a prime that does not divide the space.
_DOMAIN_SPACE = len(_PREFIXES) * len(_CORES) * len(_SUFFIXES) * len(_TLDS)
_DOMAIN_STRIDE = 104_729

_FIRST_NAMES = (
    "Ada", "Alan", "Amara", "Ben", "Carla", "Chen", "Dana", "Diego", "Elena", "Emeka",
    "Farah", "Felix", "Grace", "Hana", "Hugo", "Ines", "Ivan", "Jana", "Jonas", "Kai",
    "Kofi", "Lena", "Liam", "Lucia", "Maya", "Mateo", "Nadia", "Noah", "Olga", "Omar",
    "Priya", "Paul", "Rosa", "Ravi", "Sara", "Sven", "Tara", "Tomas", "Uma", "Victor",
    "Wei", "Yara", "Yusuf", "Zoe",
)  # fmt: skip
_LAST_NAMES = (
    "Adams", "Baker", "Novak", "Chen", "Diaz", "Eriksen", "Fischer", "Garcia", "Haddad",
    "Ito", "Jensen", "Kowalski", "Larsen", "Martin", "Nguyen", "Okafor", "Patel", "Quinn",
    "Rossi", "Silva", "Tanaka", "Unger", "Varga", "Weber", "Xu", "Yilmaz", "Zimmer",
    "Moreau", "Kim", "Singh", "Costa", "Berg", "Horvat", "Lopez", "Meyer", "Park",
)  # fmt: skip
_TITLES = (
    "CEO", "CTO", "Head of Growth", "VP Sales", "Marketing Manager", "Data Engineer",
    "Operations Lead", "Founder", "Product Manager", "Head of Partnerships",
    "Sales Director", "RevOps Analyst",
)  # fmt: skip
_COUNTRIES = ("US", "US", "US", "GB", "DE", "FR", "NL", "SE", "ES", "IN", "BR", "CA", "JP")
_INDUSTRIES = (
    "Software", "Healthcare", "Logistics", "Fintech", "Retail", "Manufacturing",
    "Energy", "Media", "Education", "Biotech",
)  # fmt: skip
