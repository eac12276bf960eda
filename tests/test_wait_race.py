"""Registration racing sending in two processes on PostgreSQL (issue 22, acceptance 6).

The short form of ``python -m benchmarks wait_race`` (5,000 slots there):
two processes in lockstep, one registering a wait per slot, one sending the
slot's event, with the interleaving that loses an event forced (see
:mod:`benchmarks.wait_race`). With the slot lock every event is consumed
exactly once and none is left buffered beside a waiting wait; with the lock
removed (``lock_slots`` returning at once) this test fails: 284 of 300 slots
lost their event when that was tried.
"""

from __future__ import annotations

import pytest

from benchmarks import wait_race

from .test_postgres import require_postgres

pytestmark = [pytest.mark.postgres]

SLOTS = 100


def test_no_event_is_lost_or_doubled_when_registration_races_sending() -> None:
    require_postgres()
    report = wait_race.run(SLOTS, quiet=True)
    assert report | {"seconds": 0} == {
        "slots": SLOTS,
        "events": SLOTS,
        "consumed": SLOTS,
        "lost": 0,
        "double": 0,
        "waiting": 0,
        "seconds": 0,
    }
