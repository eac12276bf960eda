"""The JSON Lines sink (``--events FILE.jsonl``) and its reader: one event per line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TextIO

from ._records import from_json, json_lines

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator

    from ._records import Event, Raw


class JsonlSink:
    """Writes each event as one JSON object per line to ``file`` (left open on close)."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def write(self, batch: list[Raw]) -> None:
        self._file.write(json_lines(batch))

    def close(self) -> None:
        self._file.flush()


def read_events(path: str | os.PathLike[str]) -> Iterator[Event]:
    """The events of a JSON Lines file; ``ValueError`` names the first line that is not one."""
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                yield from_json(data)
            except ValueError as exc:
                raise ValueError(f"{path}, line {number}: {exc}") from None
