"""The tree of child plays a run belongs to, as ``trioplay runs show`` draws it.

A run's record names its parent, its root and its depth (issue 23); the tree
is every run of the same root, read from the store's run list (the newest
``TREE_RUNS``), each under its parent in the order the runs were created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    if len(members) < 2:
        return []
    children: dict[str | None, list[RunRecord]] = {}
    for run in sorted(members, key=lambda run: (run.created_at, run.run_id)):
        parent = None if run.run_id == root else run.parent_run_id
        children.setdefault(parent, []).append(run)
    tree: list[dict[str, Any]] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        run = stack.pop()
        tree.append(
            {"run_id": run.run_id, "play": run.play, "status": run.status, "depth": run.depth}
        )
        stack.extend(reversed(children.get(run.run_id, [])))
    return tree


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


async def waiting_below(store: Store, run_id: str) -> list[str]:
    """The runs below ``run_id`` (its child plays, theirs, ...) that are ``waiting``.

    A caller waits while its child does: cancelling the caller for good
    cancels these too (``trioplay cancel``), or their waits would stay open.
    """
    below: dict[str, list[RunRecord]] = {}
    for run in await store.list_runs(limit=TREE_RUNS):
        if run.parent_run_id is not None:
            below.setdefault(run.parent_run_id, []).append(run)
    found: list[str] = []
    stack = list(below.get(run_id, []))
    while stack:
        run = stack.pop()
        if run.status == "waiting":
            found.append(run.run_id)
        stack.extend(below.get(run.run_id, []))
    return found
