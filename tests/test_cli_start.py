"""Issue 27, goal 4: the command line starts at once.

A command imports only what it needs: ``--help`` none of Trio, the stores
or the engine's rooms; ``runs list``, ``runs show``, ``send-event`` and
``cancel`` on SQLite their store but not Trio (the store runs its jobs on
the command's thread, ``SqliteStore.run_direct``), the runtime, the map,
fetch (httpx), the pictures or the scenario lab. Each test runs the real
command in a fresh interpreter and reads the modules it loaded
(``sys.modules``), not how long it took: docs/cli.md, "What a command
loads", says the same.
"""

from __future__ import annotations

import ast
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import trio

import trioplay

from .support import CLI_TIMEOUT

# Runs the command line in-process, then writes the modules it loaded to argv[1].
PROBE = """
import json, sys
from trioplay._cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as file:
    json.dump(sorted(sys.modules), file)
raise SystemExit(code)
"""

# What no command needs before it runs a play (docs/cli.md, "What a command loads").
ROOMS = (
    "trioplay._runtime",
    "trioplay._context",
    "trioplay._map",
    "trioplay._receipts",
    "trioplay._fetch",
    "trioplay._egress",
    "trioplay._trace",
    "trioplay._pictures",
    "trioplay._scenario",
    "trioplay.adapters",
    "trioplay._cli._progress",
    "httpx",
    "httpcore",
    "rich",
    "psycopg",
)
# What a command with no configuration file and no folder to make needs none of:
# hashing (OpenSSL's load, also through secrets), TOML, temporary files (shutil, random).
NOT_FOR_A_READ = ("hashlib", "_hashlib", "secrets", "tomllib", "tempfile")
# What a light command on SQLite needs none of: Trio (a third of its start), the
# waits room, the heavy commands' module, the entry point table, and with no
# configuration file and no flag but --store (as here) the converter (cattrs).
NOT_FOR_LIGHT = (
    *ROOMS,
    "trio",
    "outcome",
    "cattrs",
    "trioplay._waits",
    "trioplay._cli._commands",
    "trioplay._cli._export",
    "importlib.metadata",
    *NOT_FOR_A_READ,
    "difflib",  # a mistyped choice's "did you mean"
)
# What the parser needs none of: --help and usage errors load nothing of a command.
NOT_FOR_HELP = (
    *ROOMS,
    "trio",
    "trioplay.stores",
    "trioplay._cli._commands",
    "trioplay._records",
    "attrs",
    "attr",
    "cattrs",
    "sqlite3",
    "importlib.metadata",
    *NOT_FOR_A_READ,
)


def _loaded(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    """The exit code of ``trioplay ARGV`` and the modules it loaded."""
    listed = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(listed), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert listed.exists(), done.stderr
    return done.returncode, set(json.loads(listed.read_text()))


def _among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_help_loads_no_command(tmp_path: Path) -> None:
    for argv in (["--help"], ["runs", "--help"], ["send-event", "--help"], ["nosuchcommand"]):
        code, modules = _loaded(tmp_path, *argv)
        assert code == (2 if argv == ["nosuchcommand"] else 0), argv
        assert _among(modules, NOT_FOR_HELP) == [], argv
    code, modules = _loaded(tmp_path, "--version")  # reads the installed version, nothing else
    assert code == 0
    assert _among(modules, tuple(set(NOT_FOR_HELP) - {"importlib.metadata", "tempfile"})) == []


def test_import_trioplay_loads_no_module_until_a_name_is_used(tmp_path: Path) -> None:
    probe = "import sys, trioplay; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.split())
    assert _among(loaded, NOT_FOR_HELP) == []
    assert sorted(m for m in loaded if m.startswith("trioplay.")) == []
    use = "import sys, trioplay; trioplay.Dataset; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", use], capture_output=True, text=True, check=True, timeout=60
    )
    assert "trioplay._map" in done.stdout.split()  # the probe above can see a room loaded


