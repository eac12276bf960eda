"""What the receipts of one run work with, handed whole: :class:`DispatchSetup`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._cleanup import CleanupBudget
    from .._governor import Governor
    from .._limits import Limits
    from .._store import ReceiptStore
    from .._tools import FetchFunction, ToolRegistry
    from .._trace import Recorder


@attrs.frozen
class DispatchSetup:
    """What the dispatcher of one run works with: built by the runtime, handed whole.

    Each collaborator of the dispatcher takes from it what it needs, once,
    at construction. ``fetch`` is what tools get as ``ToolCall.fetch``;
    ``cleanup`` is the run's cleanup budget, shared by every shielded
    cleanup of the run; ``wall_clock`` stamps leases and receipts.
    """

    store: ReceiptStore
    governor: Governor
    tools: ToolRegistry
    limits: Limits
    run_id: str
    owner: str
    wall_clock: Callable[[], float]
    fetch: FetchFunction | None
    cleanup: CleanupBudget
    trace: Recorder | None = None
