"""The event schema: every type round-trips through JSON, and docs/events.md lists it all."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trioplay._trace import EVENT_TYPES, VERSION, Event, from_json, to_json
from trioplay._trace._records import declared, event_of, json_line

DOC = (Path(__file__).resolve().parent.parent / "docs" / "events.md").read_text(encoding="utf-8")

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_BY_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "str": st.text(),
    "int": st.integers(),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "bool": st.booleans(),
    "dict[str, Any]": st.dictionaries(st.text(), _json_values, max_size=4),
    "list[str]": st.lists(st.text(), max_size=3),
}


def _field(declared: str) -> st.SearchStrategy[Any]:
    if declared.endswith(" | None"):
        return st.none() | _BY_TYPE[declared.removesuffix(" | None")]
    return _BY_TYPE[declared]


def _events(kind: type[Event]) -> st.SearchStrategy[Event]:
    fields = attrs.fields(kind)
    return st.builds(kind, *[_field(declared(field)) for field in fields])


ALL_EVENTS = st.one_of([_events(kind) for kind in EVENT_TYPES.values()])


@given(ALL_EVENTS)
def test_every_event_round_trips_through_json_text(event: Event) -> None:
    data = to_json(event)
    assert (data["type"], data["v"]) == (event.TYPE, VERSION)
    assert list(data)[2:] == [field.name for field in attrs.fields(type(event))]
    assert from_json(json.loads(json.dumps(data))) == event


@given(ALL_EVENTS)
def test_the_jsonl_fast_path_writes_what_the_converter_does(event: Event) -> None:
    raw = (type(event), *attrs.astuple(event, recurse=False))
    line = json_line(raw)
    assert line.endswith("}\n")
    assert "\n" not in line[:-1]
    assert json.loads(line) == to_json(event)
    assert line == json.dumps(to_json(event), ensure_ascii=False, separators=(",", ":")) + "\n"


def test_a_value_not_of_its_declared_type_still_writes_valid_json() -> None:
    kind = EVENT_TYPES["loop.lag"]
    assert json.loads(json_line((kind, 1.0, 7, 5, "r"))) == {
        "type": "loop.lag",
        "v": VERSION,
        "at": 1.0,
        "lag_ms": 7,
        "threshold_ms": 5,
        "run": "r",
    }


def test_every_type_is_covered_once() -> None:
    assert len(EVENT_TYPES) == len(set(EVENT_TYPES.values())) >= 30
    assert EVENT_TYPES["loop.lag"].__attrs_attrs__[1].name == "lag_ms"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"type": "row.nope", "v": VERSION, "at": 0.0}, "not an event type"),
        (
            {"type": "loop.lag", "v": VERSION + 1, "at": 0.0, "lag_ms": 1.0, "threshold_ms": 1.0},
            "schema version",
        ),
        ({"type": "loop.lag", "v": VERSION, "at": 0.0, "lag_ms": 1.0}, "loop.lag"),
        (
            {
                "type": "loop.lag",
                "v": VERSION,
                "at": 0.0,
                "lag_ms": 1.0,
                "threshold_ms": 1.0,
                "extra": 1,
            },
            "loop.lag",
        ),
    ],
)
def test_what_is_not_an_event_is_refused(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        from_json(data)


def _documented() -> dict[str, list[str]]:
    """docs/events.md: each ``### `type` `` section's table of fields, by type."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in DOC.splitlines():
        heading = re.match(r"^### `([a-z_.]+)`", line)
        if heading:
            current = found[heading.group(1)] = []
        elif line.startswith("#"):
            current = None
        elif current is not None and line.startswith("| `"):
            current.append(re.match(r"\| `([a-z_]+)`", line).group(1))  # type: ignore[union-attr]
    return found


def test_docs_list_every_type_and_field_in_order() -> None:
    documented = _documented()
    assert sorted(documented) == sorted(EVENT_TYPES)
    for name, kind in EVENT_TYPES.items():
        fields = [field.name for field in attrs.fields(kind)][1:]  # `at` is every event's
        assert documented[name] == fields, name
    assert f"version **{VERSION}**" in DOC


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_time_is_written_to_the_microsecond_as_its_record_holds_it(at: float) -> None:
    # The sink writes a raw event's time rounded, as the record of it holds it.
    kind = EVENT_TYPES["row.committed"]
    raw = (kind, at, "leads", "k", "completed")
    record = event_of(raw)
    assert record.at == float(f"{at:.6f}")
    assert json_line(raw) == json.dumps(to_json(record), separators=(",", ":")) + "\n"
    assert from_json(json.loads(json_line(raw))) == record


def test_a_line_written_before_a_field_was_added_reads_with_its_default() -> None:
    # run.finished's stats and map.finished's total came later, in version 2.
    finished = from_json(
        {"type": "run.finished", "v": VERSION, "at": 2.0, "run": "r", "status": "completed"}
        | {"error": None}
    )
    assert finished == EVENT_TYPES["run.finished"](2.0, "r", "completed", None, {})
    counts = {"completed": 1, "failed": 0, "skipped": 0, "duplicates": 0, "unconfirmed": 0}
    line = {"type": "map.finished", "v": VERSION, "at": 1.0, "map": "m", "status": "failed"}
    assert from_json(line | counts) == EVENT_TYPES["map.finished"](
        1.0, "m", "failed", 1, 0, 0, 0, 0
    )
    # A field with no default is still required.
    with pytest.raises(ValueError, match="missing field 'total'"):
        from_json({"type": "map.progress", "v": VERSION, "at": 1.0, "map": "m"} | counts)
