"""The tool most built-in scenarios' rows call: ``finder`` of provider ``acme``.

(Its own module: a stall line names the frame of :func:`._common.calls`'s
resolver by its line, so ``_common.py`` keeps its lines where they are.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..simulated import Latency, SimulatedProvider
from ._common import calls, leads, map_play

if TYPE_CHECKING:
    from collections.abc import Iterable

    from trioplay import Play

    from ._common import Resolver

QUICK = Latency(0.05, 0.3)


def finder(
    seed: int,
    latency: Latency | float = QUICK,
    *,
    concurrency: int | None = None,
    hang_keys: Iterable[str] = (),
) -> SimulatedProvider:
    """The tool ``finder`` of provider ``acme``, seeded with ``seed``."""
    return SimulatedProvider(
        tool_id="finder",
        provider="acme",
        seed=seed,
        latency=latency,
        concurrency=concurrency,
        hang_keys=hang_keys,
    )


def finder_play(
    name: str, rows: int, *more: tuple[str, Resolver], page_size: int | None = None
) -> Play:
    """A play that looks up the email of ``rows`` leads with ``finder`` (then ``more`` columns)."""
    return map_play(name, leads(rows), ("email", calls("finder")), *more, page_size=page_size)
