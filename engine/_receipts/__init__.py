"""The receipts protocol of one run: every external effect goes through a receipt."""

from __future__ import annotations

from ._dispatcher import Dispatcher as Dispatcher
from ._dispatcher import DispatchStats as DispatchStats
from ._dispatcher import local_executor as local_executor
