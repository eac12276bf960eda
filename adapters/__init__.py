"""trioplay adapters: row sources and tools that plug into the engine's interfaces."""

from __future__ import annotations

from .http import HttpTool as HttpTool
from .readers import CsvSource as CsvSource
from .readers import JsonlSource as JsonlSource
from .simulated import Latency as Latency
from .simulated import SimulatedProvider as SimulatedProvider
