"""The configuration of a command: a file, then flags, structured with cattrs.

The file is ``trioplay.toml`` (its top level is the configuration) or the
``[tool.trioplay]`` table of a ``pyproject.toml``; the nearest one wins,
looking in the start folder (the play file's for ``run``, else the current
one) and then in each parent. Both in one folder is an error: one of them
would be ignored. Flags (``--store``, ``--allow-network``, ``--limit``)
replace the file's values. Its keys::

    store = "sqlite:///.trioplay/trioplay.db"
    allow_networks = ["127.0.0.0/8"]

    [limits]            # any field of trioplay.Limits
    page_size = 500

    [fetch_timeouts]    # any field of trioplay.FetchTimeouts
    total = 60

One cattrs converter (:func:`converter`) turns the merged data into
:class:`Settings`. It is strict: a number where a string belongs, a string
where a number belongs, ``true`` for a count and any unknown key are errors
that name where the value came from, the key and what it accepts.
"""

from __future__ import annotations

import functools
import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._limits import FetchTimeouts, Limits
from .._plugins import DEFAULT_STORE_URL
from ._common import CONFIG_FILE, UsageError

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator, Mapping, Sequence

    import cattrs

PYPROJECT = "pyproject.toml"
DEFAULT = "default"


@attrs.frozen(kw_only=True)
class Settings:
    """What a command runs with: the store, the networks ``fetch`` may reach, the limits."""

    store: str = DEFAULT_STORE_URL
    allow_networks: tuple[str, ...] = ()
    limits: Limits = attrs.field(factory=Limits)
    fetch_timeouts: FetchTimeouts = attrs.field(factory=FetchTimeouts)


TABLES: dict[str, type[Any]] = {"limits": Limits, "fetch_timeouts": FetchTimeouts}
"""The sub-tables of the configuration and the class each one becomes."""


# -- the converter ----------------------------------------------------------


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _whole_number(value: Any, _type: type[Any]) -> int:
    if type(value) is int:
        return value
    raise ValueError(f"expected a whole number, got {value!r} ({_kind(value)})")


def _number(value: Any, _type: type[Any]) -> float:
    if type(value) in (int, float):
        return float(value)
    raise ValueError(f"expected a number, got {value!r} ({_kind(value)})")


def _string(value: Any, _type: type[Any]) -> str:
    if isinstance(value, str):
        return value
    raise ValueError(f"expected a string, got {value!r} ({_kind(value)})")


def _networks(value: Any, _type: type[Any]) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of CIDR strings, got {value!r} ({_kind(value)})")
    for cidr in value:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ValueError(
                f"{cidr!r} is not a CIDR block; write one like 127.0.0.0/8 or 10.1.0.0/16"
            ) from None
    return tuple(value)


@functools.cache
def converter() -> cattrs.Converter:
    """The one converter: configuration data -> :class:`Settings`, strictly.

    Built when first needed: a command with nothing to check (no file, no
    flag but ``--store``, see :func:`load`) imports no cattrs, a sixth of
    what ``trioplay runs list`` costs (docs/cli.md, "What a command loads").
    """
    import cattrs
    from cattrs.gen import make_dict_structure_fn, override

    made = cattrs.Converter(forbid_extra_keys=True)
    made.register_structure_hook(int, _whole_number)
    made.register_structure_hook(float, _number)
    made.register_structure_hook(str, _string)
    made.register_structure_hook(
        Settings,
        make_dict_structure_fn(
            Settings,
            made,
            _cattrs_forbid_extra_keys=True,
            allow_networks=override(struct_hook=_networks),
        ),
    )
    return made


# -- where the values come from ---------------------------------------------


@attrs.frozen
class Config:
    """The effective settings, the file they came from, and where each value came from."""

    settings: Settings
    file: Path | None
    origins: Mapping[str, str]
    """Each key (``"store"``, ``"limits.page_size"``, ...) -> a file, a flag or ``default``."""
    searched: Path


def keys() -> Iterator[tuple[str, Any]]:
    """Every key of the configuration, dotted, with its default value, in order."""
    for field in attrs.fields(Settings):
        table = TABLES.get(field.name)
        if table is None:
            yield field.name, getattr(Settings(), field.name)
        else:
            for inner in attrs.fields(table):
                yield f"{field.name}.{inner.name}", getattr(table(), inner.name)


