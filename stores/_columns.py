"""The columns of the SQL stores' tables, named once, from the records they hold.

A table's columns are its record's fields in the record's order (``attrs``
fields), so a row selected with these columns builds its record by position
(``Receipt(*row)``), and a record becomes the row to write with one C-level
call (``receipt_values(receipt)``). Both SQL stores use these; column types
and constraints stay in each store's migrations.
"""

from __future__ import annotations

from operator import attrgetter

import attrs

from trioplay import EventRecord, Receipt, RunRecord, SheetRow, WaitRecord

from ._rules import PageRecord


def _fields(record: type[attrs.AttrsInstance]) -> tuple[str, ...]:
    return tuple(field.name for field in attrs.fields(record))


RUN_FIELDS = _fields(RunRecord)
RECEIPT_FIELDS = _fields(Receipt)
SHEET_FIELDS = _fields(SheetRow)
# The columns of a page after its key (run_id, dataset, page_offset).
PAGE_FIELDS = _fields(PageRecord)
WAIT_FIELDS = _fields(WaitRecord)
EVENT_FIELDS = _fields(EventRecord)

RUN_COLUMNS = ", ".join(RUN_FIELDS)
RECEIPT_COLUMNS = ", ".join(RECEIPT_FIELDS)
SHEET_COLUMNS = ", ".join(SHEET_FIELDS)
PAGE_COLUMNS = ", ".join(PAGE_FIELDS)
WAIT_COLUMNS = ", ".join(WAIT_FIELDS)
EVENT_COLUMNS = ", ".join(EVENT_FIELDS)

# A record as the tuple of its column values, in column order.
receipt_values = attrgetter(*RECEIPT_FIELDS)
page_values = attrgetter(*PAGE_FIELDS)
run_values = attrgetter(*RUN_FIELDS)
wait_values = attrgetter(*WAIT_FIELDS)
event_values = attrgetter(*EVENT_FIELDS)
