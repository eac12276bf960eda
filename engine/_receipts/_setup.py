"""What the receipts of one run work with, handed whole: :class:`DispatchSetup`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._run_facts import RunFacts

if TYPE_CHECKING:
    from .._governor import Governor
    from .._tools import FetchFunction, ToolRegistry


@attrs.frozen(kw_only=True)
class DispatchSetup(RunFacts):
    """What the dispatcher of one run works with: built by the runtime, handed whole.

    The run's facts (:class:`~trioplay._run_facts.RunFacts`: its id, store,
    limits, ``wall_clock`` that stamps leases and receipts, ``cleanup``
    budget shared by every shielded cleanup of the run) and the runtime's
    ``governor``, ``tools`` and ``fetch`` (what tools get as
    ``ToolCall.fetch``). Each collaborator of the dispatcher takes from it
    what it needs, once, at construction.
    """

    governor: Governor
    tools: ToolRegistry
    fetch: FetchFunction | None
