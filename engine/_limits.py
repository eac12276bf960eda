"""Limits and deadlines: every bound a run respects, with its default.

Times are seconds, sizes are bytes. ``docs/limits.md`` explains what each one
bounds and how to choose it. A value out of its range (a float where a count
is meant, NaN, infinity, a negative time, or one past the field's maximum:
a million rows or calls, a TiB, a week) is refused when the object is
built, by a ``ValueError`` naming the field and what it accepts.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

MiB = 1024 * 1024


@attrs.frozen
class Accepts:
    """What a bound accepts: whole numbers or finite numbers, from a minimum, to a maximum.

    ``problem(value)`` says what is wrong with ``value`` (``None`` when it
    fits), in the words every refusal uses: ``must be a positive number, got
    2.5; accepted: whole numbers of at least 1``, and for a value past the
    maximum ``must be at most 1,000,000, got ...``.
    """

    whole: bool
    minimum: float
    minimum_allowed: bool  # is the minimum itself accepted?
    accepted: str
    maximum: float = math.inf

    def problem(self, value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int if self.whole else int | float):
            fits = False
        else:
            fits = (
                math.isfinite(value)
                and (value > self.minimum or (self.minimum_allowed and value == self.minimum))
                and value <= self.maximum
            )
        if fits:
            return None
        zero_fits = self.minimum == 0 and self.minimum_allowed
        must_be = "zero or positive" if zero_fits else "a positive number"
        if _above(value, self.maximum):
            must_be = f"at most {self.maximum:,}"
        return f"must be {must_be}, got {value!r}; accepted: {self.accepted}"

    def validator(self, instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        """As an attrs validator: a ``ValueError`` naming ``Class.field``."""
        problem = self.problem(value)
        if problem is not None:
            raise ValueError(f"{type(instance).__name__}.{attribute.name} {problem}")


def _above(value: object, maximum: float) -> bool:
    """Whether ``value`` is a finite number past ``maximum`` (a bool is no number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > maximum


COUNT = Accepts(True, 1, True, "whole numbers of at least 1")
COUNT_OR_ZERO = Accepts(True, 0, True, "whole numbers of at least 0")
SECONDS = Accepts(False, 0, False, "finite seconds above 0")
SECONDS_OR_ZERO = Accepts(False, 0, True, "finite seconds of at least 0")
SHARE = Accepts(False, 0, False, "a fraction above 0 and at most 1", maximum=1)
NUMBER = Accepts(False, 0, False, "finite numbers above 0")

# The bounds of Limits and FetchTimeouts have a maximum too: past it, a value
# is a typo (10**30 rows a page) that would fail late and obscurely, or never end.
MAX_COUNT = 1_000_000
MAX_SIZE = 2**40  # 1 TiB
MAX_SECONDS = 7 * 24 * 3600  # a week
MANY = Accepts(True, 1, True, f"whole numbers from 1 to {MAX_COUNT:,}", maximum=MAX_COUNT)
"""Rows, calls, attempts."""
SIZE = Accepts(True, 1, True, f"whole numbers from 1 to {MAX_SIZE:,} (1 TiB)", maximum=MAX_SIZE)
SIZE_OR_ZERO = Accepts(
    True, 0, True, f"whole numbers from 0 to {MAX_SIZE:,} (1 TiB)", maximum=MAX_SIZE
)
SPAN = Accepts(
    False, 0, False, f"finite seconds above 0, at most {MAX_SECONDS:,} (a week)", MAX_SECONDS
)
SPAN_OR_ZERO = Accepts(
    False, 0, True, f"finite seconds from 0 to {MAX_SECONDS:,} (a week)", MAX_SECONDS
)

# Waits (issue 22) outlive a process: their bound is days, not a week of a run.
MAX_EVENT_WAIT = 366 * 24 * 3600  # a year
EVENT_WAIT = Accepts(
    False, 0, False, f"finite seconds above 0, at most {MAX_EVENT_WAIT:,} (a year)", MAX_EVENT_WAIT
)
MAX_EVENT_PAYLOAD = 64 * MiB
EVENT_PAYLOAD = Accepts(
    True, 1, True, f"whole numbers from 1 to {MAX_EVENT_PAYLOAD:,} (64 MiB)", MAX_EVENT_PAYLOAD
)


def _field(default: Any, accepts: Accepts) -> Any:
    return attrs.field(default=default, validator=accepts.validator)


@attrs.frozen(kw_only=True)
class Limits:
    """The bounds of a run. Pass ``Limits(page_size=500, ...)`` to ``open_runtime``."""

    page_size: int = _field(1000, MANY)
    max_concurrent_rows: int = _field(256, MANY)
    max_concurrent_external_calls: int = _field(64, MANY)
    max_provider_share: float = _field(0.5, SHARE)
    active_rows_budget_bytes: int = _field(256 * MiB, SIZE)
    retained_rows_budget_bytes: int = _field(16 * MiB, SIZE_OR_ZERO)
    writer_buffer_bytes: int = _field(16 * MiB, SIZE)
    writer_max_flush: float = _field(0.1, SPAN)
    progress_flush_interval: float = _field(0.25, SPAN)
    stall_log_interval: float = _field(60.0, SPAN)
    tool_batch_window: float = _field(0.0, SPAN_OR_ZERO)
    tool_batch_max: int = _field(100, MANY)
    tool_batch_max_bytes: int = _field(4 * MiB, SIZE)
    tool_timeout: float = _field(930.0, SPAN)
    lease_ttl: float = _field(60.0, SPAN)
    receipt_wait_delay: float = _field(1.0, SPAN)
    receipt_wait_attempts: int = _field(300, MANY)
    page_wait_delay: float = _field(0.1, SPAN)
    fetch_max_body_bytes: int = _field(10 * MiB, SIZE)
    fetch_retry_attempts: int = _field(3, MANY)
    fetch_retry_delay: float = _field(0.1, SPAN_OR_ZERO)
    cleanup_timeout: float = _field(1.0, SPAN)
    store_retry: float = _field(30.0, SPAN_OR_ZERO)
    loop_lag_threshold: float = _field(0.5, SPAN)
    csv_field_limit: int = _field(131_072, SIZE)
    max_event_wait: float = _field(30 * 24 * 3600.0, EVENT_WAIT)
    max_event_payload_bytes: int = _field(MiB, EVENT_PAYLOAD)
    event_poll_interval: float = _field(1.0, SPAN)


@attrs.frozen(kw_only=True)
class FetchTimeouts:
    """The three deadlines of every ``fetch``: see ``docs/fetch.md``."""

    headers: float = _field(30.0, SPAN)
    body: float = _field(30.0, SPAN)
    total: float = _field(120.0, SPAN)
