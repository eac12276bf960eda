"""Why rows failed, for the run summary: the failure types of each dataset.

:func:`read_failures` reads a dataset's failed rows from its sheet and counts
them by the type of their error (the text before the first ``:`` of the
stored error, as ``scenario`` counts them), keeping the first message and row
key of each type as an example. :func:`failures_line` says it in one line::

    2 failed: 2 ToolExecutionError (provider 'finder_a' rejected the input) e.g. d7.io

and :func:`failures_data` as JSON (``run --json``), with the same numbers.

The recorded failures that are probably bugs in a tool (``engine/_retry.py``)
get a line each, :func:`bug_line`, with the ``trioplay retry`` command that
forgets them once the code is fixed::

    probably a bug in tool lookup: 3 recorded failures with TypeError (tool 'lookup'
    raised TypeError: ...); once fixed: trioplay retry r --tool lookup --error
    TypeError --store sqlite:///s.db, then run again

(one line on the terminal).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._retry import RecordedFailure
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


@attrs.frozen
class FailureGroup:
    """The recorded failures of one tool with one type: how many, and the first message."""

    tool: str
    type: str
    count: int
    example: str
    datasets: tuple[str, ...]

    def shown(self, *, with_dataset: bool = False) -> str:
        text = f"{self.count:,} {self.type} in tool {self.tool}"
        if with_dataset and self.datasets:
            text += f" (dataset {', '.join(self.datasets)})"
        return text


def group(failures: Sequence[RecordedFailure]) -> list[FailureGroup]:
    """``failures`` by tool and type, most frequent first."""
    groups: dict[tuple[str, str], list[RecordedFailure]] = {}
    for failure in failures:
        groups.setdefault((failure.tool, failure.type), []).append(failure)
    made = [
        FailureGroup(
            tool,
            kind,
            len(members),
            members[0].message,
            tuple(dict.fromkeys(m.dataset for m in members if m.dataset is not None)),
        )
        for (tool, kind), members in groups.items()
    ]
    return sorted(made, key=lambda made: -made.count)


def retry_command(run_id: str, store_url: str, kind: FailureGroup) -> str:
    """The exact ``trioplay retry`` command that forgets the failures of ``kind``."""
    argv = ["trioplay", "retry", run_id, "--tool", kind.tool, "--error", kind.type]
    return shlex.join([*argv, "--store", store_url])


def bug_notes(
    failures: Sequence[RecordedFailure], run_id: str, store_url: str
) -> list[dict[str, Any]]:
    """The recorded failures that are probably bugs, grouped, each with its retry command."""
    bugs = [failure for failure in failures if failure.probably_a_bug]
    notes = []
    for kind in group(bugs):
        note: dict[str, Any] = {
            "tool": kind.tool,
            "type": kind.type,
            "count": kind.count,
            "example": kind.example,
            "retry": None,
        }
        if not store_url.startswith("memory://"):  # it keeps nothing to forget
            note["retry"] = retry_command(run_id, store_url, kind)
        notes.append(note)
    return notes


def bug_line(note: dict[str, Any]) -> str:
    """One line of the summary for one :func:`bug_notes` entry."""
    failures = "failure" if note["count"] == 1 else "failures"
    line = (
        f"  probably a bug in tool {note['tool']}: {note['count']:,} recorded {failures} with "
        f"{note['type']} ({_cut(note['example'])}); "
    )
    if note["retry"] is None:
        return line + "fix it and run again"
    return line + f"once fixed: {note['retry']}, then run again"


def _cut(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."
