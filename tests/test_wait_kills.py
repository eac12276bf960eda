"""SIGKILL during event delivery (issue 22, acceptance 5), short form.

``python -m benchmarks wait_kills`` runs 50 trials per store; this runs two
per store on fewer slots: a run registering waits and a sender sending
events, each killed with SIGKILL at a random moment, then the store checked
(events whole, waits and events settled in pairs, nothing buffered beside a
waiting wait) and recovered (a rerun, resends: delivered or duplicate, never
twice). See :mod:`benchmarks.wait_kills`.
"""

from __future__ import annotations

import pytest

from benchmarks import wait_kills

from .test_postgres import require_postgres


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_killed_delivery_leaves_the_store_sound(kind: str) -> None:
    if kind == "postgres":
        require_postgres()
    report = wait_kills.run(2, slots=60, seed=7, stores=(kind,), quiet=True)
    line = report[kind]
    assert line["problems"] == []
    assert line["problem_count"] == 0
    # Every slot ends delivered once: what the kill left, plus what the resends delivered.
    assert line["resent_delivered"] + line["resent_duplicate"] == 2 * 60
