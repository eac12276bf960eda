"""Hypothesis properties: receipt keys, the writer's exactly-once commits, JSON parsing."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trioplay._cleanup import CleanupBudget
from trioplay._json import canonical_json, dumps, loads
from trioplay._keys import tool_receipt_key, wait_key
from trioplay._limits import Limits
from trioplay._map._pages import Page
from trioplay._map._plan import Plan
from trioplay._map._writer import TerminalRow, TerminalRowWriter
from trioplay._records import SheetRow, SheetWrite
from trioplay.stores.memory import MemoryStore

from .strategies import json_objects, json_values, reorder

if TYPE_CHECKING:
    from collections.abc import Iterator

PAGE = Page(0, Plan([]), None)  # type: ignore[arg-type]  # the writer needs only its lease
ROOT = Path(__file__).resolve().parents[1]


def key_of(value: Any) -> str:
    return tool_receipt_key("finder", canonical_json(value), "play")


@given(json_objects, st.randoms(use_true_random=False))
def test_receipt_keys_do_not_depend_on_key_order(value: dict[str, Any], rng: Any) -> None:
    def permute(keys: list[str]) -> list[str]:
        rng.shuffle(keys)
        return keys

    assert key_of(reorder(value, permute)) == key_of(value)


def test_receipt_key_is_pinned() -> None:
    # A changed key would make every stored receipt unreachable: never change it silently.
    value = {"domain": "acme.example", "opts": {"b": [1, 2.5, None], "a": "é"}}
    spelled = '["tool","finder","play"]{"domain":"acme.example","opts":{"a":"é","b":[1,2.5,null]}}'
    assert key_of(value) == hashlib.sha256(spelled.encode()).hexdigest()
    assert key_of(value) == "a3ea2e13fa905498fd67617a191f88639181f4d8105618450f7dd8df36a16407"


def test_wait_key_is_pinned() -> None:
    # A rerun meets its wait again only while this spelling holds (issue 22).
    spelled = r'["wait","run-1","leads","acme.example","approval","{\"doc\":1}",0]'
    key = wait_key("run-1", "leads", "acme.example", "approval", '{"doc":1}', 0)
    assert key == hashlib.sha256(spelled.encode()).hexdigest()
    assert key == "5512102b7c8b1a102537b6cb2d8d8a628dcc4a13e2cb1815d86a1aa73c105051"
    play_level = wait_key("run-1", None, None, "approval", "null", 2)
    assert play_level == "e69f633f3aa6acdc654155b01599a39309fce90d5d933e7edfd9ca855ac93879"


@pytest.fixture(scope="module")
def other_process() -> Iterator[subprocess.Popen[str]]:
    """A Python process of another hash seed: one JSON list of values in a line, their keys out.

    One for every example: the property is about another process, not about
    its start-up, which would cost more than the examples.
    """
    program = (
        "import json, sys\n"
        "from trioplay._keys import tool_receipt_key\n"
        "from trioplay._json import canonical_json\n"
        "for line in sys.stdin:\n"
        "    values = json.loads(line)\n"
        "    keys = [tool_receipt_key('finder', canonical_json(v), 'play') for v in values]\n"
        "    print(json.dumps(keys), flush=True)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    with subprocess.Popen(
        [sys.executable, "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    ) as proc:
        yield proc
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


@settings(max_examples=5)
@given(st.lists(json_objects, min_size=1, max_size=30))
def test_receipt_keys_are_stable_across_processes(
    other_process: subprocess.Popen[str], values: list[dict[str, Any]]
) -> None:
    assert other_process.stdin is not None
    assert other_process.stdout is not None
    other_process.stdin.write(json.dumps(values) + "\n")
    other_process.stdin.flush()
    out = json.loads(other_process.stdout.readline())
    assert out == [key_of(value) for value in values]


arrivals = st.lists(st.tuples(st.integers(1, 5_000), st.floats(0, 0.3)), min_size=1, max_size=60)


@given(
    arrivals,
    st.integers(100, 20_000),
    st.floats(0.001, 0.5),
    st.floats(0, 0.2),
)
def test_the_writer_commits_every_row_exactly_once(
    rows: list[tuple[int, float]], buffer_bytes: int, max_flush: float, write_delay: float
) -> None:
    committed: list[str] = []
    admitted_at: dict[str, float] = {}
    committed_at: dict[str, float] = {}

    class Commits:
        def committed(self, batch: list[TerminalRow]) -> None:
            for item in batch:
                committed.append(item.row.key)
                committed_at[item.row.key] = trio.current_time()

        def refused(self, items: list[tuple[TerminalRow, SheetWrite]]) -> None:
            raise AssertionError(f"nothing is fenced here: {items}")

        def unconfirmed_rows(self, count: int) -> None:
            assert count == 0, "every write is confirmed here"

    async def main() -> None:
        store = MemoryStore(write_delay=write_delay)
        limits = Limits(writer_buffer_bytes=buffer_bytes, writer_max_flush=max_flush)
        writer = TerminalRowWriter(
            store, "run", "ds", limits, cleanup=CleanupBudget(1.0), commits=Commits()
        )
        with trio.fail_after(10_000):
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)

                async def produce(index: int, size: int, delay: float) -> None:
                    await trio.sleep(delay)
                    key = str(index)
                    row = SheetRow(key, index, "completed", "{}")
                    await writer.admit(TerminalRow(row, size, PAGE, 0, None))
                    admitted_at[key] = trio.current_time()

                async with trio.open_nursery() as producers:
                    for index, (size, delay) in enumerate(rows):
                        producers.start_soon(produce, index, size, delay)
                writer.close_input()
        stored = await store.read_rows("run", "ds", limit=10_000)
        assert sorted(row.key for row in stored) == sorted(str(i) for i in range(len(rows)))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sorted(committed) == sorted(str(i) for i in range(len(rows)))
    assert len(committed) == len(set(committed))
    if write_delay == 0:
        # With an instant store a row waits at most max_flush after admission.
        for key, at in committed_at.items():
            assert at - admitted_at[key] <= max_flush + 1e-9


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from(["", " ", "\n", "x", "}", " 1"]), st.booleans())
def test_loads_matches_json_loads(value: Any, extra: str, before: bool) -> None:
    """The fast ``loads`` gives ``json.loads``'s value, or its error, for any text."""
    text = dumps(value)
    text = extra + text if before else text + extra
    error: str | None = None
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        error = str(exc)
    if error is not None:
        with pytest.raises(json.JSONDecodeError, match=f"^{re.escape(error)}$"):
            loads(text)
    else:
        assert loads(text) == expected


@pytest.mark.parametrize("encode", [canonical_json, dumps])
def test_a_value_that_contains_itself_fails_as_json_fails(encode: Any) -> None:
    # The shared encoder has no circular-reference markers; the error is json's all the same.
    looped: list[Any] = [1]
    looped.append({"again": looped})
    with pytest.raises(ValueError, match=r"^Circular reference detected$"):
        encode(looped)
    assert encode({"b": [1, 2.5], "a": None}) == json.dumps(  # and it still works after
        {"b": [1, 2.5], "a": None},
        separators=(",", ":"),
        sort_keys=encode is canonical_json,
    )


def test_threads_share_the_encoders() -> None:
    values = [{"n": i, "s": "é" * (i % 5), "l": list(range(i % 7))} for i in range(2_000)]
    expected = [canonical_json(value) for value in values]
    found: list[list[str]] = []

    def encode_all() -> None:
        found.append([canonical_json(value) for value in values])

    workers = [threading.Thread(target=encode_all) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert found == [expected] * 4
