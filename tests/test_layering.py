"""Layering: which modules may import which, read from the source with ``ast``.

Every import statement counts, wherever it stands: at module level, inside a
function, or under ``if TYPE_CHECKING:`` (a type-only import still ties one
module to another's internals). A check is a test over :func:`modules` and
:func:`imports`; add the next one beside the others.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each package and the folder it installs from (pyproject.toml's package-dir).
FOLDERS = {
    "trioplay": ROOT / "engine",
    "trioplay.stores": ROOT / "stores",
    "trioplay.adapters": ROOT / "adapters",
}


class Module(NamedTuple):
    name: str  # dotted, e.g. "trioplay.stores.sqlite"
    path: Path
    is_package: bool  # an __init__.py: its relative imports start from itself


class Import(NamedTuple):
    line: int
    module: str  # absolute, dotted


def modules(package: str) -> list[Module]:
    """Every module of ``package`` installed from its folder, itself included.

    Subfolders that are packages are walked too; another package's folder
    (``stores/`` is not inside ``engine/``) is not.
    """
    folder = FOLDERS[package]
    found = []
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found.append(Module(".".join([package, *parts]), path, is_package))
    return found


def imports(module: Module, source: str | None = None) -> list[Import]:
    """The modules ``module`` imports, relative imports made absolute.

    ``from a import b`` counts as ``a`` and as ``a.b``, since ``b`` may be a
    module (``from trioplay import _records``).
    """
    tree = ast.parse(module.path.read_text() if source is None else source)
    here = module.name.split(".")
    if not module.is_package:
        here.pop()
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            start = ".".join([*base, *([node.module] if node.module else [])])
            if node.module:
                found.append(Import(node.lineno, start))
            found += [Import(node.lineno, f"{start}.{alias.name}") for alias in node.names]
    return found


def is_private_engine_module(name: str) -> bool:
    """``trioplay._anything``: a module of the engine outside its public names."""
    parts = name.split(".")
    return len(parts) > 1 and parts[0] == "trioplay" and parts[1].startswith("_")


# -- stores see only the engine's public names --------------------------------


@pytest.mark.parametrize("module", modules("trioplay.stores"), ids=lambda m: m.name)
def test_stores_import_no_private_engine_module(module: Module) -> None:
    private = [
        f"{module.path.name}:{found.line}: {found.module}"
        for found in imports(module)
        if is_private_engine_module(found.module)
    ]
    assert private == []


# -- the checks check what they say --------------------------------------------


def test_every_store_module_is_walked() -> None:
    names = {module.name for module in modules("trioplay.stores")}
    assert {
        "trioplay.stores",
        "trioplay.stores.memory",
        "trioplay.stores.sqlite",
        "trioplay.stores.postgres",
    } <= names


def test_imports_resolve_relative_and_type_checking_imports() -> None:
    source = """
from typing import TYPE_CHECKING
from trioplay import StoreError, _records
from ._rules import decide_claims
from . import memory

if TYPE_CHECKING:
    from trioplay._store import Store

def later():
    import trioplay._json
"""
    module = Module("trioplay.stores.sqlite", ROOT / "stores" / "sqlite.py", False)
    found = {item.module for item in imports(module, source)}
    assert {
        "trioplay.StoreError",
        "trioplay._records",
        "trioplay.stores._rules",
        "trioplay.stores.memory",
        "trioplay._store",
        "trioplay._json",
    } <= found
    package = Module("trioplay.stores", ROOT / "stores" / "__init__.py", True)
    assert Import(2, "trioplay.stores.memory") in imports(package, "\nfrom .memory import X\n")
    private = sorted(name for name in found if is_private_engine_module(name))
    assert private == [
        "trioplay._json",
        "trioplay._records",
        "trioplay._store",
        "trioplay._store.Store",
    ]
