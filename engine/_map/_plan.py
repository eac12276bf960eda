"""Which rows of a page run: keys, duplicates, and rows an earlier attempt finished."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._errors import PlayInputError
from .._json import dumps
from .._sources import row_origin

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from .._records import SheetEntry
    from .._store import SheetStore


@attrs.define(eq=False)
class Plan:
    """The rows of a page to run, as ``(position, key, data)``, and what was skipped.

    A row whose key field is missing or empty runs under a stand-in key from
    its position, and its error waits in :attr:`rejected` under that key:
    the runner takes it (:meth:`rejection`) and fails the row with it
    instead of running its columns.
    """

    rows: list[tuple[int, str, dict[str, Any]]]
    skipped: int = 0
    duplicates: int = 0
    # The sheet holds completed rows this attempt never saw (an earlier attempt's).
    foreign: bool = False
    rejected: dict[str, PlayInputError] = attrs.field(factory=dict)
    # Rows left to another owner when the page was lost here, which it ran.
    handed_over: int = 0

    def rejection(self, key: str) -> PlayInputError | None:
        """The error of the row under ``key`` if its key was bad (once), else ``None``."""
        return self.rejected.pop(key, None)


@attrs.define(eq=False)
class RowPlanner:
    """Keys rows and drops those that need not run.

    A key already completed in the sheet (an earlier attempt) is skipped; a
    key seen twice is skipped as a duplicate. Rows that failed in an earlier
    attempt run again. Keys stay *in flight* from planning until their row
    commits (:meth:`done`) or the page gives them back (:meth:`give_back`).

    A row whose key field is missing or empty gets a stand-in key from its
    position, and its error waits in :attr:`rejected` under that key: the
    runner fails the row with it instead of running its columns.
    """

    sheet: SheetStore
    run_id: str
    dataset: str
    key_field: str | None
    attempt: int
    in_flight: set[str] = attrs.field(factory=set)

    async def plan(
        self,
        chunk: list[Any],
        offset: int,
        *,
        again: bool = False,
        left: Collection[int] = (),
    ) -> Plan:
        """Key the rows of ``chunk`` and keep those that must run.

        ``again``: the page was planned before in this attempt and lost to
        another process; the rows this attempt committed then are counted
        already, and are neither run nor counted again. ``left``: the
        positions of the rows it left to that process; one the sheet holds
        (completed, or written in this attempt) is that process's work,
        counted as handed over (:attr:`Plan.handed_over`).
        """
        keyed: list[tuple[int, str, dict[str, Any]]] = []
        rejected: dict[str, PlayInputError] = {}
        for index, raw in enumerate(chunk):
            position = offset + index
            if not isinstance(raw, dict | Mapping):  # dict first: no ABC check
                raise PlayInputError(
                    f"dataset {self.dataset!r} row {position}: expected a mapping of fields, "
                    f"got {type(raw).__name__}"
                )
            keyed.append((position, self.key_of(raw, position, rejected), dict(raw)))
        # Keys in flight before the sheet read are duplicates; a key that
        # commits during the read is in the sheet by then.
        in_flight = self.in_flight
        busy = {key for _, key, _ in keyed if key in in_flight}
        entries: dict[str, SheetEntry] = await self.sheet.sheet_status(
            self.run_id, self.dataset, list({key for _, key, _ in keyed})
        )
        attempt = self.attempt
        plan = Plan([], rejected=rejected)
        for position, key, data in keyed:
            entry = entries.get(key)
            if key in busy or key in in_flight:
                plan.duplicates += 1
                plan.skipped += 1
            elif entry is not None and (entry.status == "completed" or entry.attempt == attempt):
                if position in left:
                    plan.handed_over += 1
                    continue
                if entry.attempt == attempt:
                    if again:
                        continue
                    plan.duplicates += 1
                else:
                    plan.foreign = True
                plan.skipped += 1
            else:
                in_flight.add(key)
                plan.rows.append((position, key, data))
        return plan

    def key_of(
        self, raw: Mapping[str, Any], position: int, rejected: dict[str, PlayInputError]
    ) -> str:
        """The row's key; a stand-in for a missing one, its error put in ``rejected``."""
        if self.key_field is None:
            return str(position)
        value = raw.get(self.key_field)
        if value is None or value == "":
            key = f"<no key: row {position}>"
            rejected[key] = self._key_error(raw, position)
            return key
        return value if isinstance(value, str) else dumps(value)

    def _key_error(self, raw: Mapping[str, Any], position: int) -> PlayInputError:
        field = self.key_field
        if field in raw:
            problem = f"the key field {field!r} is empty"
        else:
            fields = ", ".join(repr(name) for name in raw) or "none"
            problem = f"the key field {field!r} is missing; the row's fields: {fields}"
        origin = row_origin(raw)
        if origin is None:
            return PlayInputError(f"dataset {self.dataset!r} row {position}: {problem}")
        return PlayInputError(
            f"dataset {self.dataset!r}: {problem}", path=origin[0], line=origin[1], column=field
        )

    def give_back(self, plan: Plan) -> None:
        self.give_back_keys(key for _, key, _ in plan.rows)

    def give_back_keys(self, keys: Iterable[str]) -> None:
        """These keys are no longer in flight here (their page was given up or lost)."""
        in_flight = self.in_flight
        for key in keys:
            in_flight.discard(key)

    def done(self, key: str) -> None:
        self.in_flight.discard(key)
