"""Streamed row sources: CSV and JSON Lines files.

``ctx.csv(path, required=[...])`` and ``ctx.jsonl(path, required=[...])`` wrap
these. A source never holds the file in memory: :meth:`RowSource.validate`
scans it once, keeping nothing but a count, and iteration reads one record at
a time, so a million-row file costs the same memory as a ten-row one.

Every problem with the input surfaces as :class:`trioplay.PlayInputError`
whose message names the file, the physical line and, where there is one, the
column, so that the person who exported the file can find and fix it::

    data/leads.csv, line 1, column 'domain': required column is missing (found: name, website)
"""

from __future__ import annotations

import abc
import codecs
import csv
import json
import os
from typing import IO, TYPE_CHECKING, Any, Literal, overload

from trioplay import PlayInputError

if TYPE_CHECKING:
    from _csv import Reader as CsvReader
    from collections.abc import Iterable, Iterator, Sequence


class SourceRow(dict[str, Any]):
    """A row as a source yields it: a ``dict`` that also says where it came from.

    ``origin`` is ``(path, line)``: the file as given and the physical line
    the record starts on. The map names it in the row's errors.
    """

    __slots__ = ("origin",)
    origin: tuple[str, int]


class RowSource(abc.ABC):
    """A file of rows, read lazily and checked as it is read.

    Call :meth:`validate` once before doing any work: it fails fast on a
    missing file, a bad encoding, a missing required column or a malformed
    line, and returns the row count (a progress total). Then iterate: each
    iteration reopens the file and yields one ``dict`` per row, checking every
    row again, because the file may have changed in between.

    Files are UTF-8; a leading byte-order mark is tolerated. Blank lines are
    skipped wherever they are, so a trailing newline or two never makes a row.
    ``required`` names the fields every row must have, non-empty.
    """

    def __init__(self, path: str | os.PathLike[str], *, required: Sequence[str] = ()) -> None:
        self._path = os.fspath(path)
        # A bare string would otherwise be read as a list of one-letter names.
        self._required = (required,) if isinstance(required, str) else tuple(required)
        self._fields: tuple[str, ...] | None = None

    @property
    def fields(self) -> tuple[str, ...] | None:
        """The field names every row has, once read (a CSV header), else ``None``.

        Known after :meth:`validate` for a file that names its fields (CSV),
        so that a map of an empty file still knows its columns.
        """
        return self._fields

    @property
    def path(self) -> str:
        """The path as given, which is how error messages name the file."""
        return self._path

    @property
    def required(self) -> tuple[str, ...]:
        return self._required

    def __repr__(self) -> str:
        required = f", required={list(self._required)!r}" if self._required else ""
        return f"{type(self).__name__}({self._path!r}{required})"

    @overload
    def validate(self, full: Literal[True] = True) -> int: ...
    @overload
    def validate(self, full: Literal[False]) -> None: ...
    @overload
    def validate(self, full: bool) -> int | None: ...
    def validate(self, full: bool = True) -> int | None:
        """Check the file and return its row count, or raise ``PlayInputError``.

        With ``full=True`` (the default) every line is read and checked, but no
        row is kept: a million small CSV rows take well under a second. With
        ``full=False`` only the file, the header and the first row are checked
        and ``None`` is returned; later lines are still checked while iterating.
        """
        with self._open() as file:
            try:
                records = self._checked_records(file)
                if not full:
                    next(records, None)
                    return None
                count = 0
                for _ in records:
                    count += 1
                return count
            except UnicodeDecodeError:
                raise self._decoding_error() from None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with self._open() as file:
            try:
                yield from self._rows(file)
            except UnicodeDecodeError:
                raise self._decoding_error() from None

    def _checked_records(self, file: IO[str]) -> Iterator[object]:
        """Every record, checked, in whatever form is cheapest to count."""
        return self._rows(file)

    @abc.abstractmethod
    def _rows(self, file: IO[str]) -> Iterator[dict[str, Any]]:
        """Every row as a dict, checked."""

    def _open(self) -> IO[str]:
        try:
            # newline="" hands line endings to the csv module untouched, which
            # is what it needs to read quoted fields that contain newlines.
            return open(self._path, encoding="utf-8-sig", newline="")
        except FileNotFoundError:
            raise PlayInputError("file not found", path=self._path) from None
        except IsADirectoryError:
            raise PlayInputError("is a directory, not a file", path=self._path) from None
        except PermissionError:
            raise PlayInputError("permission denied", path=self._path) from None
        except OSError as exc:
            raise PlayInputError(f"cannot open file ({exc.strerror})", path=self._path) from None

    def _decoding_error(self) -> PlayInputError:
        # The text layer decodes ahead in chunks, so the failure it reports is
        # not tied to a line. Rescanning the raw bytes finds the line; this
        # only runs once, on the way out.
        with open(self._path, "rb") as raw:
            for number, line in enumerate(raw, start=1):
                if number == 1:
                    if line.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                        return PlayInputError(
                            "file is UTF-16; save it as UTF-8", path=self._path, line=1
                        )
                    line = line.removeprefix(codecs.BOM_UTF8)
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return PlayInputError(
                        f"not valid UTF-8 (byte 0x{line[exc.start]:02x} at byte {exc.start + 1} "
                        "of the line); save the file as UTF-8",
                        path=self._path,
                        line=number,
                    )
        return PlayInputError("not valid UTF-8; save the file as UTF-8", path=self._path)


