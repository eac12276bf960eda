"""The workload every benchmark shares: rows, tools, resolvers, the play.

Rows are small (``{"domain": "d123.example", "name": "Person 123"}``) and
come from a generator, never a list, so a million-row source costs nothing
up front. Two tool columns call two zero-latency tools: plain ``async def``
functions that return at once, without a checkpoint, so what is measured is
the engine's own cost per row and per call.

The baseline runs the very same resolvers, which call the very same tool
functions through :class:`DirectTools`, a stand-in for ``RowContext`` that
awaits the tool function directly: no receipt, no lane, no governor, no
writer, no store.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

import trioplay

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Sequence

    Tool = Callable[[dict[str, Any], trioplay.ToolCall], Awaitable[Any]]

DATASET = "leads"
INDUSTRIES = ("software", "retail", "logistics", "health", "energy", "media", "finance")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
POSTGRES = os.environ.get("TRIOPLAY_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server the benchmarks use; each run makes its own schemas and drops them."""


def source_rows(n: int) -> Iterator[dict[str, str]]:
    """``n`` small input rows, streamed."""
    for i in range(n):
        yield {"domain": f"d{i}.example", "name": f"Person {i}"}


# -- the tools (zero latency: no sleep, no checkpoint) ----------------------
async def company_lookup(input: dict[str, Any], call: trioplay.ToolCall) -> dict[str, Any]:
    domain = input["domain"]
    return {"industry": INDUSTRIES[len(domain) % len(INDUSTRIES)], "employees": 10 * len(domain)}


async def email_finder(input: dict[str, Any], call: trioplay.ToolCall) -> dict[str, Any]:
    first = input["name"].split()[-1]
    return {"email": f"person.{first}@{input['domain']}", "confidence": 0.9}


def registry(latency: float = 0.0) -> trioplay.ToolRegistry:
    """The two tools; with a ``latency``, each first sleeps that long (``trio.sleep``)."""
    tools = trioplay.ToolRegistry()
    tools.add("company", _slow(company_lookup, latency) if latency else company_lookup)
    tools.add("email", _slow(email_finder, latency) if latency else email_finder)
    return tools


