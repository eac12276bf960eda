"""Summarise a py-spy profile of a benchmark: where the Trio thread's time goes.

py-spy samples a running process from outside, so it barely slows it down
(cProfile and pyinstrument hook every call and make this workload three
times slower, which distorts the picture). It is not a project dependency;
install it into the venv for profiling only::

    .venv/bin/pip install py-spy
    .venv/bin/py-spy record --nonblocking -r 200 -i -t -F -f raw -o /tmp/sqlite.txt -- \\
        .venv/bin/python -m benchmarks throughput --only sqlite --rows 100000 --rounds 1 --no-save
    .venv/bin/python -m benchmarks.spy /tmp/sqlite.txt
    .venv/bin/python -m benchmarks.spy /tmp/sqlite.txt --under Executor.execute

``-i`` keeps idle samples (a Trio thread blocked in ``epoll`` waiting for
work is time the engine did not use), ``-t`` separates threads (the SQLite
store's worker thread is reported apart), ``-f raw`` writes collapsed
stacks, one ``frame;frame;... count`` line per distinct stack.

The report has four parts, in percent of the main thread's samples: by
kind of work (idle, Trio's scheduler and primitives, trioplay's own code,
JSON, attrs constructors, ...), by the task the sample was in (the
coroutine a task was spawned with), the functions with the most time
including their callees, and how busy the SQLite worker thread was.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

_LOCATION = re.compile(r" \((.*?)(?::\d+)?\)$")
_SCHEDULER = (
    "Runner.",
    "Task.",
    "Deadlines.",
    "WakeupSocketpair.",
    "EntryQueue.",
    "Nursery.",
    "CancelStatus.",
    "CancelScope.",
)


def _stacks(path: str) -> Iterator[tuple[str, list[tuple[str, str]], int]]:
    """(thread, [(function, file), ...] outermost first, samples) per line."""
    with open(path) as lines:
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            thread, *frames = stack.split(";")
            parsed = []
            for frame in frames:
                match = _LOCATION.search(frame)
                name = frame[: match.start()] if match else frame
                parsed.append((name, match.group(1) if match else ""))
            yield thread, parsed, int(count)


def _is_main(thread: str, frames: list[tuple[str, str]]) -> bool:
    return (bool(frames) and frames[0][0] == "_run_module_as_main") or "MainThread" in thread


def _outside(names: list[str]) -> bool:
    # py-spy sometimes gets only the inner part of a stack (the task's
    # coroutine frames): without the root, it is a sample inside the run.
    return names[0] == "_run_module_as_main" and "unrolled_run" not in names


def _kind(frames: list[tuple[str, str]]) -> str:
    names = [name for name, _ in frames]
    if not names:
        return "no stack (py-spy sampling error)"
    if any(name.startswith("EpollIOManager.get_events") for name in names):
        return "idle: epoll wait, no task runnable"
    if _outside(names):
        return "outside the trio.run (start-up, imports, temp dir)"
    name, where = frames[-1]
    if "json/" in where:
        return "json encode/decode"
    if "attrs generated" in where or "attr/_make" in where:
        return "attrs-generated __init__ (records, Trio internals)"
    if name == "unrolled_run":
        return "Trio scheduler loop (unrolled_run itself)"
    if where.startswith(("trio/", "outcome/", "contextlib", "collections/")):
        return "Trio machinery (tasks, cancel scopes, events, limiters, reschedule)"
    if where.startswith("trioplay/stores/"):
        return "store code on the Trio thread"
    if where.startswith("trioplay/"):
        return "trioplay engine code (own lines)"
    if where.startswith("benchmarks/"):
        return "benchmark resolvers and tools"
    return f"other: {name} ({where})"


def _task(frames: list[tuple[str, str]]) -> str:
    names = [name for name, _ in frames]
    if not names:
        return "no stack (py-spy sampling error)"
    if any(name.startswith("EpollIOManager.get_events") for name in names):
        return "idle: epoll wait"
    if _outside(names):
        return "outside the trio.run"
    rest = names[names.index("unrolled_run") + 1 :] if "unrolled_run" in names else names
    if not rest:
        return "Trio scheduler loop"
    for name in rest:
        if name.startswith(("Context.run", "coroutine_or_error")):
            continue
        if name.startswith(_SCHEDULER) and name is rest[0]:
            return f"Trio scheduler: {name}"
        return f"task {name}"
    return f"task {rest[0]}"


def summarise(path: str, *, top: int = 25, under: str | None = None) -> str:
    kinds: Counter[str] = Counter()
    tasks: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    children: Counter[str] = Counter()
    worker: Counter[str] = Counter()
    main_total = 0
    for thread, frames, count in _stacks(path):
        if "trioplay-sqlite" in thread:
            busy = any(name == "Worker._execute" for name, _ in frames)
            worker["running a job" if busy else "waiting for a job"] += count
            continue
        if not _is_main(thread, frames):
            continue
        main_total += count
        kinds[_kind(frames)] += count
        tasks[_task(frames)] += count
        for name in {name for name, _ in frames}:  # once per sample, even if recursive
            inclusive[name] += count
        names = [name for name, _ in frames]
        if under is not None and under in names:
            index = len(names) - 1 - names[::-1].index(under)
            children[names[index + 1] if index + 1 < len(names) else "[own lines]"] += count
    if not main_total:
        return f"{path}: no samples of the main thread"

    def table(title: str, counter: Counter[str], total: int) -> list[str]:
        lines = [f"\n{title}"]
        lines += [f"{100 * n / total:6.1f}%  {key}" for key, n in counter.most_common(top)]
        return lines

    out = [f"{path}: {main_total} samples of the main (Trio) thread"]
    out += table("by kind of work (leaf frame):", kinds, main_total)
    out += table("by task (the coroutine the sample's task was spawned with):", tasks, main_total)
    out += table("inclusive (with callees):", inclusive, main_total)
    if under is not None:
        out += table(f"directly under {under} (inclusive):", children, main_total)
    if worker:
        total = sum(worker.values())
        out += table(f"SQLite worker thread ({total} samples):", worker, total)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spy", description=__doc__)
    parser.add_argument("profile", help="a py-spy record -f raw output file")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--under", help="also break down the callees of this function")
    args = parser.parse_args(argv)
    print(summarise(args.profile, top=args.top, under=args.under))


if __name__ == "__main__":
    main()
