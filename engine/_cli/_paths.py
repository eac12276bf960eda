"""Where a command writes, checked before it starts: never over a file it reads or
keeps, and never somewhere it cannot write.

``run``, ``demo``, ``export`` and ``timeline`` call :func:`check_outputs` with
their outputs (``--out``, ``--events``, ``--trace``) and the files they must
not destroy: the store's SQLite file and its ``-wal``/``-shm``/``-journal``,
the configuration file, the play file, the input files the command line can
see (``--csv``, and any string of ``--input`` that names an existing file),
the events a timeline is drawn from, and each other. "The same file" means
the same path once symlinks are resolved, or the same inode (a hard link).
Either refusal is a :class:`UsageError` (exit 2) naming both paths, raised
before any provider is called.

An output is written beside itself under a temporary name and renamed into
place (:mod:`._export`); :func:`output_problem` tries to create that very
file, and removes it, so that a folder that refuses new files (read-only, a
virtual file system such as ``/proc``, a name too long) is found now, and
is told in the words of the path the user gave, never the temporary one.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._common import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
"""The files SQLite keeps for a database: itself, its WAL, its shared memory, its journal."""


STDOUT = "-"
"""``--out -``: standard output."""


def partial_path(target: str | os.PathLike[str]) -> Path:
    """Where an output to the regular file ``target`` is written until it is complete."""
    path = Path(target)
    return path.with_name(f".{path.name}.partial")


@attrs.frozen
class Guarded:
    """A file a command must not write over: what it is (``"the play file"``), its
    path, and a note said after the path (``" (--csv)"``)."""

    what: str
    path: str
    note: str = ""


def check_outputs(outputs: Sequence[tuple[str, str | None]], guarded: Sequence[Guarded]) -> None:
    """Refuse (:class:`UsageError`) an output that cannot be written or would destroy a file.

    ``outputs`` are ``(flag, path)`` pairs, ``path`` ``None`` for a flag not
    given; each is checked against ``guarded`` and against the outputs before
    it. ``-`` (standard output) is always fine.
    """
    seen = list(guarded)
    for flag, path in outputs:
        if path is None or path == STDOUT:
            continue
        problem = output_problem(path)
        if problem is not None:
            raise UsageError(f"{flag} {path}{problem}")
        for other in seen:
            if same_file(path, other.path):
                raise UsageError(
                    f"{flag} {path} is {other.what} {other.path}{other.note}: "
                    "writing it would destroy it; name another file"
                )
        seen.append(Guarded(f"the {flag} file", path))


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether writing ``a`` writes ``b``: one path through symlinks, or one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        one, two = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def sqlite_files(url: str) -> list[Guarded]:
    """The files of a ``sqlite:///`` store (none for another store or ``:memory:``)."""
    if not url.startswith("sqlite:///"):
        return []
    path = url.removeprefix("sqlite:///")
    if path in ("", ":memory:"):
        return []
    real = os.path.realpath(path)
    files = [Guarded("the store's file", path + suffix) for suffix in SQLITE_SUFFIXES]
    # SQLite keeps the -wal beside the database's real file, through a symlink.
    files += [Guarded("the store's file", real + suffix) for suffix in SQLITE_SUFFIXES[1:]]
    return files


def input_files(input: Any, csv: str | None) -> list[Guarded]:
    """The existing files that strings in a play's input name (the play may read them):
    ``csv`` is the one ``--csv`` gave, the others came with ``--input``."""
    return [
        Guarded("the input file", text, " (--csv)" if text == csv else " (--input)")
        for text in _strings(input)
        if _is_file(text)
    ]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _is_file(text: str) -> bool:
    try:
        return 0 < len(text) < 4096 and os.path.isfile(text)
    except (OSError, ValueError):
        return False


# -- can it be written? ------------------------------------------------------


def output_problem(path: str) -> str | None:
    """Why an output cannot be written at ``path`` (to follow ``--out PATH``), or ``None``.

    The text starts with ``": "`` or ``" is "``, so that ``f"{flag} {path}{problem}"``
    reads as one sentence.
    """
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = target.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        return f" is a directory; name a file, such as {Path(path) / 'rows.csv'}"
    if mode is not None and not stat.S_ISREG(mode):
        return None  # a FIFO or a device is opened and written as it is
    folder = _nearest_folder(target)
    if not folder.is_dir():
        shown = _shown(folder, path)
        return (
            f": {shown} is a file, not a directory, so {path} cannot be created below it; "
            f"name a path in a directory, or move {shown} away"
        )
    try:
        _try_to_create(target, folder)
    except OSError as exc:
        return f": {_refusal(exc, target, folder, path)}"
    return None


