"""Resolving one row: its columns computed, and what became of it (a sheet row, or a wait).

:class:`RowResolver` runs a row's resolvers in the row's own task with its
:class:`RowContext` and phase, and turns what they did into the sheet row
to write (completed, or failed with its error) or a suspension on an event
wait; the map runner (``_runner``) hands the result on. Which errors fail
only the row and which stop the map is decided here: ``_FATAL`` ones (that
every other row would hit too) go up; a ``BaseException`` of the play's
code is a :class:`PlayAborted` (``_aborts``).
"""

from __future__ import annotations

import inspect
import types
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs

from .._aborts import aborted
from .._errors import (
    LeaseLost,
    MapMemoryLimitError,
    PersistenceLatchTripped,
    PlayAborted,
    PlayDefinitionError,
    PlayInputError,
    RowOutputNotJsonSerializable,
    RunEnded,
    StoreError,
    format_error,
)
from .._groups import note_counted
from .._json import dumps
from .._phase import enter_row, leave_row
from .._records import SheetRow
from .._row_context import RowContext
from .._waits import suspension

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._limits import Limits
    from .._run import RunServices
    from ._admission import RowAdmission
    from ._pages import Page, PageLeases
    from ._report import MapReport
    from ._stall import MapStallObserver
    from ._types import Columns

# Errors that no row can isolate: every other row would hit them too.
_FATAL = (PlayDefinitionError, PersistenceLatchTripped, StoreError, PlayInputError, RunEnded)


@attrs.define(eq=False)
class RowResolver:
    """The columns of one map, computed for one row at a time (see the module docstring)."""

    _services: RunServices
    _name: str
    _columns: Columns
    _admission: RowAdmission
    _pages: PageLeases
    _report: MapReport
    _limits: Limits = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limits = self._services.run.limits

    async def resolve(
        self, page: Page, position: int, key: str, data: dict[str, Any]
    ) -> tuple[SheetRow | None, BaseException | None]:
        attempt = self._services.run.attempt
        if page.plan.rejected:  # rows whose key field is missing or empty
            error = page.plan.rejection(key)
            if error is not None:  # the row fails, its columns never run
                return _failed_row(position, key, data, error, attempt), error
        observer = page.observer
        observer_token = observer.resolver_started(key)
        if self._report.trace is not None:
            self._report.row_resolver_started(key)
        rc = RowContext(
            self._services, self._name, key, _Parking(self._admission, observer, observer_token)
        )
        # The row's phase, for the governor and fetch that run its calls in this task.
        row_phase = enter_row(observer.row_phase(observer_token))
        column = ""
        resolver: Any = None
        try:
            for column, resolver in self._columns:
                value = resolver(data, rc)
                if type(value) is types.CoroutineType or inspect.isawaitable(value):
                    value = await value
                data[column] = value
            try:
                text = dumps(data)
            except (TypeError, ValueError, RecursionError):
                raise _not_serialisable(data, self._columns) from None
            if len(text) > (limit := self._limits.active_rows_budget_bytes):
                raise MapMemoryLimitError(
                    f"the row is {len(text):,} bytes as JSON, more than "
                    f"active_rows_budget_bytes={limit:,}"
                )
        except _FATAL as exc:
            where = f"trioplay: dataset {self._name!r}, row {key!r}, column {column!r}"
            note_counted(exc, "rows", where)
            raise
        except MapMemoryLimitError as exc:
            # The computed columns made the row too big: keep its input fields.
            computed = {name for name, _ in self._columns}
            inputs = {name: value for name, value in data.items() if name not in computed}
            return _failed_row(position, key, inputs, exc, attempt), exc
        except Exception as exc:
            if isinstance(exc, LeaseLost):
                await self._pages.check(page)  # the page too? then the row is cancelled
            if isinstance(exc, PlayAborted):  # a tool's: say whose row it was
                note_counted(exc, "rows", f"trioplay: {_whose(self._name, key, column, resolver)}")
            return _failed_row(position, key, data, exc, attempt), exc
        except BaseException as exc:
            # A wait with no event yet (RowSuspended, a BaseException so that
            # no `except Exception` of the resolver swallows it): the row waits.
            suspended = suspension(exc)
            if suspended is not None:
                return None, suspended
            failure = aborted(exc, _whose(self._name, key, column, resolver))
            if failure is None:
                raise  # a cancellation, or a real Ctrl-C
            return _failed_row(position, key, data, failure, attempt), failure
        finally:
            leave_row(row_phase)
            observer.resolver_finished(observer_token)
        return SheetRow(key, position, "completed", text, None, attempt), None


def _whose(dataset: str, key: str, column: str, resolver: object) -> str:
    """The row and the resolver a failure belongs to, as a :class:`PlayAborted` names them."""
    name = getattr(resolver, "__qualname__", None) or type(resolver).__name__
    return f"dataset {dataset!r}, row {key!r}, resolver {name} (column {column!r})"


class _Parking:
    """A row lingering for an outside event (``wait_for_event(linger=...)``): while it
    does, it lends its row slot and is no unresolved resolver for the stall line."""

    __slots__ = ("_admission", "_observer", "_token")

    def __init__(self, admission: RowAdmission, observer: MapStallObserver, token: int) -> None:
        self._admission = admission
        self._observer = observer
        self._token = token

    @contextmanager
    def parked(self) -> Iterator[None]:
        phase = self._observer.resolver_parked(self._token)
        self._admission.lend_slot()
        try:
            yield
        finally:
            self._admission.take_back_slot()
            self._observer.resolver_unparked(self._token, phase)


def _failed_row(
    position: int, key: str, data: dict[str, Any], exc: Exception, attempt: int
) -> SheetRow:
    """The sheet row of a failed row: its error, and its fields that are JSON."""
    kept: dict[str, Any] = {}
    for name, value in data.items():
        try:
            dumps(value)
        except (TypeError, ValueError, RecursionError):
            continue
        kept[name] = value
    return SheetRow(key, position, "failed", dumps(kept), format_error(exc), attempt)


def _not_serialisable(data: dict[str, Any], columns: Columns) -> RowOutputNotJsonSerializable:
    for name, value in data.items():
        try:
            dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:
            kind = "column" if any(name == column for column, _ in columns) else "input field"
            return RowOutputNotJsonSerializable(
                f"{kind} {name!r} holds a {type(value).__name__} that cannot be stored "
                f"as JSON ({exc}); return str, int, float, bool, None, list or dict"
            )
    return RowOutputNotJsonSerializable("the row cannot be stored as JSON")
