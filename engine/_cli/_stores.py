"""What the commands that touch a store share: their configuration, their store, how
they run on it.

:func:`on_store` runs a command's queries on a SQLite store without Trio
(:meth:`~trioplay.stores.sqlite.SqliteStore.run_direct`: the same store
methods, jobs and SQL, each job on this thread), and on any other store in
``trio.run``. So ``runs list``, ``runs show``, ``send-event`` and ``cancel``
on SQLite never import Trio, and this module imports nothing heavy
(docs/cli.md, "What a command loads").
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._plugins import DEFAULT_STORE_URL
from ._common import DEMO_STORE_URL, UsageError, _say
from ._config import Config, load
from ._paths import store_problem

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Callable, Coroutine

    from .._store import Store

T = TypeVar("T")

# The schemes trioplay.stores serves: their entry points name trioplay.stores.open_store,
# which is called directly (the entry point table is importlib.metadata: some 80 modules).
_SHIPPED = ("memory", "sqlite", "postgresql", "postgres")


def config_for(args: argparse.Namespace, start: Path) -> Config:
    """The configuration found from ``start`` with this command's flags on top."""
    flags: list[tuple[str, Any, str]] = []
    if args.store is not None:
        flags.append(("store", args.store, "--store"))
    if getattr(args, "allow_networks", None) is not None:
        flags.append(("allow_networks", args.allow_networks, "--allow-network"))
    for name, value in getattr(args, "limits", None) or ():
        flags.append((f"limits.{name}", value, "--limit"))
    return load(start, config_file=args.config, flags=flags)


def store_for(url: str, *, must_exist: bool = False) -> Store:
    """The store for ``url``, not yet opened; :class:`UsageError` if the URL is bad.

    With ``must_exist``, a SQLite file that is not there is an error rather
    than a new empty database (reading commands should not create stores).
    """
    if url.startswith("memory://"):
        if must_exist:
            raise UsageError(
                "memory:// holds nothing between commands: every command starts with an "
                "empty one (use sqlite:///FILE)"
            )
        _say(
            "warning: memory:// keeps nothing: the run's results go when this command ends "
            "and a rerun starts over (use sqlite:///FILE to keep them)"
        )
    try:
        store: Store = _open_store(url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if url.startswith("sqlite:///"):
        _check_sqlite_path(url, url.removeprefix("sqlite:///"))
    if must_exist and url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path != ":memory:" and not Path(path).exists():
            hint = ""
            demo_path = DEMO_STORE_URL.removeprefix("sqlite:///")
            if url == DEFAULT_STORE_URL and Path(demo_path).exists():
                hint = (
                    f"; `trioplay demo` keeps its runs in {DEMO_STORE_URL}:"
                    f" add --store {DEMO_STORE_URL}"
                )
            raise UsageError(f"no store at {url} (the file {path} does not exist){hint}")
    return store


def _check_sqlite_path(url: str, path: str) -> None:
    """Refuse a SQLite path that cannot hold a database before the run starts (exit 2)."""
    from trioplay.stores.sqlite import path_problem  # a postgresql:// URL need not load SQLite

    try:
        problem = path_problem(path) or store_problem(path)
    except OSError as exc:  # a name too long to look up, and the like
        problem = f"{exc.strerror}; name another path"
    if problem is not None:
        raise UsageError(f"store {url}: {problem}")


def _open_store(url: str) -> Store:
    """The store for ``url``, as ``open_runtime`` finds it (``ValueError`` if it cannot)."""
    if url.partition(":")[0] in _SHIPPED:
        from trioplay.stores import open_store as shipped

        return shipped(url)
    from .._plugins import open_store  # another distribution's store, by its entry point

    found: Store = open_store(url)
    return found


def on_store(store: Store, command: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``command(store, *args)`` with ``store`` open, and the store closed after.

    On SQLite without Trio: each query runs on this thread
    (:meth:`~trioplay.stores.sqlite.SqliteStore.run_direct`), and Trio's
    import is most of what such a command would otherwise cost. Any other
    store (PostgreSQL's pool of threads) runs it in ``trio.run``.
    """
    if store.url.startswith("sqlite:"):
        from trioplay.stores.sqlite import SqliteStore

        if isinstance(store, SqliteStore):  # it opens and closes the store itself
            return store.run_direct(partial(command, store, *args))
    import trio

    return trio.run(partial(_with_opened, store, command, *args))


async def _with_opened(
    store: Store, command: Callable[..., Coroutine[Any, Any, T]], *args: Any
) -> T:
    async with opened(store):
        return await command(store, *args)


@contextlib.asynccontextmanager
async def opened(store: Store) -> AsyncIterator[Store]:
    """``store``, open; closed when the block ends, also when it is cancelled (in Trio)."""
    import trio  # the caller runs in Trio already

    await store.open()
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
