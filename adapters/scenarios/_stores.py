"""Scenarios of the store and of leases: slow writes, an outage, lost or foreign leases, a crash."""

from __future__ import annotations

from trioplay import Limits
from trioplay.scenario import NO_STALL, Cause, Expect, Rows, Scenario, Setup

from ..faults import DispatcherCrash, HeldElsewhere, LeaseRejection, SlowStore, StoreOutage
from ..simulated import Latency
from ._common import registry
from ._finder import finder, finder_play


def _writer_backpressure(seed: int) -> Setup:
    return Setup(
        play=finder_play("writer-backpressure", 12, page_size=3),
        tools=registry(finder(seed)),
        store=lambda store: SlowStore(
            store, Latency(median=30, p99=50), seed=seed, operations={"write_terminal_rows"}
        ),
        # One row per sheet write: every row waits for the writer in turn.
        limits=Limits(writer_buffer_bytes=1),
    )


WRITER_BACKPRESSURE = Scenario(
    name="writer-backpressure",
    description="sheet writes take ~30 s and hold one row each: finished rows queue for the writer",
    setup=_writer_backpressure,
    expect=Expect(rows=Rows(completed=12, failed=0), stall=Cause(phase="writer_admission")),
    seeded=True,
)


def _store_outage(seed: int) -> Setup:
    # From 1 s: 300 calls of median 0.5 s keep the run busy past it for any seed
    # (from 5 s, 13 seeds of 100 finished before the outage began). Leases of
    # 10 min outlive the outage: the rows it catches in flight keep theirs.
    return Setup(
        play=finder_play("store-outage", 300),
        tools=registry(finder(seed, Latency(0.5, 3.0))),
        store=lambda store: StoreOutage(store, start=1.0, duration=180.0),
        limits=Limits(lease_ttl=600),
    )


STORE_OUTAGE = Scenario(
    name="store-outage",
    description="the store stops answering for 3 min from 1 s on: the stall line names the store",
    setup=_store_outage,
    expect=Expect(rows=Rows(completed=300, failed=0), stall=Cause(phase="store")),
    seeded=True,
)


def _lease_loss(seed: int) -> Setup:
    return Setup(
        play=finder_play("lease-loss", 20),
        tools=registry(finder(seed, 100.0)),
        # Heartbeats every 30 s; from 40 s on the store says every lease is gone.
        store=lambda store: LeaseRejection(store, start=40.0),
    )


LEASE_LOSS = Scenario(
    name="lease-loss",
    description="calls take 100 s; at the 60 s heartbeat the store says their leases are gone",
    setup=_lease_loss,
    expect=Expect(rows=Rows(completed=0, failed=20, failed_with="LeaseLost")),
)


def _dispatcher_crash(seed: int) -> Setup:
    return Setup(
        play=finder_play("dispatcher-crash", 500),
        tools=registry(finder(seed)),
        store=lambda store: DispatcherCrash(store, after=3),
    )


DISPATCHER_CRASH = Scenario(
    name="dispatcher-crash",
    description=("the fourth claim batch crashes the dispatcher: every waiting row gets its error"),
    setup=_dispatcher_crash,
    expect=Expect(rows=Rows(failed_with="RuntimeError"), stall=NO_STALL),
    seeded=True,
)


def _receipt_held_elsewhere(seed: int) -> Setup:
    return Setup(
        play=finder_play("receipt-held-elsewhere", 20),
        tools=registry(finder(seed)),
        # Another host claimed every receipt with a 150 s lease, then went quiet.
        store=lambda store: HeldElsewhere(store, lease_ttl=150.0),
    )


RECEIPT_HELD_ELSEWHERE = Scenario(
    name="receipt-held-elsewhere",
    description=(
        "another host holds every receipt until its lease expires at 150 s: the rows wait on it"
    ),
    setup=_receipt_held_elsewhere,
    # Every line: the rows wait on the other host's leases (phase receipt, the
    # owner named), no call of theirs has started.
    expect=Expect(
        rows=Rows(completed=20, failed=0),
        stall=Cause(
            phase="receipt",
            provider="acme",
            fields={"oldest_receipt_owner": "peer.invalid/4242/1"},
            every_line=True,
        ),
    ),
    seeded=True,
)
