"""Loading a play file: ``FILE.py[:PLAY]``, its module, its play and its tools.

It runs before Trio starts; see ``trioplay run --help`` for the rules.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import PlayDefinitionError, format_error
from .._runtime import Play, play_name
from .._tools import ToolRegistry
from ._common import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType


def split_play_ref(ref: str) -> tuple[Path, str | None]:
    """``"file.py:name"`` -> ``(Path("file.py"), "name")``; ``"file.py"`` -> name ``None``."""
    head, sep, name = ref.rpartition(":")
    if sep and head and name and not re.search(r"[/\\]", name) and not Path(ref).exists():
        return Path(head), name
    return Path(ref), None


def load_play_module(path: Path) -> ModuleType:
    """Import ``path`` as a fresh module; :class:`UsageError` if it cannot be read."""
    if not path.exists():
        raise UsageError(f"play file not found: {path}")
    if not path.is_file():
        raise UsageError(f"play file is not a file: {path}")
    module_name = "_trioplay_play_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}: a play file is a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses, pickling and the like look here
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        sys.modules.pop(module_name, None)
        raise PlayDefinitionError(
            f"{path}: importing it raised SystemExit({exc.code!r}); a play file must not exit"
        ) from exc
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise PlayDefinitionError(f"{path}: importing it failed: {format_error(exc)}") from exc
    return module


@contextlib.contextmanager
def _importable_from(folder: Path) -> Iterator[None]:
    """Let the play import modules beside it, as ``python FILE.py`` would."""
    entry = str(folder.resolve())
    if entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def _is_play_function(obj: object) -> bool:
    from .. import _runtime

    return callable(obj) and obj is not _runtime.play and not isinstance(obj, type)


def find_play(module: ModuleType, path: Path, name: str | None) -> Play:
    """The play ``name`` in ``module`` (see ``trioplay run --help``)."""
    decorated: dict[int, tuple[str, Any]] = {}
    for attr, obj in vars(module).items():
        if _is_play_function(obj) and getattr(obj, "__trioplay_name__", None) is not None:
            decorated.setdefault(id(obj), (attr, obj))
    plays = [(attr, obj) for attr, obj in decorated.values() if inspect.iscoroutinefunction(obj)]
    listing = ", ".join(_describe_play(attr, obj) for attr, obj in plays) or "none"
    if name is None and not plays and len(decorated) == 1:
        # A decorated plain def: say so rather than fall back to `play`.
        name = next(iter(decorated.values()))[0]
    chosen: Any = None
    if name is not None:
        chosen = getattr(module, name, None)
        if chosen is None:
            chosen = next(
                (obj for _, obj in plays if getattr(obj, "__trioplay_name__", None) == name),
                None,
            )
        if chosen is None:
            raise UsageError(f"{path} has no play {name!r}; plays in it: {listing}")
        label = f"{path}:{name}"
    elif len(plays) == 1:
        chosen = plays[0][1]
        label = f"{path}:{plays[0][0]}"
    elif len(plays) > 1:
        raise UsageError(f"{path} has several plays ({listing}); pick one with {path}:NAME")
    else:
        chosen = getattr(module, "play", None)
        if not _is_play_function(chosen):
            raise UsageError(
                f"{path} has no play: decorate an async function with @trioplay.play(...) "
                "or name it `play`"
            )
        label = f"{path}:play"
    if getattr(chosen, "__trioplay_name__", None) is not None and not (
        inspect.iscoroutinefunction(chosen)
    ):
        raise PlayDefinitionError(
            f"{label} is decorated with @trioplay.play but is not async: "
            f"a play is an async def (ctx, input); plays in it: {listing}"
        )
    if not _is_play_function(chosen) or not inspect.iscoroutinefunction(chosen):
        raise PlayDefinitionError(
            f"{label} is not a play: a play is an async function (ctx, input); "
            f"plays in {path}: {listing}"
        )
    play: Play = chosen
    return play


def _describe_play(attr: str, obj: Any) -> str:
    name = play_name(obj)
    return attr if name == attr else f"{attr} ({name})"


def find_tools(module: ModuleType, path: Path) -> ToolRegistry:
    """The module's ``tools``: a :class:`ToolRegistry` or a function returning one."""
    tools = getattr(module, "tools", None)
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, ToolRegistry):
        return tools
    if callable(tools):
        try:
            made = tools()
        except Exception as exc:
            raise PlayDefinitionError(f"{path}: tools() failed: {format_error(exc)}") from exc
        if isinstance(made, ToolRegistry):
            return made
        raise PlayDefinitionError(
            f"{path}: tools() must return a trioplay.ToolRegistry, got {type(made).__name__}"
        )
    raise PlayDefinitionError(
        f"{path}: `tools` must be a trioplay.ToolRegistry or a function returning one, "
        f"got {type(tools).__name__}"
    )
