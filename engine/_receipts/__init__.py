"""The receipts protocol of one run: every external effect goes through a receipt.

One collaborator per module (see ``_dispatcher``'s docstring for the path of
a call): ``_setup`` (what the run hands its receipts, whole), ``_call`` (a
call in flight, its turn, the followers table),
``_lane`` (batching), ``_claims`` (claims and their outcomes), ``_leases``
(heartbeats, releases), ``_execute`` (the governor, deadlines, retries,
settle), ``_settler`` (coalesced writes, the persistence latch) and
``_dispatcher`` (the facade the contexts call).
"""

from __future__ import annotations

from ._call import DispatchStats as DispatchStats
from ._dispatcher import Dispatcher as Dispatcher
from ._dispatcher import open_dispatcher as open_dispatcher
from ._execute import local_executor as local_executor
from ._setup import DispatchSetup as DispatchSetup
