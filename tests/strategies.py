"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

import trioplay

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


# -- governor workloads (tests/test_governor_property.py) ---------------------


@attrs.frozen
class ProviderSpec:
    """A provider as the governor sees it; one without limits queues without a task."""

    rate: trioplay.Rate | None = None
    concurrency: int | None = None

    @property
    def queues(self) -> bool:
        return self.rate is None and self.concurrency is None


@attrs.frozen
class CallSpec:
    """One call: its provider, when it comes, how long it runs (``None``: it hangs),
    and whether it is answered "rate limited, retry after" so many seconds."""

    provider: int
    arrival: float
    latency: float | None
    retry_after: float | None


@attrs.frozen
class GovernorWorkload:
    cap: int
    share: float
    providers: tuple[ProviderSpec, ...]
    calls: tuple[CallSpec, ...]
    horizon: float


rates = st.builds(
    trioplay.Rate,
    st.integers(1, 5),
    per=st.sampled_from([0.5, 1.0, 2.0]),
    burst=st.none() | st.integers(1, 3),
)


@st.composite
def governor_workloads(draw: st.DrawFn) -> GovernorWorkload:
    providers = draw(
        st.lists(
            st.builds(
                ProviderSpec,
                rate=st.none() | rates,
                concurrency=st.none() | st.integers(1, 4),
            ),
            min_size=1,
            max_size=4,
        )
    )
    calls = draw(
        st.lists(
            st.builds(
                CallSpec,
                provider=st.integers(0, len(providers) - 1),
                arrival=st.floats(0, 5),
                # Mostly answered, some hang (one branch in three).
                latency=st.floats(0, 2) | st.floats(0, 0.1) | st.none(),
                retry_after=st.sampled_from([None, None, None, None, 0.5, 3.0]),
            ),
            max_size=60,
        )
    )
    return GovernorWorkload(
        cap=draw(st.integers(1, 8)),
        share=draw(st.sampled_from([0.25, 0.5, 1.0])),
        providers=tuple(providers),
        calls=tuple(calls),
        horizon=30.0,
    )
