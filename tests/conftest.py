"""Shared test configuration.

Hypothesis: a fast default profile; ``TRIOPLAY_HYPOTHESIS=thorough`` selects
a thorough one.

Deadlines: every ``async def`` test runs under ``trio.fail_after`` (60 s by
default, on the test's own clock, so virtual-time tests count virtual
seconds), so a bug fails a test instead of hanging CI. A test that needs
another bound says ``@pytest.mark.deadline(seconds)``.

Every test, synchronous ones too (their subprocesses have ``timeout=``),
also runs under a last-resort guard: if one test (setup and teardown
included) lasts ``HANG_GUARD`` real seconds (or twice its deadline mark, if
more), :func:`faulthandler.dump_traceback_later` prints every thread's
stack and ends the session, so a hang that no deadline caught (a blocking
call, a wait outside Trio) fails ``make test`` instead of stalling it.
"""

from __future__ import annotations

import faulthandler
import functools
import inspect
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import pytest
import trio
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

settings.register_profile(
    "fast", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("TRIOPLAY_HYPOTHESIS", "fast"))

DEFAULT_TEST_DEADLINE = 60.0
HANG_GUARD = 600.0  # real seconds; the slowest test takes about a tenth of it


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


_guard_stderr: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    # The guard writes to the terminal's stderr, not to the test's captured one.
    global _guard_stderr
    _guard_stderr = os.dup(2)
    # A suite started as a shell's background job (`make test &`) starts with
    # SIGINT ignored, and every process a test starts inherits that: the
    # command line then rightly ignores the Ctrl-C the test sends it (as it
    # does in a background job, docs/cli.md) and the test waits in vain. The
    # tests are about a terminal's Ctrl-C: the processes they start get
    # Python's own handling of it.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _guard_stderr
    if _guard_stderr is not None:
        os.close(_guard_stderr)
        _guard_stderr = None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # The PostgreSQL tests' schemas are dropped on a thread of their own
    # (tests/test_postgres.py, SchemaDropper): wait for the last ones, and
    # fail the session if one could not be dropped.
    module = sys.modules.get("tests.test_postgres")
    if module is None:
        return
    failed = module.DROPPER.finish(timeout=120)
    if failed:
        text = "PostgreSQL test schemas not dropped: " + "; ".join(failed)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(text, red=True)
        else:
            print(text, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("deadline")
    seconds = max(HANG_GUARD, 2 * float(marker.args[0])) if marker else HANG_GUARD
    if _guard_stderr is not None:
        faulthandler.dump_traceback_later(seconds, exit=True, file=_guard_stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
