"""Every private name of Trio that trioplay uses, in one place.

Trio does not promise these; a Trio release may move or rename any of them.
They are imported here defensively, so that ``import trioplay`` works
whatever Trio did, and each use degrades to something correct but weaker:

=====================================  ==========================================
private name                           what trioplay does with it, and without it
=====================================  ==========================================
``trio._core._run._r`` and             :func:`seeded_scheduler`: tasks that wake
``_ALLOW_DETERMINISTIC_SCHEDULING``    together run in an order drawn from a
                                       seed, so a scenario under a mock clock
                                       records the same events every time;
                                       without them, the order is Trio's own
                                       (random)
=====================================  ==========================================

:func:`problems` lists what is missing; ``tests/test_trio_private.py`` fails
with its message, so a Trio upgrade that moves a name is caught by the suite
instead of in a slower recorder or a flaky scenario.
"""

from __future__ import annotations

import contextlib
import random
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

_HERE = "engine/_trio_private.py"

try:
    from trio._core import _run as _core_run
except ImportError:  # pragma: no cover - only with a Trio that moved it
    _core_run = None  # type: ignore[assignment]


def _scheduler_random(core_run: object) -> random.Random | None:
    found = getattr(core_run, "_r", None)
    return found if isinstance(found, random.Random) else None


def _has_switch(core_run: object) -> bool:
    return isinstance(getattr(core_run, "_ALLOW_DETERMINISTIC_SCHEDULING", None), bool)


def problems(core_run: object = _core_run) -> list[str]:
    """What trioplay needs from Trio's internals and ``core_run`` lacks, one message each.

    ``core_run`` is the module ``trio._core._run`` (``None`` if it moved).
    """
    found = []
    if _scheduler_random(core_run) is None:
        found.append(
            "trio._core._run._r moved: trioplay needs the scheduler's random.Random"
            f" to seed it (reproducible scenarios); update {_HERE}"
        )
    if not _has_switch(core_run):
        found.append(
            "trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING moved: trioplay needs it to"
            f" make the scheduler's order reproducible (scenarios); update {_HERE}"
        )
    return found


@contextlib.contextmanager
def seeded_scheduler(seed: int) -> Iterator[None]:
    """Within the block, Trio runs tasks that wake together in an order drawn from ``seed``.

    Trio runs the tasks that woke together in a random order, on purpose, so
    that code cannot come to depend on it; and timers due at the same
    instant fire in the order of their cancel scopes' addresses. Trio has a
    switch for this, the one its Hypothesis plugin turns on to make test
    runs reproducible: each batch of woken tasks is sorted by creation and
    then shuffled by Trio's generator ``_r``, which is seeded here. Both are
    put back afterwards. Enter it outside ``trio.run``. With a Trio that
    moved either name (see :func:`problems`) the order is Trio's own.
    """
    run: Any = _core_run
    generator = _scheduler_random(run)
    if generator is None or not _has_switch(run):
        yield
        return
    switch = run._ALLOW_DETERMINISTIC_SCHEDULING
    state = generator.getstate()
    run._ALLOW_DETERMINISTIC_SCHEDULING = True
    generator.seed(seed)
    try:
        yield
    finally:
        generator.setstate(state)
        run._ALLOW_DETERMINISTIC_SCHEDULING = switch
