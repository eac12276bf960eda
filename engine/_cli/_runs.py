"""``trioplay runs list`` and ``trioplay runs show``: what a store holds about its runs.

Both only read, a few queries each, and run on SQLite without Trio
(:func:`._stores.on_store`): this module imports neither Trio nor the
engine's rooms (docs/cli.md, "What a command loads"; tests/test_cli_start.py).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._json import canonical_json
from ._common import EXIT_OK, UsageError
from ._stores import config_for, on_store, store_for
from ._tree import format_tree, run_tree
from ._waiting import event_line, utc, wait_line

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from .._records import RunLeases, RunRecord
    from .._store import Store
    from . import _Session


def _cmd_runs_list(args: argparse.Namespace, session: _Session) -> int:
    settings = config_for(args, Path.cwd()).settings
    store = store_for(settings.store, must_exist=True)
    now = time.time()
    runs = on_store(
        store, partial(_runs_listed, limit=args.limit, lease_ttl=settings.limits.lease_ttl, now=now)
    )
    if args.json:
        print(json.dumps(runs, ensure_ascii=False, indent=2))
    elif not runs:
        print(f"no runs in {store.url}")
    else:
        table = [("RUN ID", "PLAY", "STATUS", "ATTEMPT", "UPDATED", "ROWS")]
        for run in runs:
            updated = _timestamp(run["updated_at"])
            status = run["status"]
            if run["probably_dead"]:
                beat = run["last_heartbeat"]
                status += f", probably dead: last heartbeat {_timestamp(beat)} ({_ago(beat, now)})"
            if run.get("next_deadline"):  # a waiting run: until when, at the soonest
                status += f" (until {utc(run['next_deadline_at'])})"
            row = (run["run_id"], run["play"], status, str(run["attempt"]), updated)
            table.append((*row, f"{run['rows']:,}"))
        print(_format_table(table, right=(3, 5)))
    return EXIT_OK


async def _runs_listed(
    store: Store, *, limit: int, lease_ttl: float, now: float
) -> list[dict[str, Any]]:
    """The open ``store``'s most recent runs, newest first, as ``runs list --json`` has them."""
    listed = []
    records = await store.list_runs(limit=limit)
    running = [record.run_id for record in records if record.status == "running"]
    leases = await store.run_leases(running) if running else {}
    for record in records:
        rows = 0
        for dataset in await store.list_datasets(record.run_id):
            rows += sum((await store.count_rows(record.run_id, dataset)).values())
        dead, beat = _liveness(record, leases.get(record.run_id), lease_ttl, now)
        deadline = None
        if record.status == "waiting":
            waits = await store.list_waits(record.run_id)
            open_ = [wait.deadline for wait in waits if wait.status == "waiting"]
            deadline = min(open_, default=None)
        listed.append(
            {
                "run_id": record.run_id,
                "play": record.play,
                "status": record.status,
                "attempt": record.attempt,
                "created_at": _iso(record.created_at),
                "updated_at": _iso(record.updated_at),
                "rows": rows,
                "probably_dead": dead,
                "last_heartbeat": None if beat is None else _iso(beat),
                **_deadline(deadline),
            }
        )
    return listed


def _liveness(
    record: RunRecord, leases: RunLeases | None, lease_ttl: float, now: float
) -> tuple[bool, float | None]:
    """Is a ``running`` run probably dead, and when was its last heartbeat?

    A process that runs a run renews the leases of its receipts and pages
    every ``lease_ttl / 2``. A run none of whose leases is live, and whose
    last sign of life (its last heartbeat: the latest lease renewal, or the
    attempt's start if later) is older than ``lease_ttl``, has no process
    renewing anything: it probably died (killed, or its machine lost).
    """
    if record.status != "running":
        return False, None
    beat = record.updated_at
    if leases is not None and leases.renewed_at is not None:
        beat = max(beat, leases.renewed_at)
    live = leases is not None and leases.expires_at is not None and leases.expires_at > now
    return not live and beat + lease_ttl <= now, beat


