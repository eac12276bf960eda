"""``trioplay export`` and ``run --out``: one dataset sheet streamed, page by
page, to a CSV or JSON Lines file.

Where the rows go depends on what ``--out`` names. ``-`` is standard output.
A symlink is followed to its target (the link stays a link). A FIFO, a
character device (``/dev/null``, a terminal) or anything else that is not a
regular file is opened and written as it is. A regular file, or a name that
does not exist yet, is written beside itself and renamed into place when
complete, so it is either all there or not there. If that file cannot be
created, the error (a :class:`UsageError`, exit 2) names the path given.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from ._common import UsageError
from ._paths import STDOUT, partial_path

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence

    from .._records import RowStatus, SheetRow
    from .._store import Store

Format = Literal["csv", "jsonl"]
StatusFilter = Literal["completed", "failed", "all"]

_EXPORT_PAGE = 1000
_EXTRA_COLUMNS = ("_status", "_error")


def format_for(path: str | os.PathLike[str]) -> Format:
    """``jsonl`` for ``.jsonl``/``.ndjson`` files, else ``csv`` (standard output too)."""
    return "jsonl" if Path(path).suffix.lower() in (".jsonl", ".ndjson") else "csv"


async def export_dataset(
    store: Store,
    run_id: str,
    dataset: str,
    path: str | os.PathLike[str],
    *,
    fmt: Format,
    status: StatusFilter = "completed",
    columns: Sequence[str] = (),
) -> Exported:
    """Write one dataset sheet to ``path`` page by page; say how many rows and columns.

    Never holds more than one page of rows. CSV needs its header first, so it
    reads the sheet twice: once for the column names, once to write, and the
    second pass stops at the last row the first one saw. When no row has
    ``status``, the header is that of the sheet's other rows, so that the
    file still says what its columns are; for an empty sheet it is
    ``columns`` (the map's, from its ``map.started`` event), and without
    those the file is empty. ``path`` is ``-`` for standard output; see the module
    docstring for the other kinds.
    """
    wanted: RowStatus | None = None if status == "all" else status
    last_position: int | None = None
    header: list[str] = []
    if fmt == "csv":
        seen: dict[str, None] = {}
        pages = _sheet_pages(store, run_id, dataset, wanted, None)
        async with contextlib.aclosing(pages):
            async for page in pages:
                for row in page:
                    seen.update(dict.fromkeys(_record(row, status)))
                last_position = page[-1].position
        if last_position is None:
            last_position = -1  # no row to write: the header only
            found = await _columns_of_any_row(store, run_id, dataset) or dict.fromkeys(columns)
        else:
            found = seen
        header = [name for name in found if name not in _EXTRA_COLUMNS]
        header += [name for name in _EXTRA_COLUMNS if name in found]
    count = 0
    async with open_output(os.fspath(path)) as file:
        if fmt == "csv" and header:
            await file.write(_csv_text([header]))
        pages = _sheet_pages(store, run_id, dataset, wanted, last_position)
        async with contextlib.aclosing(pages):
            async for page in pages:
                records = [_record(row, status) for row in page]
                await file.write(_page_text(records, fmt, header))
                count += len(records)
    return Exported(count, len(header))


@attrs.frozen
class Exported:
    """What :func:`export_dataset` wrote: rows, and columns in the CSV header (0 for JSON Lines)."""

    rows: int
    columns: int


async def _columns_of_any_row(store: Store, run_id: str, dataset: str) -> dict[str, None]:
    """The data columns of the sheet's first page, whatever the rows' status."""
    page = await store.read_rows(
        run_id, dataset, status=None, after_position=-1, limit=_EXPORT_PAGE
    )
    columns: dict[str, None] = {}
    for row in page:
        data = json.loads(row.data_json)
        columns.update(dict.fromkeys(data if isinstance(data, dict) else ["value"]))
    return columns


@contextlib.contextmanager
def written(path: str) -> Iterator[None]:
    """An OS error while finishing ``path`` (the files' names, as given) as a
    :class:`UsageError` naming it, never the partial file's name, and saying what to do."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(
            f"cannot write {path}: {reason}; free some space, or name a path on another file system"
            if exc.errno == errno.ENOSPC
            else f"cannot write {path}: {reason}; name a path in a writable directory"
        ) from exc


@contextlib.asynccontextmanager
async def open_output(path: str, *, keep_on_error: bool = False) -> AsyncIterator[Any]:
    """An async text file for ``path``, by kind (see the module docstring).

    A regular file whose writer fails is removed, unless ``keep_on_error``:
    then what was written is renamed into place all the same (the events of
    a run that failed or was interrupted are what explains it).
    """
    if path == STDOUT:
        stdout = trio.wrap_file(sys.stdout)
        yield stdout
        await stdout.flush()
        return
    target = await trio.Path(path).resolve()  # through every symlink
    try:
        mode = (await target.stat()).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # not there (yet): created below
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path} is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        # A FIFO blocks in open() until a reader comes: let Ctrl-C abandon it.
        raw = await trio.to_thread.run_sync(
            lambda: open(target, "w", encoding="utf-8", newline=""),
            abandon_on_cancel=True,
        )
        device = trio.wrap_file(raw)
        try:
            yield device
        except BaseException:
            with trio.CancelScope(shield=True), contextlib.suppress(OSError):
                await device.aclose()  # the body's error is the one to say
            raise
        with written(path):  # the last of the text is written on close (/dev/full)
            await device.aclose()
        return
    partial = trio.Path(partial_path(target))
    try:
        await target.parent.mkdir(parents=True, exist_ok=True)
        file = await partial.open("w", encoding="utf-8", newline="")
    except OSError as exc:
        # The command checked the path before it started (see _paths); this
        # is a folder that changed since. Say it of the path given, not of
        # the partial file.
        raise UsageError(
            f"cannot write {path}: {exc.strerror or exc}; name a path in a writable directory"
        ) from exc
    try:
        async with file:
            yield file
        with written(path):
            await partial.replace(target)
    except BaseException:
        with trio.CancelScope(shield=True):
            if keep_on_error:
                await partial.replace(target)
            else:
                await partial.unlink(missing_ok=True)
        raise


async def _sheet_pages(
    store: Store,
    run_id: str,
    dataset: str,
    status: RowStatus | None,
    last_position: int | None,
) -> AsyncGenerator[list[SheetRow], None]:
    after = -1
    while True:
        page = await store.read_rows(
            run_id, dataset, status=status, after_position=after, limit=_EXPORT_PAGE
        )
        full = len(page) == _EXPORT_PAGE
        if last_position is not None:
            page = [row for row in page if row.position <= last_position]
        if page:
            yield page
        if not full or len(page) < _EXPORT_PAGE:
            return
        after = page[-1].position


def _record(row: SheetRow, status: StatusFilter) -> dict[str, Any]:
    data = json.loads(row.data_json)
    record: dict[str, Any] = data if isinstance(data, dict) else {"value": data}
    if status == "all":
        record["_status"] = row.status
    if row.error is not None:
        record["_error"] = row.error
    return record


def _page_text(records: Sequence[dict[str, Any]], fmt: Format, header: Sequence[str]) -> str:
    if fmt == "csv":
        return _csv_text([[_cell(record.get(name)) for name in header] for record in records])
    return "".join(
        json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n" for record in records
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _csv_text(rows: Sequence[Sequence[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()
