"""What the command line says about waits: a waiting run's summary lines, a
wait or an event as one line, and the exact ``send-event`` command of a wait."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._json import canonical_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._errors import RunWaiting
    from .._records import SendResult, WaitRecord

SHOWN = 10  # waits listed by name; past that, a count


def utc(seconds: float) -> str:
    """A wall-clock instant as the command line shows it: ``2026-12-03 10:00:00 UTC``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _store_flag(store_url: str | None) -> str:
    return f" --store {shlex.quote(store_url)}" if store_url else ""


def send_command(wait: WaitRecord, store_url: str | None) -> str:
    """The command that delivers an event to ``wait`` (its payload left to fill in)."""
    return (
        f"trioplay send-event {shlex.quote(wait.run_id)} {shlex.quote(wait.name)} "
        f"{shlex.quote(wait.key_json)} --data JSON{_store_flag(store_url)}"
    )


def whose(wait: WaitRecord, run_id: str | None = None) -> str:
    """Whose wait it is: ``dataset leads, row r2``, or ``the play``; a wait of a
    child play of run ``run_id`` names the child run first (``child run X, the play``)."""
    where = "the play" if wait.dataset is None else f"dataset {wait.dataset}, row {wait.row_key}"
    if run_id is not None and wait.run_id != run_id:
        return f"child run {wait.run_id}, {where}"
    return where


def waiting_lines(waiting: RunWaiting, store_url: str | None) -> list[str]:
    """The lines after a waiting run's summary: its waits, how to deliver, how to resume."""
    waits = list(waiting.waits)
    open_ = [wait for wait in waits if wait.status == "waiting"]
    count = len(open_)
    events = "event" if count == 1 else "events"
    head = f"waiting: run {waiting.run_id} waits for {count} {events}"
    if waiting.next_deadline is not None:
        head += f" (the next deadline is {utc(waiting.next_deadline)})"
    lines = [head + "; deliver one with:"]
    for wait in open_[:SHOWN]:
        lines.append(f"  {send_command(wait, store_url)}   # {whose(wait, waiting.run_id)}")
    if count > SHOWN:
        lines.append(f"  ... and {count - SHOWN:,} more (`trioplay runs show {waiting.run_id}`)")
    settled = len(waits) - count
    if settled:
        lines.append(f"  ({settled:,} more settled since; a resume takes them)")
    resume = f"trioplay resume {shlex.quote(waiting.run_id)}{_store_flag(store_url)}"
    lines.append(f"then resume it: {resume}")
    return lines


def waits_data(waiting: RunWaiting, store_url: str | None) -> dict[str, Any]:
    """A waiting run for ``--json``: the next deadline, and each open wait with its command."""
    return {
        "next_deadline": (
            datetime.fromtimestamp(waiting.next_deadline, UTC).isoformat()
            if waiting.next_deadline is not None
            else None
        ),
        "waits": [
            {
                "run": wait.run_id,  # the run's own, or a child play's (send the event there)
                "name": wait.name,
                "key": json.loads(wait.key_json),
                "dataset": wait.dataset,
                "row": wait.row_key,
                "deadline": datetime.fromtimestamp(wait.deadline, UTC).isoformat(),
                "command": send_command(wait, store_url),
            }
            for wait in waiting.waits
            if wait.status == "waiting"
        ],
    }


def sent_line(result: SendResult, run_id: str, what: str) -> str:
    """``send-event``'s one line: delivered (to which row), buffered, or duplicate."""
    if result.outcome == "delivered":
        where = f"dataset {result.dataset}, row {result.row_key}" if result.dataset else "the play"
        return (
            f"delivered: {what} to run {run_id}, {where} (event id {result.event_id}); "
            f"`trioplay resume {shlex.quote(run_id)}` lets it go on"
        )
    if result.outcome == "buffered":
        return (
            f"buffered: {what} for run {run_id} (event id {result.event_id}): no wait for it "
            "yet; the first one to register takes it"
        )
    return f"duplicate: event id {result.event_id} of run {run_id} was sent before; nothing changed"


def wait_line(wait: Mapping[str, Any]) -> str:
    """A wait as ``runs show`` lists it, from its ``runs show --json`` form."""
    where = (
        "the play" if wait["dataset"] is None else f"dataset {wait['dataset']}, row {wait['row']}"
    )
    text = f"  {wait['name']} {canonical_json(wait['key'])}: {wait['status']} ({where})"
    if wait["status"] == "waiting":
        text += f", deadline {utc(datetime.fromisoformat(wait['deadline']).timestamp())}"
    elif wait["status"] == "rejected" and wait["reason"]:
        text += f": {wait['reason']}"
    return text


def event_line(event: Mapping[str, Any]) -> str:
    """An unclaimed event as ``runs show`` lists it, from its ``runs show --json`` form."""
    what = f"reject: {event['reject']}" if event["reject"] is not None else "data"
    sent = utc(datetime.fromisoformat(event["sent_at"]).timestamp())
    name, key = event["name"], canonical_json(event["key"])
    return f"  {name} {key}: {what}, sent {sent} (id {event['event_id']})"
