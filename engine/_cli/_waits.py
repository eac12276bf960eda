"""``trioplay send-event``, ``trioplay resume`` and ``trioplay cancel``: the commands of
waiting runs (issue 22).

``send-event`` checks everything it is given before it opens the store (a
bad key or payload, an empty name: exit 2, nothing written), then prints
one line: delivered (to which dataset and row), buffered or duplicate.
``resume`` runs a run again (resume is rerun) with the play recorded with
it, or the one named. ``cancel`` ends a run for good: its open waits are
cancelled and later events refused.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import EventConflict, EventRefused, InvalidWait, UnknownRun
from ._common import EXIT_OK, UsageError
from ._options import (
    Commands,
    add_dump_options,
    add_run_outputs,
    add_store_option,
    check_run_id,
)

# The command helpers are imported by the handlers that use them, not above:
# the parser imports this module, and `--help` need not load them. send-event
# and cancel on SQLite import no Trio at all (._stores.on_store; docs/cli.md,
# "What a command loads").

if TYPE_CHECKING:
    import argparse

    from .._records import RunRecord, SendRequest, SendResult
    from .._store import Store
    from . import _Session

_REFUSED = (InvalidWait, UnknownRun, EventRefused, EventConflict)
"""What a store or the checks refuse an event with: exit 2, nothing written."""


def add_wait_commands(commands: Commands) -> None:
    """The commands ``send-event``, ``resume`` and ``cancel``."""
    send = commands.add(
        "send-event",
        _cmd_send_event,
        help="deliver an outside event to a waiting run",
        description=(
            "Send the event NAME with KEY (JSON: a string key is quoted, '\"r2\"') to run "
            "RUN, or to the one wait a --token names. The oldest open wait for it takes it; "
            "with none yet it is kept for the first wait to register. Prints one line: "
            "delivered (to which dataset and row), buffered, or duplicate. Then "
            "`trioplay resume RUN` lets the row go on."
        ),
    )
    send.add_argument("run_id", metavar="RUN", type=check_run_id)
    send.add_argument("name", metavar="NAME", nargs="?", help="the event's name")
    send.add_argument("key", metavar="KEY", nargs="?", help="the event's key, as JSON")
    body = send.add_mutually_exclusive_group()
    body.add_argument("--data", metavar="JSON", help="the payload, as JSON")
    body.add_argument("--data-file", metavar="FILE", help="read the payload (JSON) from FILE")
    body.add_argument(
        "--reject",
        metavar="REASON",
        help="reject instead of deliver: the waiting row fails with EventRejected(REASON)",
    )
    send.add_argument(
        "--id",
        metavar="ID",
        dest="event_id",
        help="the event's id: sending it again is a no-op (default: a fresh one)",
    )
    send.add_argument(
        "--token",
        metavar="TOKEN",
        help="address the one wait whose token this is (instead of NAME and KEY)",
    )
    add_store_option(send)

    resume = commands.add(
        "resume",
        _cmd_resume,
        help="resume a run: run it again with its play and input",
        description=(
            "Run RUN again (resume is a rerun): committed rows are skipped, receipts "
            "replayed, and rows that waited take the events delivered since. The play is "
            "the one recorded with the run, or FILE.py[:PLAY]; the input is the run's."
        ),
    )
    resume.add_argument("run_id", metavar="RUN", type=check_run_id)
    resume.add_argument(
        "play",
        metavar="FILE.py[:PLAY]",
        nargs="?",
        help="the play file (default: the one recorded with the run)",
    )
    add_store_option(resume)
    resume.add_argument(
        "--out",
        metavar="FILE",
        help="export the datasets the run wrote, as `trioplay run --out` does",
    )
    add_run_outputs(resume)
    add_dump_options(resume)

    cancel = commands.add(
        "cancel",
        _cmd_cancel,
        help="end a run for good: its waits are cancelled, later events refused",
        description=(
            "End RUN for good: its open waits become cancelled (a rerun is refused), "
            "its status cancelled, and events sent to it later are refused."
        ),
    )
    cancel.add_argument("run_id", metavar="RUN", type=check_run_id)
    add_store_option(cancel)


# -- send-event -------------------------------------------------------------------------
def _json_argument(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        hint = "; a string is quoted: '\"r2\"'" if what == "KEY" else ""
        raise UsageError(
            f"{what} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}){hint}"
        ) from None


def _payload(args: argparse.Namespace) -> Any:
    from .._wait_terms import MISSING

    if args.data is not None:
        return _json_argument(args.data, "--data")
    if args.data_file is not None:
        try:
            text = Path(args.data_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--data-file {args.data_file}: {exc}") from None
        return _json_argument(text, f"--data-file {args.data_file}")
    return MISSING


def _cmd_send_event(args: argparse.Namespace, session: _Session) -> int:
    from .._wait_terms import event_request
    from ._stores import config_for, on_store, store_for
    from ._waiting import sent_line

    if args.token is not None and (args.name is not None or args.key is not None):
        raise UsageError("--token addresses one wait: give it instead of NAME and KEY")
    if args.token is None and (args.name is None or args.key is None):
        raise UsageError("give NAME and KEY (the key as JSON), or --token TOKEN")
    key = _json_argument(args.key, "KEY") if args.key is not None else None
    data = _payload(args)
    settings = config_for(args, Path.cwd()).settings
    try:  # every check before the store is opened: bad input writes nothing
        request = event_request(
            args.run_id,
            args.name,
            key,
            data=data,
            reject=args.reject,
            event_id=args.event_id,
            token=args.token,
            limits=settings.limits,
        )
    except InvalidWait as exc:
        raise UsageError(_flag_named(exc)) from None
    store = store_for(settings.store, must_exist=True)
    try:
        result = on_store(store, _send, request)
    except _REFUSED as exc:
        raise UsageError(str(exc)) from None
    what = f"token {args.token[:6]}…" if args.token else f"event {args.name} {args.key}"
    print(sent_line(result, args.run_id, what))
    return EXIT_OK


_FLAGS = {"data": "--data", "reject": "--reject", "event_id": "--id", "token": "--token"}


def _flag_named(error: InvalidWait) -> str:
    """An ``InvalidWait`` in the command line's words (``--data`` for ``data``)."""
    flag = _FLAGS.get(error.field, error.field.upper())
    return f"{flag} {error.problem}"