def _slow(fn: Tool, latency: float) -> Tool:
    async def slow(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        await trio.sleep(latency)
        return await fn(input, call)

    return slow


# -- the resolvers (shared by trioplay and the baseline) --------------------
async def resolve_industry(row: trioplay.Row, rc: Any) -> Any:
    return (await rc.tool("company", {"domain": row["domain"]}))["industry"]


async def resolve_email(row: trioplay.Row, rc: Any) -> Any:
    hit = await rc.tool("email", {"domain": row["domain"], "name": row["name"]})
    return hit["email"]


COLUMNS = (("industry", resolve_industry), ("email", resolve_email))


def expected_row(i: int) -> dict[str, Any]:
    """What row ``i`` looks like once enriched (used to check every run)."""
    domain = f"d{i}.example"
    return {
        "domain": domain,
        "name": f"Person {i}",
        "industry": INDUSTRIES[len(domain) % len(INDUSTRIES)],
        "email": f"person.{i}@{domain}",
    }


class DirectTools:
    """The baseline's ``rc``: awaits the registered tool function itself.

    One ``ToolCall`` per tool is built up front and reused: the tools ignore
    it, and building one per call would only slow the baseline down.
    """

    def __init__(self, tools: trioplay.ToolRegistry) -> None:
        self._targets = {
            spec.tool_id: (
                spec.fn,
                trioplay.ToolCall(spec.tool_id, idempotency_key="", attempt=1, deadline=math.inf),
            )
            for spec in tools
        }
        self.calls = 0

    async def tool(self, tool_id: str, input: dict[str, Any]) -> Any:
        fn, call = self._targets[tool_id]
        self.calls += 1
        return await fn(input, call)


# -- the play ---------------------------------------------------------------
@trioplay.play("bench-enrich")
async def enrich_play(ctx: trioplay.PlayContext, input: dict[str, Any]) -> dict[str, Any]:
    dataset = ctx.dataset(DATASET, source_rows(input["rows"]))
    for name, resolver in COLUMNS:
        dataset = dataset.with_column(name, resolver)
    result = await dataset.run(key="domain")
    return {
        "completed": result.completed_count,
        "failed": result.failed_count,
        "skipped": result.skipped_count,
        "preview": result.preview,
    }


def check_output(output: dict[str, Any], n: int, provider_calls: int | None) -> None:
    """Raise ``AssertionError`` unless a fresh run of ``n`` rows did all its work once."""
    if output["completed"] != n or output["failed"] or output["skipped"]:
        raise AssertionError(f"expected {n} completed rows, got {output}")
    if provider_calls is not None and provider_calls != 2 * n:
        raise AssertionError(f"expected {2 * n} provider calls, got {provider_calls}")
    for row in output["preview"]:
        i = int(row["domain"][1 : -len(".example")])
        if row != expected_row(i):
            raise AssertionError(f"row {i} is {row}, expected {expected_row(i)}")


# -- PostgreSQL -------------------------------------------------------------
def postgres_problem() -> str | None:
    """Why :data:`POSTGRES` cannot be used (a sentence), or ``None`` if it answers."""
    import psycopg

    try:
        with psycopg.connect(POSTGRES, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {POSTGRES} is unreachable ({str(exc).strip()})"
    return None


def postgres_url(schema: str, **params: str) -> str:
    """The store URL of :data:`POSTGRES` in ``schema`` (made on open), with more ``params``."""
    query = "&".join(f"{name}={value}" for name, value in {"schema": schema, **params}.items())
    return f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}{query}"


def postgres_backend_cpu(application_name: str) -> float | None:
    """CPU seconds (user + system) of the server processes serving ``application_name``.

    Read from ``/proc``, so only for a server on this machine (``None`` otherwise):
    the part of a PostgreSQL run's cost that the client's own CPU time leaves out.
    """
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3) as conn:
        pids = [
            pid
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (application_name,),
            )
        ]
    seconds = [process_cpu_seconds(pid) for pid in pids]
    if not seconds or None in seconds:
        return None
    return sum(s for s in seconds if s is not None)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_times() -> tuple[float, float]:
    """The whole machine's (busy, all) CPU seconds so far, summed over its cores (``/proc/stat``).

    Two readings bracket a stretch of time: ``busy`` grew by how much of
    the cores every process together used (the PostgreSQL server included).
    """
    with open("/proc/stat") as stat:
        fields = [int(field) for field in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def drop_schemas(schemas: Sequence[str]) -> None:
    """Drop the benchmark's schemas (those that exist), saying which could not be."""
    import psycopg

    try:
        with psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except psycopg.Error as exc:
        print(f"could not drop the schemas {', '.join(schemas)}: {exc}")


# -- reporting helpers ------------------------------------------------------
def machine() -> dict[str, Any]:
    """Where and on what a result was measured."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "trio": trio.__version__,
        "trioplay": git_describe(),
        "loadavg": list(os.getloadavg()),
    }


def git_describe() -> str:
    """The commit of the working tree, ``+dirty`` if tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{'+dirty' if dirty else ''}"


def tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``text`` (of a child's output, for an error message)."""
    return "\n".join(text.strip().splitlines()[-lines:])


def clean_env() -> dict[str, str]:
    """The environment for children, without a PYTHONPATH that could shadow trioplay."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def install_venv(venv: Path, requirements: Sequence[str]) -> str | None:
    """Make a virtualenv at ``venv`` and pip-install ``requirements`` into it.

    Third-party packages are pinned to the versions this interpreter runs
    with, so only what is asked for differs. Returns ``None``, or why pip
    failed (the end of its output).
    """
    # ``python -m venv`` run from a virtualenv builds on its base interpreter.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraints = venv / "constraints.txt"
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    constraints.write_text(frozen)
    python = str(venv / "bin" / "python")
    pip = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-c", str(constraints), *requirements],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(),
    )
    if pip.returncode == 0:
        return None
    return "it must work from the package index or the wheels pip is configured with:\n" + tail(
        pip.stdout + pip.stderr
    )


def chosen(contenders: Sequence[str], known: Sequence[str]) -> list[str]:
    """The ``contenders`` asked for, in the order of ``known``; an unknown name is refused."""
    unknown = set(contenders) - set(known)
    if unknown:
        raise ValueError(f"unknown contender(s) {sorted(unknown)}; known: {', '.join(known)}")
    return [name for name in known if name in contenders]


def stamp(seconds: float) -> str:
    """``seconds`` since the epoch as local ISO 8601 time (a result's ``started_at``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def save_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``benchmarks/results/<name>-<date>.json``."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}-{time.strftime('%Y-%m-%d')}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
