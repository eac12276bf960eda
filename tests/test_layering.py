"""The structure holds: data flows down, and each room imports only what it may.

Like trio's ``test_exports``, these read the source (with ``ast``), so every
import counts: at module level, inside functions (lazy imports) and under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"trioplay": ROOT / "engine", "trioplay.stores": ROOT / "stores"}
PACKAGES["trioplay.adapters"] = ROOT / "adapters"


def _modules(package: str) -> dict[str, Path]:
    folder = PACKAGES[package]
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


ENGINE = {
    name: path
    for name, path in _modules("trioplay").items()
    if not name.startswith(("trioplay.stores", "trioplay.adapters"))
}


@functools.cache  # each test reads the same files
def _imports(module: str, path: Path) -> frozenset[str]:
    """Every module ``module`` imports, as absolute dotted names."""
    is_package = path.name == "__init__.py"
    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # ``from . import x`` may name a submodule.
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return frozenset(found)


def _engine_graph() -> dict[str, set[str]]:
    """Edges between engine modules; importing ``a.b.c`` also runs ``a.b``'s ``__init__``."""
    graph: dict[str, set[str]] = {}
    for module, path in ENGINE.items():
        edges: set[str] = set()
        for target in _imports(module, path):
            parts = target.split(".")
            for end in range(2, len(parts) + 1):
                name = ".".join(parts[:end])
                # The root package is the public facade, run before anything;
                # a module's own packages are already being imported.
                if name in ENGINE and name != module and not module.startswith(name + "."):
                    edges.add(name)
        graph[module] = edges
    return graph


def test_the_engine_has_no_import_cycle() -> None:
    graph = _engine_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_only_the_cli_imports_stores_and_adapters() -> None:
    offenders = {
        module: sorted(
            target
            for target in _imports(module, path)
            if target.startswith(("trioplay.stores", "trioplay.adapters"))
        )
        for module, path in ENGINE.items()
        if not module.startswith("trioplay._cli")
    }
    assert {module: found for module, found in offenders.items() if found} == {}


def test_nothing_below_the_play_context_imports_it() -> None:
    # The runtime builds it; the package re-exports it. Nobody else sees it.
    importers = {
        module for module, path in ENGINE.items() if "trioplay._context" in _imports(module, path)
    }
    assert importers == {"trioplay", "trioplay._runtime"}


def _importers_of(room: str) -> set[str]:
    """The engine modules outside ``room`` (a dotted prefix) that import from it."""
    return {
        module
        for module, path in ENGINE.items()
        if not module.startswith(room) and any(t.startswith(room) for t in _imports(module, path))
    }


def test_the_cli_sits_on_top() -> None:
    assert _importers_of("trioplay._cli") == {"trioplay.__main__"}


def _eager_imports(path: Path) -> set[str]:
    """What ``path`` imports outside its functions (when it is imported), as written."""
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        pending.extend(ast.iter_child_nodes(node))
    return found


def test_the_pictures_sit_above_the_core_and_are_imported_lazily() -> None:
    # Drawing is a tool of the command line and the scenario lab, not of a run:
    # the core never imports it, and those two only inside the function that draws.
    importers = _importers_of("trioplay._pictures")
    assert importers == {"trioplay._cli._commands", "trioplay._scenario._run"}
    for module in importers:
        eager = _eager_imports(ENGINE[module])
        assert not any("_pictures" in name for name in eager), f"{module}: not lazily"
    # The room reads the records and their spans, nothing of the runtime.
    for module, path in ENGINE.items():
        if module.startswith("trioplay._pictures"):
            reached = {t for t in _imports(module, path) if t.startswith("trioplay.")}
            outside = {t for t in reached if not t.startswith("trioplay._pictures")}
            assert {t.split(".")[1] for t in outside} <= {"_trace"}, module


@pytest.mark.parametrize("package", ["trioplay.stores", "trioplay.adapters"])
def test_stores_and_adapters_use_only_the_public_engine(package: str) -> None:
    private = {
        module: sorted(
            target for target in _imports(module, path) if target.startswith("trioplay._")
        )
        for module, path in _modules(package).items()
    }
    assert {module: found for module, found in private.items() if found} == {}


def _where_a_change_goes() -> list[tuple[str, str]]:
    """The rows of the "Where a change goes" table of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### Where a change goes", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("the change", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def test_the_newcomer_table_names_five_changes_and_rooms_that_exist() -> None:
    rows = _where_a_change_goes()
    changes = " ".join(change for change, _ in rows)
    for kind in ("store", "column option", "stall field", "CLI verb", "governor rule"):
        assert kind in changes, f"docs/architecture.md names no room for a new {kind}"
    for change, room in rows:
        named = [token for token in room.split("`")[1::2] if "/" in token]
        assert named, f"{change!r}: the room names no file"
        for token in named:
            assert (ROOT / token).exists(), f"{change!r}: {token} does not exist"
        # Every symbol named in parentheses after a file is defined in that file.
        for file, symbols in re.findall(r"`([\w/]+\.py)` \(([^)]*)\)", room):
            source = (ROOT / file).read_text(encoding="utf-8")
            for symbol in re.findall(r"`([\w.]+)`", symbols):
                last = symbol.split(".")[-1]
                assert re.search(rf"\b(class|def) {last}\b", source), f"{file}: no {symbol}"


# The SQL stores: one shape each, seams in the open, no class too large to read.
SQL_STORES = {"sqlite": "_sqlite", "postgres": "_pg"}
MAX_CLASS_LINES = 300


@pytest.mark.parametrize("store", sorted(SQL_STORES))
def test_each_sql_store_is_a_class_its_jobs_its_sql_and_its_bridge(store: str) -> None:
    folder = PACKAGES["trioplay.stores"]
    prefix = SQL_STORES[store]
    parts = {path.stem for path in folder.glob(f"{prefix}_*.py")}
    # SQLite's connection is a part of its own: it needs no Trio, and the
    # light commands use the store through it without Trio (run_direct).
    extra = {"_sqlite_connect"} if store == "sqlite" else set()
    assert parts == {f"{prefix}_jobs", f"{prefix}_sql", f"{prefix}_bridge", *extra}
    # The class hands each operation to its job: it runs no SQL of its own.
    source = (folder / f"{store}.py").read_text(encoding="utf-8")
    assert ".execute(" not in source, f"stores/{store}.py runs a statement itself"
    # Both bridges use the shared job states and hand-back.
    assert "trioplay.stores._bridge" in _imports(
        f"trioplay.stores.{prefix}_bridge", folder / f"{prefix}_bridge.py"
    )


def test_store_modules_import_only_public_names_from_each_other() -> None:
    modules = _modules("trioplay.stores")
    private = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                for alias in node.names:
                    submodule = f"trioplay.stores.{alias.name}"
                    if alias.name.startswith("_") and submodule not in modules:
                        private.append(f"{module}: {alias.name} from .{node.module or ''}")
    assert private == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_class_is_over_300_lines(package: str) -> None:
    large = []
    for module, path in _modules(package).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    large.append(f"{module}.{node.name}: {lines} lines")
    assert large == []
