"""A run's cleanup budget: one ``cleanup_timeout`` for every shielded cleanup after a cancel.

When a run is cancelled (or fails), cleanup that must write still runs,
shielded: the writer's last flush, the settler's last write, page and
receipt lease releases, recording the run's end. They all take their deadline
from one :class:`CleanupBudget`, which starts when the run's nursery begins
to unwind. A cleanup that can only begin after a cancelled store call gave
up (the writer's last flush after its cancelled write, a page's release after
its cancelled finish) gets what is left of that budget, not a
``cleanup_timeout`` of its own, so a cancelled run returns within about one
``cleanup_timeout`` however its cleanups are ordered.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Iterator


class CleanupBudget:
    """``cleanup_timeout`` from the moment the run began to unwind, shared by its cleanups."""

    __slots__ = ("started_at", "timeout", "unanswered")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.started_at: float | None = None
        # A cleanup of the unwinding run ran out of the budget: the store is
        # not answering, and a later cleanup would only wait for it again.
        self.unanswered = False

    async def watch(self) -> None:
        """Sleep in the run's nursery; note when it is cancelled (the budget starts then)."""
        try:
            await trio.sleep_forever()
        finally:
            self.started_at = trio.current_time()

    def deadline(self) -> float:
        """What is left of the budget (at least a tenth of it); a whole one until the run unwinds.

        Before the run unwinds (a map cancelling its own writer on a store
        error), a cleanup gets a ``cleanup_timeout`` from now.
        """
        now = trio.current_time()
        if self.started_at is None:
            return now + self.timeout
        return max(self.started_at + self.timeout, now + self.timeout / 10)

    @contextmanager
    def shielded(self) -> Iterator[trio.CancelScope]:
        """A shielded scope that ends at :meth:`deadline`.

        Cancelled from the start once a cleanup of the unwinding run got no
        answer within the budget; a scope that runs out of it while the run
        unwinds marks the store so.
        """
        with trio.CancelScope(shield=True, deadline=self.deadline()) as scope:
            if self.unanswered:
                scope.cancel()
            yield scope
        if scope.cancelled_caught and self.started_at is not None:
            self.unanswered = True
