"""Group registration (issue 22, acceptance 7): one store call per page of waiting rows.

The short form of ``python -m benchmarks wait_register``: 2,000 waits
registered a page (1,000) at a time, polled in one call, registered again,
on memory and SQLite (and PostgreSQL when it answers): the call counts are
the point; the times belong to the benchmark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from benchmarks import wait_register
from trioplay.stores import open_store

from .test_postgres import DSN, drop_schema, new_schema_name, require_postgres, with_schema

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.deadline(60)

WAITS = 2_000


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_waits_register_and_poll_a_page_per_call(kind: str, tmp_path: Path) -> None:
    schema = new_schema_name()
    if kind == "postgres":
        require_postgres()
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'w.db'}",
        "postgres": with_schema(DSN, schema),
    }[kind]
    store = open_store(url)
    await store.open()
    try:
        phases = await wait_register.measure(store, WAITS)
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
        if kind == "postgres":
            drop_schema(schema)
    assert {phase: p["calls"] for phase, p in phases.items()} == {
        "register": WAITS // wait_register.PAGE,
        "poll": 1,
        "rerun": WAITS // wait_register.PAGE,
    }


async def test_a_map_whose_rows_all_suspend_registers_them_in_groups() -> None:
    # The engine side: 2,000 rows of a map each waiting for an event are
    # registered together (a call per group of rows suspending at once), not
    # one call per row. Measured: 8 calls; the bound leaves room for a
    # loaded machine splitting the groups further.
    found = await wait_register.measure_map(WAITS)
    assert found["suspended"] == WAITS
    assert 1 <= found["register_calls"] <= WAITS // 50
