"""Recorded failures: which look like bugs in a tool, and forgetting them (``trioplay retry``).

A tool call that fails permanently is recorded in its receipt and replayed
on every rerun: the failure was paid for, and the engine never pays again
without the user's word. When the failure was a bug in the tool's own code
(a ``TypeError``, a ``KeyError``, a value that is not JSON), fixing the code
changes nothing until the user gives that word: :func:`retry_failures`
forgets the matching failed receipts, and the next run calls them again.

A failure is *probably a bug* when its type is not one a provider reports:
anything but :class:`ToolExecutionError`, :class:`ProviderTransientError`,
:class:`FetchError`, :class:`FetchTimeout` and their subclasses. Its type is what the tool's code
raised (``ToolExecutionError.raised``) when the runtime wrapped it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import FetchError, FetchTimeout, ProviderTransientError, ToolExecutionError

if TYPE_CHECKING:
    from ._records import Receipt
    from ._store import FailureStore


def _kin(*bases: type[BaseException]) -> frozenset[str]:
    names: set[str] = set()
    todo = list(bases)
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)


PROVIDER_ERRORS = _kin(ToolExecutionError, ProviderTransientError, FetchError, FetchTimeout)
"""The failure types a provider reports; any other recorded type is probably a bug."""


@attrs.frozen
class RecordedFailure:
    """One failed receipt, as ``trioplay retry`` and the run summary see it.

    ``type`` is what the tool's code raised when the runtime wrapped it
    (``"TypeError"``), else the recorded error's type; ``dataset`` the
    dataset of the row that made the call (``None`` outside a map, or for a
    receipt recorded before datasets were).
    """

    key: str
    tool: str
    type: str
    message: str
    dataset: str | None = None

    @property
    def probably_a_bug(self) -> bool:
        """Not a failure a provider reports: probably a bug in the tool's code."""
        return self.type not in PROVIDER_ERRORS

    @classmethod
    def of(cls, receipt: Receipt) -> RecordedFailure:
        """The failure ``receipt`` records (a receipt whose error is not JSON is ``unknown``)."""
        try:
            record: Any = json.loads(receipt.error_json or "{}")
        except ValueError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        kind = record.get("raised") or record.get("type") or "unknown"
        dataset = record.get("dataset")
        return cls(
            key=receipt.key,
            tool=receipt.name,
            type=str(kind),
            message=str(record.get("message", "")),
            dataset=dataset if isinstance(dataset, str) else None,
        )

    def matches(self, *, dataset: str | None, tool: str | None, error: str | None) -> bool:
        """Whether each filter given (not ``None``) is this failure's."""
        return (
            (dataset is None or self.dataset == dataset)
            and (tool is None or self.tool == tool)
            and (error is None or self.type == error)
        )


async def recorded_failures(store: FailureStore, run_id: str) -> list[RecordedFailure]:
    """Every failed receipt last claimed by ``run_id``, by key."""
    failures: list[RecordedFailure] = []
    after = ""
    while receipts := await store.list_failed_receipts(run_id, after_key=after):
        failures += [RecordedFailure.of(receipt) for receipt in receipts]
        after = receipts[-1].key
    return failures


async def retry_failures(
    store: FailureStore,
    run_id: str,
    *,
    dataset: str | None = None,
    tool: str | None = None,
    error: str | None = None,
) -> list[RecordedFailure]:
    """Forget the recorded failures of ``run_id`` that match; return those forgotten.

    The library form of ``trioplay retry RUN [--dataset D] [--tool T]
    [--error TYPE]``: each filter given narrows the choice (``error`` is the
    type name a summary shows, such as ``"TypeError"``); none forgets every
    recorded failure of the run. ``store`` is an opened store (``rt.store``
    inside ``open_runtime``). The next run of ``run_id`` calls the forgotten
    calls again, once each, and its failed rows run again; every other
    receipt still replays. A failure replayed by ``run_id`` but first
    recorded by another run of the play belongs to that run: retry that one.
    """
    chosen = [
        failure
        for failure in await recorded_failures(store, run_id)
        if failure.matches(dataset=dataset, tool=tool, error=error)
    ]
    if not chosen:
        return []
    forgotten = set(
        await store.forget_failed_receipts(
            run_id, [failure.key for failure in chosen], now=time.time()
        )
    )
    # Fewer when another process claimed some meanwhile: say only what happened.
    return [failure for failure in chosen if failure.key in forgotten]
