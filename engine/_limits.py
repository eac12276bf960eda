"""Limits and deadlines: every bound a run respects, with its default.

Times are seconds, sizes are bytes. ``docs/limits.md`` explains what each one
bounds and how to choose it.
"""

from __future__ import annotations

from typing import Any

import attrs

MiB = 1024 * 1024


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ValueError(
            f"{type(_instance).__name__}.{attribute.name} must be a positive number, got {value!r}"
        )


def _share(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
        raise ValueError(
            f"{type(_instance).__name__}.{attribute.name} must be a fraction "
            f"above 0 and at most 1, got {value!r}"
        )


def _non_negative(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"{type(_instance).__name__}.{attribute.name} must be zero or positive, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class Limits:
    """The bounds of a run. Pass ``Limits(page_size=500, ...)`` to ``open_runtime``."""

    page_size: int = attrs.field(default=1000, validator=_positive)
    max_concurrent_rows: int = attrs.field(default=256, validator=_positive)
    max_concurrent_external_calls: int = attrs.field(default=64, validator=_positive)
    max_provider_share: float = attrs.field(default=0.5, validator=_share)
    active_rows_budget_bytes: int = attrs.field(default=256 * MiB, validator=_positive)
    retained_rows_budget_bytes: int = attrs.field(default=16 * MiB, validator=_non_negative)
    writer_buffer_bytes: int = attrs.field(default=16 * MiB, validator=_positive)
    writer_max_flush: float = attrs.field(default=0.1, validator=_positive)
    progress_flush_interval: float = attrs.field(default=0.25, validator=_positive)
    stall_log_interval: float = attrs.field(default=60.0, validator=_positive)
    tool_batch_window: float = attrs.field(default=0.005, validator=_non_negative)
    tool_batch_max: int = attrs.field(default=100, validator=_positive)
    tool_batch_max_bytes: int = attrs.field(default=4 * MiB, validator=_positive)
    tool_timeout: float = attrs.field(default=930.0, validator=_positive)
    lease_ttl: float = attrs.field(default=60.0, validator=_positive)
    receipt_wait_delay: float = attrs.field(default=1.0, validator=_positive)
    receipt_wait_attempts: int = attrs.field(default=300, validator=_positive)
    fetch_max_body_bytes: int = attrs.field(default=10 * MiB, validator=_positive)
    fetch_retry_attempts: int = attrs.field(default=3, validator=_positive)
    fetch_retry_delay: float = attrs.field(default=0.1, validator=_non_negative)
    cleanup_timeout: float = attrs.field(default=1.0, validator=_positive)


@attrs.frozen(kw_only=True)
class FetchTimeouts:
    """The three deadlines of every ``fetch``: see ``docs/fetch.md``."""

    headers: float = attrs.field(default=30.0, validator=_positive)
    body: float = attrs.field(default=30.0, validator=_positive)
    total: float = attrs.field(default=120.0, validator=_positive)