def _ago(moment: str, now: float) -> str:
    """``4m12s ago`` for an ISO time as :func:`_iso` wrote it."""
    seconds = max(0, int(now - datetime.fromisoformat(moment).timestamp()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m ago"
    return f"{minutes}m{seconds:02d}s ago" if minutes else f"{seconds}s ago"


def _deadline(deadline: float | None) -> dict[str, Any]:
    """A waiting run's next deadline, for ``runs list --json`` (and the table's epoch)."""
    if deadline is None:
        return {}
    return {"next_deadline": _iso(deadline), "next_deadline_at": deadline}


def _format_table(table: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _timestamp(moment: float | str) -> str:
    """Local time to the second, for tables; ``moment`` as stored, or as :func:`_iso` wrote it."""
    when = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    if isinstance(when, datetime):
        return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    return datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S")


def _iso(seconds: float) -> str:
    """ISO 8601 in UTC, for JSON: ``2026-11-29T13:05:30.123456+00:00``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _cmd_runs_show(args: argparse.Namespace, session: _Session) -> int:
    store = store_for(config_for(args, Path.cwd()).settings.store, must_exist=True)
    details = on_store(store, _run_details, args.run_id)
    if args.json:
        print(json.dumps(details, ensure_ascii=False, indent=2))
    else:
        print(_format_details(details))
    return EXIT_OK


async def _run_details(store: Store, run_id: str) -> dict[str, Any]:
    """One run of the open ``store``, as ``runs show --json`` prints it."""
    record = await store.get_run(run_id)
    if record is None:
        raise UsageError(f"no run {run_id!r} in {store.url} (`trioplay runs list` lists them)")
    datasets = {
        name: await store.count_rows(run_id, name) for name in await store.list_datasets(run_id)
    }
    receipts = await store.count_receipts(run_id)
    tree = await run_tree(store, record)
    waits = await store.list_waits(run_id)
    unclaimed = await store.list_events(run_id, unclaimed_only=True)
    try:
        stats = json.loads(record.stats_json) if record.stats_json else {}
    except ValueError:
        stats = {}
    return {
        "run_id": record.run_id,
        "play": record.play,
        "status": record.status,
        "attempts": record.attempt,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "input": json.loads(record.input_json),
        "error": record.error or None,
        "stats": stats if isinstance(stats, dict) else {},
        "datasets": {
            name: {"completed": counts.get("completed", 0), "failed": counts.get("failed", 0)}
            for name, counts in datasets.items()
        },
        "receipts": dict(sorted(receipts.items())),
        "parent_run_id": record.parent_run_id,
        "depth": record.depth,
        "tree": tree,
        "waits": [_wait_data(wait) for wait in waits],
        "unclaimed_events": [_event_data(event) for event in unclaimed],
    }


def _wait_data(wait: Any) -> dict[str, Any]:
    return {
        "name": wait.name,
        "key": json.loads(wait.key_json),
        "status": wait.status,
        "dataset": wait.dataset,
        "row": wait.row_key,
        "deadline": _iso(wait.deadline),
        "settled_at": _iso(wait.settled_at) if wait.settled_at is not None else None,
        "reason": wait.reason,
        "wait_key": wait.wait_key,
    }


def _event_data(event: Any) -> dict[str, Any]:
    return {
        "name": event.name,
        "key": json.loads(event.key_json),
        "event_id": event.event_id,
        "sent_at": _iso(event.sent_at),
        "reject": event.reject,
    }


def _format_details(details: dict[str, Any]) -> str:
    lines = [
        f"run:      {details['run_id']}",
        f"play:     {details['play']}",
        f"status:   {details['status']}",
        f"attempts: {details['attempts']}",
        f"created:  {_timestamp(details['created_at'])}",
        f"updated:  {_timestamp(details['updated_at'])}",
        f"input:    {canonical_json(details['input'])}",
    ]
    if details["error"]:
        lines.append(f"error:    {details['error']}")
    if details["stats"]:
        stats = details["stats"].items()
        shown = ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in stats)
        lines.append(f"stats (last attempt): {shown}")
    datasets = details["datasets"]
    lines.append("datasets:" if datasets else "datasets: none")
    for name, counts in datasets.items():
        lines.append(f"  {name}: {counts['completed']:,} completed, {counts['failed']:,} failed")
    waits = details["waits"]
    if waits:
        open_ = sum(1 for wait in waits if wait["status"] == "waiting")
        lines.append(f"waits: {len(waits):,} ({open_:,} open)")
        lines.extend(wait_line(wait) for wait in waits)
    unclaimed = details["unclaimed_events"]
    if unclaimed:
        lines.append(f"unclaimed events: {len(unclaimed):,}")
        lines.extend(event_line(event) for event in unclaimed)
    receipts = details["receipts"]
    if receipts:
        shown = ", ".join(f"{count:,} {status}" for status, count in receipts.items())
        lines.append(f"receipts: {shown}")
    else:
        lines.append("receipts: none")
    lines.extend(format_tree(details["tree"], details["run_id"]))
    return "\n".join(lines)