def test_the_lazy_names_are_the_names_type_checkers_see() -> None:
    tree = ast.parse(Path(trioplay.__file__).read_text(encoding="utf-8"))
    seen = {
        alias.asname or alias.name: "." * node.level + (node.module or "")
        for block in tree.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == trioplay._LAZY
    assert all(getattr(trioplay, name) is not None for name in seen)


async def _a_run(store: str) -> None:
    @trioplay.play("nothing")
    async def nothing(ctx: trioplay.PlayContext, input: object) -> None:
        return None

    with trio.fail_after(30):
        async with trioplay.open_runtime(store=store) as rt:
            await rt.run(nothing, {}, run_id="r1")


async def test_runs_list_and_show_load_the_store_not_the_engine(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    await _a_run(store)
    for argv in (["runs", "list"], ["runs", "show", "r1"], ["runs", "list", "--json"]):
        code, modules = _loaded(tmp_path, *argv, "--store", store)
        assert code == 0, argv
        assert "trioplay.stores.sqlite" in modules  # it did read the store
        assert _among(modules, NOT_FOR_LIGHT) == [], argv
    # The run has completed: the store refuses the event (exit 2) once it has read the run.
    code, modules = _loaded(
        tmp_path, "send-event", "r1", "paid", '"r2"', "--data", "{}", "--store", store
    )
    assert code == 2
    assert "trioplay.stores.sqlite" in modules
    assert _among(modules, NOT_FOR_LIGHT) == []


async def _a_waiting_run(store: str) -> None:
    async def waits(ctx: trioplay.PlayContext, input: object) -> object:
        first = await ctx.wait_for_event("paid", key="r2", timeout=600)
        return [first, await ctx.wait_for_event("paid", key="r3", timeout=600)]

    with trio.fail_after(30):
        async with trioplay.open_runtime(store=store) as rt:
            with contextlib.suppress(trioplay.RunWaiting):
                await rt.run(waits, {}, run_id="w")


async def test_send_event_and_cancel_write_to_sqlite_without_trio(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = f"sqlite:///{db}"
    await _a_waiting_run(store)
    sent = ["send-event", "w", "paid", '"r2"', "--data", '{"n": 1}', "--id", "e1"]
    code, modules = _loaded(tmp_path, *sent, "--store", store)
    assert code == 0
    assert _among(modules, NOT_FOR_LIGHT) == []
    code, modules = _loaded(tmp_path, "cancel", "w", "--store", store)
    assert code == 0
    assert _among(modules, NOT_FOR_LIGHT) == []
    # What they wrote is there for a store opened in Trio to read.
    from trioplay.stores.sqlite import SqliteStore

    with trio.fail_after(30):
        opened = SqliteStore(db)
        await opened.open()
        try:
            waits = await opened.list_waits("w")
            run = await opened.get_run("w")
        finally:
            await opened.aclose()
    assert [(wait.status, wait.payload_json) for wait in waits] == [("delivered", '{"n":1}')]
    assert run is not None
    assert run.status == "cancelled"


def test_a_postgresql_store_still_runs_its_light_commands_in_trio(tmp_path: Path) -> None:
    # Nothing to reach: the command fails to connect, but it tried in Trio.
    url = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1"
    code, modules = _loaded(tmp_path, "runs", "list", "--store", url)
    assert code != 0
    assert "trio" in modules
    assert "trioplay.stores.sqlite" not in modules


def test_the_stores_the_cli_opens_directly_are_the_ones_trioplay_ships() -> None:
    # The CLI opens the shipped schemes without reading the entry-point table
    # (importlib.metadata); the list it keeps must be that table's.
    from importlib.metadata import entry_points

    from trioplay._cli._stores import _SHIPPED

    shipped = {
        point.name
        for point in entry_points(group="trioplay.stores")
        if point.value == "trioplay.stores:open_store"
    }
    assert set(_SHIPPED) == shipped
