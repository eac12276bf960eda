"""The contract surface of DESIGN §2 stays importable from ``trioplay``."""

from __future__ import annotations

import inspect

import trioplay

CONTRACT = [
    "play",
    "PlayContext",
    "RowContext",
    "Row",
    "Dataset",
    "MapResult",
    "open_runtime",
    "run",
    "ToolRegistry",
    "ToolCall",
    "Rate",
    "Limits",
    "FetchTimeouts",
    "Secret",
    "FetchTimeout",
    "UnsafeOutboundUrl",
    "ToolExecutionError",
    "ProviderTransientError",
    "LeaseLost",
    "ReceiptWaitTimeout",
    "RowOutputNotJsonSerializable",
    "MapMemoryLimitError",
    "PersistenceLatchTripped",
    "PlayInputError",
    "RunIdConflict",
    # What a store implements and is given (trioplay.stores imports only these).
    "Store",
    "ReceiptStore",
    "SheetStore",
    "PageStore",
    "RunStore",
    "FailureStore",
    "RowStatus",
    "RunStatus",
    # What adapters and tool authors build on (trioplay.adapters imports only public names).
    "ToolSettings",
    "canonical_json",
    "redact",
    # Recorded failures taken back (trioplay retry, issue 25).
    "retry_failures",
    "RecordedFailure",
    # Waiting rows (DESIGN §11, issue 22).
    "EventWait",
    "WaitingRow",
    "RunWaiting",
    "InvalidWait",
    "EventWaitTimeout",
    "EventRejected",
    "EventConflict",
    "EventRefused",
    "UnknownRun",
    "MapAccountingError",
    "send_event",
]


def test_every_contract_name_is_exported() -> None:
    missing = [name for name in CONTRACT if not hasattr(trioplay, name)]
    assert missing == []


def test_context_methods() -> None:
    for name in ("dataset", "csv", "jsonl", "tool", "step", "fetch", "log"):
        assert callable(getattr(trioplay.PlayContext, name)), name
    assert isinstance(inspect.getattr_static(trioplay.PlayContext, "run_id"), property)
    for name in ("tool", "fetch", "step", "log", "wait_for_event", "event_wait"):
        assert callable(getattr(trioplay.RowContext, name)), name
    for name in ("wait_for_event", "event_wait"):
        assert callable(getattr(trioplay.PlayContext, name)), name
    assert callable(trioplay.Runtime.send_event)
    for name in ("with_column", "run"):
        assert callable(getattr(trioplay.Dataset, name)), name


def test_tool_options_and_fetch_signature() -> None:
    tool = inspect.signature(trioplay.PlayContext.tool).parameters
    for option in ("force", "stale_after", "timeout", "receipt_wait", "key"):
        assert tool[option].kind is inspect.Parameter.KEYWORD_ONLY, option
    fetch = inspect.signature(trioplay.PlayContext.fetch).parameters
    for option in (
        "method",
        "headers",
        "json",
        "content",
        "auth",
        "timeouts",
        "stale_after",
        "force",
    ):
        assert option in fetch, option
    run = inspect.signature(trioplay.Dataset.run).parameters
    assert list(run)[1:] == ["key", "on_row_error", "page_size", "on_waiting"]


def test_defaults_match_the_design() -> None:
    limits = trioplay.Limits()
    assert limits.page_size == 1000
    assert limits.max_concurrent_rows == 256
    assert limits.max_concurrent_external_calls == 64
    assert limits.writer_buffer_bytes == 16 * 1024 * 1024
    assert limits.writer_max_flush == 0.1
    assert limits.stall_log_interval == 60
    assert limits.tool_batch_window == 0.0  # group commit (docs/architecture.md)
    assert limits.tool_timeout == 930
    timeouts = trioplay.FetchTimeouts()
    assert (timeouts.headers, timeouts.body, timeouts.total) == (30.0, 30.0, 120.0)


def test_error_codes_and_hierarchy() -> None:
    err = trioplay.FetchTimeout("headers", 30.0)
    assert err.code == "CTX_FETCH_TIMEOUT"
    assert str(err).startswith("[CTX_FETCH_TIMEOUT phase=headers timeout_ms=30000] ")
    transient = trioplay.ProviderTransientError("rate_limit", retry_after=2.0)
    assert (transient.category, transient.retry_after) == ("rate_limit", 2.0)
    for name in CONTRACT:
        obj = getattr(trioplay, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, trioplay.TrioplayError), name