def find_file(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest configuration at or above ``start``: its path and its table."""
    folder = start.resolve()
    for place in (folder, *folder.parents):
        found = []
        own = place / CONFIG_FILE
        if own.is_file():
            found.append((own, _read(own)))
        pyproject = place / PYPROJECT
        if pyproject.is_file():
            table = _read(pyproject).get("tool", {}).get("trioplay")
            if table is not None:
                if not isinstance(table, dict):
                    raise UsageError(f"{_shown(pyproject)}: [tool.trioplay] must be a table")
                found.append((pyproject, table))
        if len(found) > 1:
            raise UsageError(
                f"{_shown(own)} and [tool.trioplay] in {_shown(pyproject)} both configure "
                "trioplay; keep one of them"
            )
        if found:
            return found[0]
    return None


def _read(path: Path) -> dict[str, Any]:
    import tomllib  # only when there is a file: `--store` alone reads none (docs/cli.md)

    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"{_shown(path)}: not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start} (line {line}) cannot be decoded; save the file as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{_shown(path)}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{_shown(path)}: cannot read it ({exc.strerror})") from None


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when it is below it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def load(
    start: Path,
    *,
    config_file: str | None = None,
    flags: Sequence[tuple[str, Any, str]] = (),
) -> Config:
    """The configuration found from ``start`` (or ``config_file``), with ``flags`` on top.

    ``flags`` are ``(dotted key, value, flag)`` triples, e.g.
    ``("limits.page_size", 500, "--limit")``. Raises :class:`UsageError`
    naming the file or flag, the key and what it accepts.
    """
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise UsageError(f"--config {config_file}: no such file")
        data = _read(path)
        if path.name == PYPROJECT:
            data = data.get("tool", {}).get("trioplay", {})
        found: tuple[Path, dict[str, Any]] | None = (path, data)
    else:
        found = find_file(start)
    file, data = found if found is not None else (None, {})
    origins: dict[str, str] = {}
    merged: dict[str, Any] = {}
    label = _shown(file) if file is not None else DEFAULT
    for key, value in data.items():
        if key in TABLES:
            if not isinstance(value, dict):
                raise UsageError(f"{label}: {key}: expected a table ([{key}]), got {value!r}")
            merged[key] = dict(value)
            origins.update({f"{key}.{inner}": label for inner in value})
        else:
            merged[key] = value
            origins[key] = label
    for key, value, flag in flags:
        table, _, inner = key.rpartition(".")
        if table:
            merged.setdefault(table, {})[inner] = value
        else:
            merged[key] = value
        origins[key] = flag
    if merged.keys() <= {"store"} and isinstance(merged.get("store", ""), str):
        # Nothing the converter would check but that a string is a string.
        settings = Settings(**merged)
    else:
        settings = _structured(merged, origins)
    full = {key: origins.get(key, DEFAULT) for key, _ in keys()}
    return Config(settings, file, full, start)


def _structured(merged: dict[str, Any], origins: Mapping[str, str]) -> Settings:
    from cattrs.errors import ClassValidationError

    try:
        settings: Settings = converter().structure(merged, Settings)
    except (ClassValidationError, ValueError) as exc:
        problems = list(_problems(exc, ""))
        lines = [_with_origin(origins, path, text) for path, text in problems]
        raise UsageError("; ".join(lines)) from None
    return settings


def _with_origin(origins: Mapping[str, str], path: str, text: str) -> str:
    """``origin: key: problem``; a table-wide problem names every origin in the table."""
    sources = [origins[path]] if path in origins else []
    sources += sorted({origin for key, origin in origins.items() if key.startswith(path + ".")})
    where = " or ".join(dict.fromkeys(sources)) or DEFAULT
    return f"{where}: {path}: {text}" if path else f"{where}: {text}"


def _problems(exc: BaseException, path: str) -> Iterator[tuple[str, str]]:
    """Every leaf problem under a cattrs error, as ``(dotted key, message)``."""
    from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        for inner, note in with_notes:
            yield from _problems(inner, f"{path}.{note.name}" if path else note.name)
        for inner in without:
            yield from _problems(inner, path)
    elif isinstance(exc, IterableValidationError):
        for inner in exc.exceptions:
            yield from _problems(inner, path)
    elif isinstance(exc, ForbiddenExtraKeysError):
        names = [field.name for field in attrs.fields(exc.cl)]
        for extra in sorted(exc.extra_fields):
            key = f"{path}.{extra}" if path else extra
            where = f"[{path}]" if path else "the configuration"
            yield (
                key,
                f"unknown key{_did_you_mean(extra, names)}; the keys of {where} are: "
                + (", ".join(names)),
            )
    else:
        yield path, str(exc)


def _did_you_mean(name: str, names: Sequence[str]) -> str:
    """`` (did you mean page_size?)`` for the nearest of ``names``, or nothing."""
    import difflib  # only for a mistyped key

    near = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {near[0]}?)" if near else ""


def parse_limit(text: str) -> tuple[str, Any]:
    """``"page_size=500"`` -> ``("page_size", 500)``; the value is read as TOML."""
    import tomllib

    name, sep, raw = text.partition("=")
    name = name.strip()
    names = [field.name for field in attrs.fields(Limits)]
    if not sep:
        raise ValueError(f"expected NAME=VALUE with NAME one of: {', '.join(names)}")
    if name not in names:
        raise ValueError(
            f"unknown limit {name!r}{_did_you_mean(name, names)}; the limits are: "
            f"{', '.join(names)}"
        )
    try:
        value = tomllib.loads(f"value = {raw.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        raise ValueError(f"{name}: {raw!r} is not a number") from None
    return name, value


# -- trioplay config --------------------------------------------------------


def format_config(config: Config) -> str:
    """The effective configuration as TOML, each value commented with where it came from."""
    lines = []
    if config.file is not None:
        lines.append(f"# configuration file: {_shown(config.file)}")
    else:
        lines.append(
            f"# no configuration file ({CONFIG_FILE}, or [tool.trioplay] in {PYPROJECT}) "
            f"in {_shown(config.searched)} or above it"
        )
    rows: list[tuple[str, str]] = []
    settings = config.settings
    current = ""
    for key, _ in keys():
        table, _, name = key.rpartition(".")
        if table != current:
            rows.append((f"\n[{table}]", ""))
            current = table
        source = settings if not table else getattr(settings, table)
        rows.append((f"{name} = {_toml(getattr(source, name))}", config.origins[key]))
    width = max(len(text) for text, origin in rows if origin)
    for text, origin in rows:
        lines.append(f"{text.ljust(width)}  # {origin}" if origin else text)
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return repr(value)


def start_folder(play: str | os.PathLike[str] | None) -> Path:
    """Where the lookup starts: the play file's folder, or the current one."""
    if play is None:
        return Path.cwd()
    path = Path(play)
    return path if path.is_dir() else path.parent
