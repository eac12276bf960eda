"""``trioplay retry RUN [--dataset D] [--tool T] [--error TYPE]``, and the summary's bug notes.

A recorded failure is replayed on every rerun. When it was a bug in a tool
(a failure type no provider reports: ``TypeError``, ``KeyError``, ...), the
run summary says so and prints the ``trioplay retry`` command that forgets
it; once the code is fixed, that command and a rerun call those calls again
(``engine/_retry.py`` has the library form, :func:`trioplay.retry_failures`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ._common import EXIT_OK, UsageError
from ._options import Commands, add_store_option, check_run_id

if TYPE_CHECKING:
    import argparse

    from .._retry import RecordedFailure
    from .._store import Store
    from . import _Session


def add_retry_command(commands: Commands) -> None:
    """The ``retry`` command."""
    retry = commands.add(
        "retry",
        _cmd_retry,
        help="forget a run's recorded failures, so that its next run calls them again",
        description=(
            "A failed tool call is recorded and replayed on every rerun, so that a "
            "provider's failure is never paid for twice. When it was a bug in the tool, "
            "fix the code, forget the failures with this command, and run again: each "
            "forgotten call is made once more, and every other receipt still replays. "
            "Each option narrows what is forgotten; none forgets every recorded failure "
            "of the run."
        ),
    )
    retry.add_argument("run_id", metavar="RUN", type=check_run_id)
    retry.add_argument("--dataset", metavar="D", help="only the failures of rows of dataset D")
    retry.add_argument("--tool", metavar="T", help="only the failures of tool T")
    retry.add_argument(
        "--error",
        metavar="TYPE",
        help="only failures of this type, as the summary names it (e.g. TypeError)",
    )
    add_store_option(retry)


def _cmd_retry(args: argparse.Namespace, session: _Session) -> int:
    import trio  # here, not above: the parser imports this module (docs/cli.md)

    from ._failures import group
    from ._stores import config_for, store_for

    store = store_for(config_for(args, Path.cwd()).settings.store, must_exist=True)
    forgotten = trio.run(_retry, store, args)
    kinds = ", ".join(kind.shown() for kind in group(forgotten))
    calls = "call" if len(forgotten) == 1 else "calls"
    print(
        f"run {args.run_id}: forgot {len(forgotten):,} recorded failed {calls} ({kinds}); "
        "the next run of it calls them again"
    )
    return EXIT_OK


async def _retry(store: Store, args: argparse.Namespace) -> list[RecordedFailure]:
    from .._retry import recorded_failures, retry_failures
    from .._store import FailureStore
    from ._failures import group
    from ._stores import opened

    async with opened(store):
        if await store.get_run(args.run_id) is None:
            raise UsageError(
                f"no run {args.run_id!r} in {store.url} (`trioplay runs list` lists them)"
            )
        if not isinstance(store, FailureStore):
            raise UsageError(f"the store {store.url} cannot forget recorded failures")
        filters = {"dataset": args.dataset, "tool": args.tool, "error": args.error}
        forgotten = await retry_failures(store, args.run_id, **filters)
        if forgotten:
            return forgotten
        recorded = await recorded_failures(store, args.run_id)
    if not recorded:
        raise UsageError(f"run {args.run_id!r} has no recorded failure to forget")
    asked = " ".join(f"--{name} {value}" for name, value in filters.items() if value is not None)
    listed = "; ".join(kind.shown(with_dataset=True) for kind in group(recorded))
    raise UsageError(
        f"no recorded failure of run {args.run_id!r} matches {asked}; its recorded "
        f"failures: {listed}"
    )