class CsvSource(RowSource):
    """A CSV file with a header line; each row is a ``dict`` of strings.

    The header is the first non-blank record. Column names must be non-empty
    and distinct; every later record must have exactly as many fields. Values
    stay strings (an empty cell is ``""``); converting them is the play's
    business. Quoted fields may span lines; line numbers in errors are
    physical lines of the file, counting from 1 at the header.

    A required column must exist in the header and, in every row, hold a
    value that is not empty or only whitespace.

    A field may hold up to ``field_limit`` characters (Python's default,
    131,072, unless raised). The limit is the ``csv`` module's, which is one
    per process: a source raises it to its own ``field_limit`` and never
    lowers it, so a process holds the largest any of its sources asked for.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        required: Sequence[str] = (),
        field_limit: int = 131_072,
    ) -> None:
        super().__init__(path, required=required)
        self._field_limit = field_limit

    def _checked_records(self, file: IO[str]) -> Iterator[object]:
        return self._records(file)[1]

    def _rows(self, file: IO[str]) -> Iterator[dict[str, Any]]:
        header, records = self._records(file)
        path = self._path
        for line, fields in records:
            # Widths are already checked; strict=True would check them again.
            row = SourceRow(zip(header, fields, strict=False))
            row.origin = (path, line)
            yield row

    def _records(self, file: IO[str]) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
        """Read and check the header now; return it and the checked records."""
        # strict=True turns stray quotes into errors instead of silently
        # merging what follows into one field.
        if csv.field_size_limit() < self._field_limit:
            csv.field_size_limit(self._field_limit)
        reader = csv.reader(file, strict=True)
        header: list[str] = []
        try:
            while not header:
                header = next(reader)
        except StopIteration:
            raise PlayInputError(
                "file is empty; expected a header line naming the columns",
                path=self._path,
                line=1,
            ) from None
        except csv.Error as exc:
            raise PlayInputError(f"malformed CSV ({exc})", path=self._path, line=1) from None
        header_line = reader.line_num
        self._check_header(header, header_line)
        self._fields = tuple(header)
        required = [header.index(name) for name in self._required]
        return header, self._checked(reader, header, required)

    def _check_header(self, header: list[str], line: int) -> None:
        seen: set[str] = set()
        for position, name in enumerate(header, start=1):
            if not name.strip():
                raise PlayInputError(
                    f"column {position} has no name in the header", path=self._path, line=line
                )
            if name in seen:
                raise PlayInputError(
                    "column name appears twice in the header",
                    path=self._path,
                    line=line,
                    column=name,
                )
            seen.add(name)
        missing = [name for name in self._required if name not in seen]
        if missing:
            also = f"; also missing: {_names(missing[1:])}" if len(missing) > 1 else ""
            raise PlayInputError(
                f"required column is missing (found: {_names(header)}){also}",
                path=self._path,
                line=line,
                column=missing[0],
            )

    def _checked(
        self, reader: CsvReader, header: list[str], required: list[int]
    ) -> Iterator[tuple[int, list[str]]]:
        """The records after the header, checked, with the line each one starts on."""
        width = len(header)
        # Every physical line belongs to exactly one record (a blank line is
        # an empty record), so a record starts one line after the last ended.
        end = reader.line_num
        try:
            for fields in reader:
                if len(fields) != width:
                    if not fields:
                        end = reader.line_num
                        continue
                    raise PlayInputError(
                        f"expected {width} fields ({_names(header)}), found {len(fields)}",
                        path=self._path,
                        line=end + 1,
                    )
                for index in required:
                    value = fields[index]
                    if not value or value.isspace():
                        raise PlayInputError(
                            "required value is empty",
                            path=self._path,
                            line=end + 1,
                            column=header[index],
                        )
                start, end = end + 1, reader.line_num
                yield start, fields
        except csv.Error as exc:
            if "field larger than field limit" in str(exc):
                raise PlayInputError(
                    f"a field is longer than {self._field_limit:,} characters "
                    "(csv_field_limit); raise it with --limit csv_field_limit=N or "
                    "Limits(csv_field_limit=N)",
                    path=self._path,
                    line=end + 1,
                ) from None
            raise PlayInputError(
                f"malformed CSV in the record starting here ({exc})",
                path=self._path,
                line=end + 1,
            ) from None


class JsonlSource(RowSource):
    """A JSON Lines file: one JSON object per line; each row is that object.

    Every non-blank line must be a JSON object. ``NaN`` and ``Infinity`` are
    refused because rows must stay storable as strict JSON. A required key
    must be present in every object with a value that is not ``null``, not
    ``""`` and not only whitespace.
    """

    def _checked_records(self, file: IO[str]) -> Iterator[object]:
        return self._records(file)

    def _rows(self, file: IO[str]) -> Iterator[dict[str, Any]]:
        path = self._path
        for number, record in self._records(file):
            row = SourceRow(record)
            row.origin = (path, number)
            yield row

    def _records(self, file: IO[str]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every object, checked, with its line number."""
        required = self._required
        for number, line in enumerate(file, start=1):
            try:
                row = _decoder.decode(line)
            except ValueError as exc:
                if not line.strip():
                    continue
                raise PlayInputError(
                    f"not valid JSON ({_json_problem(exc)})", path=self._path, line=number
                ) from None
            if type(row) is not dict:
                raise PlayInputError(
                    f"expected a JSON object, found {_json_type(row)}",
                    path=self._path,
                    line=number,
                )
            for name in required:
                if name not in row:
                    raise PlayInputError(
                        "required key is missing", path=self._path, line=number, column=name
                    )
                value = row[name]
                if value is None or (isinstance(value, str) and (not value or value.isspace())):
                    raise PlayInputError(
                        "required value is empty", path=self._path, line=number, column=name
                    )
            yield number, row


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


_decoder = json.JSONDecoder(parse_constant=_refuse_constant)


def _json_problem(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.colno}"
    return str(exc)


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _names(names: Iterable[str]) -> str:
    # Plain names read best; quote only those whose edges would be invisible.
    return ", ".join(repr(name) if name != name.strip() else name for name in names)
