"""The end-of-run summary as JSON (``run --json``, ``demo --json``).

:func:`summary_data` reads what :func:`._progress.format_summary` reads (the
run's outcome, this attempt's map counts, the sheets' counts, the outputs)
and says the same things, so that the text and the JSON never disagree:
``tests/test_cli_habits.py`` checks that every number of the text is in the
JSON. The keys:

- ``run_id``, ``play``, ``attempt``, ``status``, ``error`` (``None`` unless
  the run did not complete), ``elapsed`` (seconds, ``None`` if unknown);
- ``datasets``: one object per dataset, in the text's order: ``name``; for a
  dataset this attempt ran, ``completed``, ``failed``, ``skipped``,
  ``duplicates``, ``unconfirmed`` (rows of a write whose outcome is
  unknown), and ``waiting`` (rows suspended on an event wait) when there
  are any; ``handed_over`` and ``pages_handed_over`` (rows left to another
  owner that took their pages over, and how many pages) when there are
  any; ``sheet``, what its sheet holds over every attempt
  (``completed``, ``failed``), when the command could count it; ``failures``,
  why its failed rows failed: one object per error type, most frequent first,
  with ``type``, ``count`` and the first row's ``example`` message and ``key``
  (the text's line under the dataset, every type);
- ``provider_calls``, ``replayed``, ``failed_calls``: the text's three call
  lines; ``stats``: every counter of the attempt (``docs/events.md``,
  ``run.finished``);
- ``bugs``: the run's recorded failures that are probably bugs in a tool,
  by tool and type (``tool``, ``type``, ``count``, ``example``) with the
  ``retry`` command that forgets them (``None`` for ``memory://``);
- ``outputs``: ``path``, ``dataset``, ``rows`` of each file written;
  ``notes``: the lines said after the summary (an output with no row).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._failures import failures_data

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._failures import FailureKind
    from ._progress import MapProgress, OutputFile, RunOutcome


def summary_data(
    outcome: RunOutcome,
    maps: Sequence[MapProgress],
    *,
    sheets: Mapping[str, Mapping[str, int]] | None = None,
    outputs: Sequence[OutputFile] = (),
    notes: Sequence[str] = (),
    failures: Mapping[str, Sequence[FailureKind]] | None = None,
    bugs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The summary of one run as a JSON-able dict (see the module docstring)."""
    sheets = sheets or {}
    failures = failures or {}
    by_name = {state.name: state for state in maps}
    datasets = []
    for name in [*by_name, *(name for name in sheets if name not in by_name)]:
        entry: dict[str, Any] = {"name": name}
        state = by_name.get(name)
        if state is not None:
            entry.update(
                completed=state.completed,
                failed=state.failed,
                skipped=state.skipped,
                duplicates=state.duplicates,
                unconfirmed=state.unconfirmed,
            )
            if state.waiting:  # as the text: only when rows wait
                entry["waiting"] = state.waiting
            if state.handed_over:  # as the text: only when a page was lost
                entry["handed_over"] = state.handed_over
                entry["pages_handed_over"] = state.pages_handed_over
        sheet = sheets.get(name)
        if sheet is not None:
            entry["sheet"] = {
                "completed": sheet.get("completed", 0),
                "failed": sheet.get("failed", 0),
            }
        if failures.get(name):
            entry["failures"] = failures_data(failures[name])
        datasets.append(entry)
    stats = outcome.stats
    status = outcome.status or "unknown"
    return {
        "run_id": outcome.run_id,
        "play": outcome.play,
        "attempt": outcome.attempt,
        "status": status,
        "datasets": datasets,
        "provider_calls": stats.get("provider_calls", 0),
        "replayed": stats.get("replayed", 0),
        "failed_calls": stats.get("failed_calls", 0),
        "stats": dict(stats),
        "elapsed": outcome.elapsed,
        "outputs": [
            {"path": output.path, "dataset": output.dataset, "rows": output.rows}
            for output in outputs
        ],
        "bugs": [dict(bug) for bug in bugs],
        "notes": [note.strip() for note in notes],
        "error": outcome.error if outcome.error and status != "completed" else None,
    }
