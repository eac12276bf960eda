"""The shapes a map works with: a row, a resolver, the row-error policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from .._row_context import RowContext

Row: TypeAlias = Mapping[str, Any]
Resolver: TypeAlias = "Callable[[Row, RowContext], Any]"
OnRowError: TypeAlias = Literal["isolate", "fail"]
OnWaiting: TypeAlias = Literal["stop", "return"]
Columns: TypeAlias = "tuple[tuple[str, Resolver], ...]"
