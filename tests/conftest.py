"""Shared test configuration.

Hypothesis: a fast default profile; ``TRIOPLAY_HYPOTHESIS=thorough`` selects
a thorough one.

Deadlines: every ``async def`` test runs under ``trio.fail_after`` (60 s by
default, on the test's own clock, so virtual-time tests count virtual
seconds), so a bug fails a test instead of hanging CI. A test that needs
another bound says ``@pytest.mark.deadline(seconds)``.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import TYPE_CHECKING, Any

import pytest
import trio
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

settings.register_profile(
    "fast", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("TRIOPLAY_HYPOTHESIS", "fast"))

DEFAULT_TEST_DEADLINE = 60.0


def _bounded(fn: Callable[..., Awaitable[Any]], seconds: float) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def bounded(*args: Any, **kwargs: Any) -> Any:
        with trio.fail_after(seconds):
            return await fn(*args, **kwargs)

    return bounded


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            marker = item.get_closest_marker("deadline")
            seconds = float(marker.args[0]) if marker else DEFAULT_TEST_DEADLINE
            item.obj = _bounded(item.obj, seconds)
