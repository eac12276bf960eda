"""The tree of child plays a run belongs to, as ``trioplay runs show`` draws it.

A run's record names its parent, its root and its depth (issue 23); the tree
is every run of the same root, read from the store's run list (the newest
``TREE_RUNS``), each under its parent in the order the runs were created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trioplay import RunRecord, Store

TREE_RUNS = 10_000
"""How many of the store's newest runs are searched for the tree's members."""


async def run_tree(store: Store, record: RunRecord) -> list[dict[str, Any]]:
    """The runs of ``record``'s tree, root first, each child after its parent (depth first).

    Empty for a run that is alone in its tree (no parent, no child).
    """
    root = record.root_run_id or record.run_id
    members = [
        run
        for run in await store.list_runs(limit=TREE_RUNS)
        if run.run_id == root or run.root_run_id == root
    ]
    tops = [run for run in members if run.run_id == root]
    if len(members) < 2 or not tops:
        return []
    return [
        {"run_id": run.run_id, "play": run.play, "status": run.status, "depth": run.depth}
        for run in (tops[0], *_below(members, root))
    ]


async def waiting_below(store: Store, run_id: str) -> list[str]:
    """The runs below ``run_id`` (its child plays, theirs, ...) that are ``waiting``.

    A caller waits while its child does: cancelling the caller for good
    cancels these too (``trioplay cancel``), or their waits would stay open.
    """
    runs = await store.list_runs(limit=TREE_RUNS)
    return [run.run_id for run in _below(runs, run_id) if run.status == "waiting"]


def _below(runs: list[RunRecord], top: str) -> Iterator[RunRecord]:
    """The runs below ``top`` among ``runs``, each after its parent (depth first), children
    in the order they were created."""
    children: dict[str, list[RunRecord]] = {}
    for run in sorted(runs, key=lambda run: (run.created_at, run.run_id)):
        if run.parent_run_id is not None:
            children.setdefault(run.parent_run_id, []).append(run)
    stack = list(reversed(children.get(top, [])))
    while stack:
        run = stack.pop()
        yield run
        stack.extend(reversed(children.get(run.run_id, [])))


def format_tree(tree: list[dict[str, Any]], run_id: str) -> list[str]:
    """``tree:`` and one indented line per run; this run marked ``<- this run``."""
    if not tree:
        return []
    lines = ["tree:"]
    for run in tree:
        mark = "  <- this run" if run["run_id"] == run_id else ""
        indent = "  " * (run["depth"] + 1)
        lines.append(f"{indent}{run['run_id']} ({run['play']}, {run['status']}){mark}")
    return lines
