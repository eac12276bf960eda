"""Exception-group policy, and starting tasks safely.

Trio nurseries raise ``ExceptionGroup``s. Users of trioplay never see one:
every nursery inside the engine is opened with :func:`open_nursery`, which
turns a group back into the one error that caused the failure. The first
error that is not ``trio.Cancelled`` wins (a ``KeyboardInterrupt`` before any
other, so that Ctrl-C is what the user sees); the others are listed in a note
and stay reachable through the group: the winner's ``__cause__``, or its
``__context__`` when the winner has a cause of its own (a latch's store
error, a fetch's transport error), which it keeps. A lone error keeps its
own ``__cause__`` and is raised as if no nursery were involved.

Every task the engine starts is started with :func:`start_soon` or
:func:`start`, which are protected from Ctrl-C where Trio's own are not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found


def collapse(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a group stands for (see the module docstring)."""
    leaves = _leaves(group)
    # One error object raised in many tasks (a store error every caller of a
    # failed batch gets) counts once.
    errors = list({id(exc): exc for exc in leaves if not isinstance(exc, trio.Cancelled)}.values())
    if not errors:
        return leaves[0]
    # Ctrl-C reads as Ctrl-C, whatever else went wrong as it landed.
    errors.sort(key=lambda exc: not isinstance(exc, KeyboardInterrupt))
    first = errors[0]
    others = errors[1:]
    if others:
        first.add_note(
            f"trioplay: {len(others)} further error(s) in the same scope: {_tally(first, others)}"
        )
    return first


def _tally(first: BaseException, others: list[BaseException]) -> str:
    """``others`` counted: those that say what ``first`` says, then the rest by type."""
    same = 0
    kinds: dict[str, int] = {}
    for exc in others:
        if type(exc) is type(first) and str(exc) == str(first):
            same += 1
        else:
            kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
    parts = [f"{same} failed the same way"] if same else []
    parts += [f"{count} {name}" for name, count in kinds.items()]
    return ", ".join(parts)


def note_counted(error: BaseException, kind: str, note: str) -> None:
    """Add ``note`` to ``error``; when ``error`` already has a ``kind`` note, count it instead.

    One error object raised in many tasks (a store error that every row of a
    failed batch gets) would otherwise carry one note per task: the first
    says where, one more line says how many more ``kind`` failed the same way.
    """
    notes = getattr(error, "__notes__", None)
    counts: dict[str, tuple[int, int]] = error.__dict__.setdefault("_trioplay_counted", {})
    if notes is None or kind not in counts:
        error.add_note(note)
        counts[kind] = (-1, 0)
        return
    where, more = counts[kind]
    more += 1
    line = f"trioplay: {more} more {kind} failed the same way"
    if where < 0:
        error.add_note(line)
        where = len(notes) - 1
    else:
        notes[where] = line
    counts[kind] = (where, more)


def _raise_one(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    error = collapse(group)
    if len(_leaves(group)) == 1:
        # A lone error: keep its own cause, hide the wrapper group.
        raise error from error.__cause__
    # The others stay reachable through the group (as the context, when
    # the winner's own cause says more about why it happened).
    raise error from (error.__cause__ if error.__cause__ is not None else group)


@trio.lowlevel.enable_ki_protection
def start_soon(nursery: trio.Nursery, fn: Callable[..., Awaitable[object]], *args: object) -> None:
    """``nursery.start_soon(fn, *args)``, protected from Ctrl-C.

    Trio's own ``start_soon`` and ``start`` are not: a ``KeyboardInterrupt``
    raised inside them, once the new task is registered and before it is
    scheduled, leaves a task that never runs, and ``trio.run`` waits for it
    for ever. Every task the engine starts goes through here or :func:`start`;
    a Ctrl-C there is delivered at the next checkpoint instead.
    """
    nursery.start_soon(fn, *args)


@trio.lowlevel.enable_ki_protection
async def start(nursery: trio.Nursery, fn: Callable[..., Awaitable[object]]) -> None:
    """``await nursery.start(fn)``, protected from Ctrl-C (see :func:`start_soon`)."""
    await nursery.start(fn)


class open_nursery:
    """``trio.open_nursery()`` that raises one error instead of a group.

    A context manager whose ``__aenter__`` and ``__aexit__`` are protected
    from ``KeyboardInterrupt``, as Trio's own are, rather than an
    ``asynccontextmanager``: Python checks for signals as a function begins,
    and Ctrl-C landing as contextlib's ``__aexit__`` began (engine code
    below the play is not protected) left the nursery open, which corrupts
    Trio's nursery stack (a ``RuntimeError`` or ``TrioInternalError``).
    """

    __slots__ = ("_manager",)

    def __init__(self) -> None:
        self._manager = trio.open_nursery()

    @trio.lowlevel.enable_ki_protection
    async def __aenter__(self) -> trio.Nursery:
        return await self._manager.__aenter__()

    @trio.lowlevel.enable_ki_protection
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        try:
            suppressed = bool(await self._manager.__aexit__(exc_type, exc, traceback))
        except BaseExceptionGroup as group:
            _raise_one(group)
        if not suppressed and isinstance(exc, BaseExceptionGroup):
            _raise_one(exc)  # the nursery let the body's own group through
        return suppressed
