"""The map: a dataset's rows through their resolvers into the durable sheet.

``_dataset`` (the builder) -> ``_runner`` (the map's life, its pages and
rows) -> ``_admission`` (row slots and bytes), ``_pages`` (pages, their
states and leases), ``_plan`` (which rows run), ``_writer`` (the
terminal-row writer behind a memory channel, opened by
``open_terminal_writer``), ``_ledger`` (the counts, changed as rows
commit), ``_report`` (every event the map emits), ``_stall`` (the stall
observer) and ``_result`` (what the map produced).
"""

from __future__ import annotations

from ._dataset import Dataset as Dataset
from ._result import MapResult as MapResult
from ._result import WaitingRow as WaitingRow
from ._types import OnRowError as OnRowError
from ._types import OnWaiting as OnWaiting
from ._types import Resolver as Resolver
from ._types import Row as Row
