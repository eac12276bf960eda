"""The breakable TCP proxy of the PostgreSQL tests (now in the fault adapters)."""

from __future__ import annotations

from trioplay.adapters.faults import FaultyProxy as FaultyProxy
