"""Why rows failed, for the run summary: the failure types of each dataset.

:func:`read_failures` reads a dataset's failed rows from its sheet and counts
them by the type of their error (the text before the first ``:`` of the
stored error, as ``scenario`` counts them), keeping the first message and row
key of each type as an example. :func:`failures_line` says it in one line::

    2 failed: 2 ToolExecutionError (provider 'finder_a' rejected the input) e.g. d7.io

and :func:`failures_data` as JSON (``run --json``), with the same numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._store import SheetStore

SHOWN = 3  # failure types named in the line; the rest are counted together
EXAMPLE_CHARS = 80  # an example message longer than this is cut


@attrs.define
class FailureKind:
    """The failed rows of one error type: how many, and the first one's message and key."""

    type: str
    count: int
    example: str
    key: str


async def read_failures(store: SheetStore, run_id: str, dataset: str) -> list[FailureKind]:
    """The failed rows of ``dataset`` by error type, most frequent first (ties: first seen)."""
    kinds: dict[str, FailureKind] = {}
    after = -1
    while rows := await store.read_rows(run_id, dataset, status="failed", after_position=after):
        for row in rows:
            kind, _, message = (row.error or "unknown").partition(":")
            found = kinds.get(kind)
            if found is None:
                kinds[kind] = FailureKind(kind, 1, message.strip(), row.key)
            else:
                found.count += 1
        after = rows[-1].position
    return sorted(kinds.values(), key=lambda kind: -kind.count)


def failures_line(kinds: Sequence[FailureKind]) -> str:
    """``39 failed: 36 ToolExecutionError (finder_b: not found) e.g. d17.example; 3 ...``."""
    total = sum(kind.count for kind in kinds)
    parts = []
    for kind in kinds[:SHOWN]:
        text = f"{kind.count:,} {kind.type}"
        if kind.example:
            text += f" ({_cut(kind.example)})"
        parts.append(f"{text} e.g. {kind.key}")
    rest = kinds[SHOWN:]
    if rest:
        types = "type" if len(rest) == 1 else "types"
        parts.append(f"{sum(kind.count for kind in rest):,} of {len(rest)} other {types}")
    return f"{total:,} failed: {'; '.join(parts)}"


def failures_data(kinds: Sequence[FailureKind]) -> list[dict[str, Any]]:
    """The failure types as JSON: ``type``, ``count``, ``example``, ``key`` (every type)."""
    return [attrs.asdict(kind) for kind in kinds]


def _cut(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."
