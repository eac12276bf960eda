"""The short form of ``python -m benchmarks faults`` (the full one: docs/durability.md).

Two real processes share a run; one is stopped with SIGSTOP past its lease
and resumed. Neither may hang, no completed row may be replaced, every row
is committed once and the run ends ``completed``.
"""

from __future__ import annotations

import pytest

from benchmarks import faults

from .test_postgres import require_postgres


def _check(report: faults.Report) -> None:
    text = "\n".join(report.lines())
    assert report.trials, text
    assert report.clean, text


def test_a_process_paused_past_its_lease_neither_hangs_nor_corrupts_sqlite() -> None:
    _check(faults.run(2, rows=1_500, seed=3, stores=("sqlite",), quiet=True))


@pytest.mark.postgres
def test_a_process_paused_past_its_lease_neither_hangs_nor_corrupts_postgres() -> None:
    require_postgres()
    _check(faults.run(2, rows=1_500, seed=4, stores=("postgres",), quiet=True))
