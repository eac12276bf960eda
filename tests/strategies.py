"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)

json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def reorder(value: Any, permute: Any) -> Any:
    """The same JSON value with every object's keys inserted in another order."""
    if isinstance(value, dict):
        keys = permute(list(value))
        return {key: reorder(value[key], permute) for key in keys}
    if isinstance(value, list):
        return [reorder(item, permute) for item in value]
    return value
