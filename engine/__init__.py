"""trioplay: durable, bounded dataset enrichment plays on Trio.

The names below are the public contract (DESIGN §2); ``tests/test_exports.py``
checks that each one is importable from here.

Each name loads its module on first use (:func:`__getattr__`, from
:data:`_LAZY`), so that ``import trioplay`` loads none of the engine, and
the command lines that need little of it (``trioplay --help``, ``runs
list``) load only that: docs/cli.md, "What a command loads". Type checkers
see the ordinary imports below; ``tests/test_cli_start.py`` checks that they
and :data:`_LAZY` name the same things.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._context import PlayContext as PlayContext
    from ._errors import ChildLimitExceeded as ChildLimitExceeded
    from ._errors import ChildPlayFailed as ChildPlayFailed
    from ._errors import CorruptReceipt as CorruptReceipt
    from ._errors import EventConflict as EventConflict
    from ._errors import EventRefused as EventRefused
    from ._errors import EventRejected as EventRejected
    from ._errors import EventWaitTimeout as EventWaitTimeout
    from ._errors import FetchError as FetchError
    from ._errors import FetchTimeout as FetchTimeout
    from ._errors import InvalidWait as InvalidWait
    from ._errors import LeaseLost as LeaseLost
    from ._errors import MapAccountingError as MapAccountingError
    from ._errors import MapMemoryLimitError as MapMemoryLimitError
    from ._errors import PersistenceLatchTripped as PersistenceLatchTripped
    from ._errors import PlayAborted as PlayAborted
    from ._errors import PlayCycleError as PlayCycleError
    from ._errors import PlayDefinitionError as PlayDefinitionError
    from ._errors import PlayDepthExceeded as PlayDepthExceeded
    from ._errors import PlayInputError as PlayInputError
    from ._errors import ProviderTransientError as ProviderTransientError
    from ._errors import ReceiptNotRecorded as ReceiptNotRecorded
    from ._errors import ReceiptWaitTimeout as ReceiptWaitTimeout
    from ._errors import RowOutputNotJsonSerializable as RowOutputNotJsonSerializable
    from ._errors import RowSuspended as RowSuspended
    from ._errors import RunCancelled as RunCancelled
    from ._errors import RunEnded as RunEnded
    from ._errors import RunIdConflict as RunIdConflict
    from ._errors import RunWaiting as RunWaiting
    from ._errors import StoreError as StoreError
    from ._errors import ToolExecutionError as ToolExecutionError
    from ._errors import ToolTimeout as ToolTimeout
    from ._errors import TrioplayError as TrioplayError
    from ._errors import UnknownRun as UnknownRun
    from ._errors import UnknownToolError as UnknownToolError
    from ._errors import UnsafeOutboundUrl as UnsafeOutboundUrl
    from ._events import RuntimeEvent as RuntimeEvent
    from ._fetch import FetchResponse as FetchResponse
    from ._fetch import Secret as Secret
    from ._fetch import redact as redact
    from ._json import canonical_json as canonical_json
    from ._limits import FetchTimeouts as FetchTimeouts
    from ._limits import Limits as Limits
    from ._map import Dataset as Dataset
    from ._map import MapResult as MapResult
    from ._map import Row as Row
    from ._map import WaitingRow as WaitingRow
    from ._map._stall import MapStallObserver as MapStallObserver
    from ._map._stall import WriterDiagnostics as WriterDiagnostics
    from ._plugins import DEFAULT_STORE_URL as DEFAULT_STORE_URL
    from ._records import Claimed as Claimed
    from ._records import ClaimOutcome as ClaimOutcome
    from ._records import ClaimRequest as ClaimRequest
    from ._records import Completion as Completion
    from ._records import EventRecord as EventRecord
    from ._records import Failure as Failure
    from ._records import Held as Held
    from ._records import Lease as Lease
    from ._records import PageClaim as PageClaim
    from ._records import PageLease as PageLease
    from ._records import Receipt as Receipt
    from ._records import RowStatus as RowStatus
    from ._records import RunLeases as RunLeases
    from ._records import RunRecord as RunRecord
    from ._records import RunStatus as RunStatus
    from ._records import SendRequest as SendRequest
    from ._records import SendResult as SendResult
    from ._records import Settled as Settled
    from ._records import SheetEntry as SheetEntry
    from ._records import SheetRow as SheetRow
    from ._records import SheetWrite as SheetWrite
    from ._records import WaitRecord as WaitRecord
    from ._records import WaitRequest as WaitRequest
    from ._records import WaitStatus as WaitStatus
    from ._retry import RecordedFailure as RecordedFailure
    from ._retry import retry_failures as retry_failures
    from ._row_context import RowContext as RowContext
    from ._runtime import Play as Play
    from ._runtime import Runtime as Runtime
    from ._runtime import open_runtime as open_runtime
    from ._runtime import play as play
    from ._runtime import run as run
    from ._runtime import send_event as send_event
    from ._store import FailureStore as FailureStore
    from ._store import PageStore as PageStore
    from ._store import ReceiptStore as ReceiptStore
    from ._store import RunStore as RunStore
    from ._store import SheetStore as SheetStore
    from ._store import Store as Store
    from ._store import WaitStore as WaitStore
    from ._tools import Rate as Rate
    from ._tools import ToolCall as ToolCall
    from ._tools import ToolRegistry as ToolRegistry
    from ._tools import ToolSettings as ToolSettings
    from ._tools import ToolSpec as ToolSpec
    from ._waits import EventWait as EventWait

_LAZY: dict[str, str] = {
    "PlayContext": "._context",
    "ChildLimitExceeded": "._errors",
    "ChildPlayFailed": "._errors",
    "CorruptReceipt": "._errors",
    "EventConflict": "._errors",
    "EventRefused": "._errors",
    "EventRejected": "._errors",
    "EventWaitTimeout": "._errors",
    "FetchError": "._errors",
    "FetchTimeout": "._errors",
    "InvalidWait": "._errors",
    "LeaseLost": "._errors",
    "MapAccountingError": "._errors",
    "MapMemoryLimitError": "._errors",
    "PersistenceLatchTripped": "._errors",
    "PlayAborted": "._errors",
    "PlayCycleError": "._errors",
    "PlayDefinitionError": "._errors",
    "PlayDepthExceeded": "._errors",
    "PlayInputError": "._errors",
    "ProviderTransientError": "._errors",
    "ReceiptNotRecorded": "._errors",
    "ReceiptWaitTimeout": "._errors",
    "RowOutputNotJsonSerializable": "._errors",
    "RowSuspended": "._errors",
    "RunCancelled": "._errors",
    "RunEnded": "._errors",
    "RunIdConflict": "._errors",
    "RunWaiting": "._errors",
    "StoreError": "._errors",
    "ToolExecutionError": "._errors",
    "ToolTimeout": "._errors",
    "TrioplayError": "._errors",
    "UnknownRun": "._errors",
    "UnknownToolError": "._errors",
    "UnsafeOutboundUrl": "._errors",
    "RuntimeEvent": "._events",
    "FetchResponse": "._fetch",
    "Secret": "._fetch",
    "redact": "._fetch",
    "canonical_json": "._json",
    "FetchTimeouts": "._limits",
    "Limits": "._limits",
    "Dataset": "._map",
    "MapResult": "._map",
    "Row": "._map",
    "WaitingRow": "._map",
    "MapStallObserver": "._map._stall",
    "WriterDiagnostics": "._map._stall",
    "Claimed": "._records",
    "ClaimOutcome": "._records",
    "ClaimRequest": "._records",
    "Completion": "._records",
    "EventRecord": "._records",
    "Failure": "._records",
    "Held": "._records",
    "Lease": "._records",
    "PageClaim": "._records",
    "PageLease": "._records",
    "Receipt": "._records",
    "RowStatus": "._records",
    "RunLeases": "._records",
    "RunRecord": "._records",
    "RunStatus": "._records",
    "SendRequest": "._records",
    "SendResult": "._records",
    "Settled": "._records",
    "SheetEntry": "._records",
    "SheetRow": "._records",
    "SheetWrite": "._records",
    "WaitRecord": "._records",
    "WaitRequest": "._records",
    "WaitStatus": "._records",
    "RecordedFailure": "._retry",
    "retry_failures": "._retry",
    "RowContext": "._row_context",
    "DEFAULT_STORE_URL": "._plugins",
    "Play": "._runtime",
    "Runtime": "._runtime",
    "open_runtime": "._runtime",
    "play": "._runtime",
    "run": "._runtime",
    "send_event": "._runtime",
    "FailureStore": "._store",
    "PageStore": "._store",
    "ReceiptStore": "._store",
    "RunStore": "._store",
    "SheetStore": "._store",
    "Store": "._store",
    "WaitStore": "._store",
    "Rate": "._tools",
    "ToolCall": "._tools",
    "ToolRegistry": "._tools",
    "ToolSettings": "._tools",
    "ToolSpec": "._tools",
    "EventWait": "._waits",
}
"""Each public name -> the module that defines it (the imports above)."""


def _load(name: str) -> Any:
    """``trioplay.NAME`` for a name of :data:`_LAZY` (the module's ``__getattr__``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # loaded once: later lookups find it without this function
    return value


def _names() -> list[str]:
    return sorted({*globals(), *_LAZY})


if not TYPE_CHECKING:  # so that a type checker reports a name this module lacks
    __getattr__ = _load
    __dir__ = _names