def _nearest_folder(target: Path) -> Path:
    """The nearest existing ancestor of ``target``: where the missing folders, and
    then the file, are created. A name too long to look up counts as missing."""
    folder = target.parent
    while folder != folder.parent:
        try:
            os.stat(folder)
        except OSError:
            folder = folder.parent
            continue
        break
    return folder


def _try_to_create(target: Path, folder: Path) -> None:
    """Create, then remove, the file an output is first written to (or, when its
    folder does not exist yet, any file in the nearest folder that does)."""
    if folder != target.parent:
        for part in target.parent.relative_to(folder).parts:
            if len(os.fsencode(part)) > _name_max(folder):
                raise _FolderNameTooLong(part)
        if len(os.fsencode(partial_path(target).name)) > _name_max(folder):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        import tempfile  # only for a folder still to be made: its module loads shutil, random

        descriptor, probe = tempfile.mkstemp(prefix=".trioplay-", dir=folder)
        os.close(descriptor)
        os.unlink(probe)
        return
    partial = partial_path(target)
    try:
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # left by a command that was killed: it is overwritten
    os.close(descriptor)
    os.unlink(partial)


class _FolderNameTooLong(OSError):
    """A missing folder on the way to an output has a name too long to create."""

    def __init__(self, name: str) -> None:
        super().__init__(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        self.name = name


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


WRITABLE = "name a path in a writable directory"


def _refusal(exc: OSError, target: Path, folder: Path, path: str, advice: str = WRITABLE) -> str:
    """What an ``OSError`` from :func:`_try_to_create` means, in the user's words."""
    where = _shown(folder, path)
    most = _name_max(folder)
    if isinstance(exc, _FolderNameTooLong):
        return f"the name {exc.name} is too long: names in {where} hold at most {most} bytes"
    if exc.errno == errno.ENAMETOOLONG:
        longer = len(os.fsencode(partial_path(target).name)) - len(os.fsencode(target.name))
        return (
            f"its name is too long: the file is first written under a name {longer} bytes "
            f"longer, and names in {where} hold at most {most} bytes; use a name of at most "
            f"{most - longer} bytes"
        )
    if exc.errno == errno.EROFS:
        why = "is on a read-only file system"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = "is not writable"
    else:  # ENOENT from /proc, and the like
        why = f"cannot hold new files ({exc.strerror}: a virtual file system such as /proc)"
    return f"the directory {where} {why}; {advice}"


def _shown(folder: Path, path: str) -> str:
    """``folder`` as the user would write it: relative if ``path`` was."""
    if os.path.isabs(path):
        return str(folder)
    try:
        return str(folder.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(folder)


def store_problem(path: str) -> str | None:
    """Why SQLite cannot keep its files at ``path``, found by creating the database
    (and removing it): ``None`` when it can. A database that is there already must
    be writable."""
    target = Path(path)
    if path == ":memory:":
        return None
    try:
        mode: int | None = os.stat(target).st_mode
    except OSError:
        mode = None
    if mode is not None:
        if not stat.S_ISREG(mode) or os.access(target, os.R_OK | os.W_OK):
            return None
        return (
            f"the database {path} cannot be written (its mode, or a read-only file system); "
            "SQLite would open it read-only and fail at the first write: make it writable, "
            "or name another store"
        )
    folder = _nearest_folder(target)
    most = _name_max(folder)
    for part in target.parent.relative_to(folder).parts:
        if len(os.fsencode(part)) > most:
            return f"the name {part} is too long: names in {folder} hold at most {most} bytes"
    if len(os.fsencode(target.name + "-wal")) > most:
        return (
            f"the name {target.name} is too long: SQLite keeps {target.name}-wal beside it, "
            f"and names in {folder} hold at most {most} bytes; use a shorter name"
        )
    if folder != target.parent:
        return None  # the store creates the missing folders; path_problem checked the rest
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    except OSError as exc:
        advice = f"SQLite creates the database and its -wal and -shm files there: {WRITABLE}"
        return _refusal(exc, target, folder, path, advice)
    os.close(descriptor)
    os.unlink(target)
    return None
