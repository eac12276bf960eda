"""What writing events costs: 100k records to JSON Lines, and 100k ``Recorder.add`` calls.

Run with the Python of each tree to compare, in one command, so both share
the machine's load (docs/architecture.md, "The event stream")::

    for tree in ../before .; do (cd $tree && .venv/bin/python benchmarks/events_cost.py); done

Each figure is the best of five rounds. Where the tree still has the cattrs
converter of the events (before issue 21), the same records through it are
timed too: the serialiser that was dropped.
"""

from __future__ import annotations

import json
import os
import timeit
from typing import Any

import trio

import trioplay
from trioplay._trace import Recorder
from trioplay._trace import _records as r

N = 100_000
RAWS: list[tuple[Any, ...]] = [
    (r.RowCommitted, 12.5 + i * 1e-3, "leads", f"row-{i}.example", "completed")
    if i % 2
    else (r.CallQueued, 12.5 + i * 1e-3, f"key-{i}", "tool", "enrich", "prov", f"row-{i}.example")
    for i in range(N)
]
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _best(fn: Any) -> float:
    """Milliseconds, the best of five rounds."""
    return min(timeit.repeat(fn, number=1, repeat=5)) * 1e3


def _adds() -> None:
    async def main() -> None:
        recorder = Recorder(batch=N + 1)  # nothing handed to a sink: the add alone
        recorder.bind_clock()
        add = recorder.add
        for raw in RAWS:
            add(raw[0], *raw[2:])

    trio.run(main)


def main() -> None:
    print(f"{os.path.dirname(trioplay.__file__)}:")
    print(f"  generated line writer (json_lines): {_best(lambda: r.json_lines(RAWS)):6.0f} ms")
    converter = getattr(r, "converter", None)
    if converter is not None:

        def cattrs() -> str:
            return "".join([_encode(converter.unstructure(r.event_of(x))) + "\n" for x in RAWS])

        print(f"  cattrs unstructure + json encode:   {_best(cattrs):6.0f} ms")
    print(f"  Recorder.add, Trio's system clock:  {_best(_adds):6.0f} ms")


if __name__ == "__main__":
    main()