async def _send(store: Store, request: SendRequest) -> SendResult:
    # The runtime's own path (Runtime.send_request) with no recorder to tell.
    from .._wait_terms import send_checked

    return await send_checked(store, request, now=time.time(), facts=None)


# -- resume ---------------------------------------------------------------------------
async def _run_record(store: Store, run_id: str) -> RunRecord:
    record = await store.get_run(run_id)
    if record is None:
        raise UsageError(f"no run {run_id!r} in {store.url} (`trioplay runs list` lists them)")
    return record


def _cmd_resume(args: argparse.Namespace, session: _Session) -> int:
    """``run`` again, with the play recorded with the run (or the one named) and its input."""
    from ._commands import _cmd_run
    from ._stores import config_for, on_store, store_for

    probe = config_for(args, Path.cwd()).settings
    record = on_store(store_for(probe.store, must_exist=True), _run_record, args.run_id)
    reference = args.play or getattr(record, "play_ref", None)
    if reference is None:
        raise UsageError(
            f"run {args.run_id!r} has no play recorded with it: name it, "
            f"`trioplay resume {args.run_id} FILE.py[:PLAY]`"
        )
    args.play, args.input, args.csv, args.json = reference, record.input_json, None, False
    return _cmd_run(args, session)


# -- cancel ---------------------------------------------------------------------------
async def _cancel(store: Store, run_id: str) -> tuple[int, list[str]]:
    """Cancel ``run_id`` and its waiting child plays: the open waits cancelled, and those runs."""
    from ._tree import waiting_below

    cancelled = await store.cancel_run(run_id, now=time.time())
    children = await waiting_below(store, run_id)
    for child in children:
        cancelled += await store.cancel_run(child, now=time.time())
    return cancelled, children


def _cmd_cancel(args: argparse.Namespace, session: _Session) -> int:
    from ._stores import config_for, on_store, store_for

    store = store_for(config_for(args, Path.cwd()).settings.store, must_exist=True)
    try:
        cancelled, children = on_store(store, _cancel, args.run_id)
    except UnknownRun as exc:
        raise UsageError(str(exc)) from None
    waits = "wait" if cancelled == 1 else "waits"
    also = f" and its waiting child plays {', '.join(children)}" if children else ""
    print(
        f"cancelled: run {args.run_id}{also}; {cancelled:,} open {waits} cancelled, "
        "later events are refused"
    )
    return EXIT_OK
