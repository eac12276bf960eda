"""The typed event stream: the records of ``docs/events.md``, the recorder and its sinks.

::

    from trioplay.events import JsonlSink, MapStall, Recorder, read_events

    with open("events.jsonl", "w") as file:
        recorder = Recorder(JsonlSink(file))
        async with trioplay.open_runtime(store="memory://", recorder=recorder) as rt:
            await rt.run(play, {})
        recorder.close()
    stalls = [e for e in read_events("events.jsonl") if isinstance(e, MapStall)]

Every record is a frozen attrs class named after its type (``map.stall`` is
:class:`MapStall`; ``lease.lost`` is this module's :class:`LeaseLost`, not the
error ``trioplay.LeaseLost``). A scenario's ``ScenarioResult.events`` are these
records too. This is the public face of ``trioplay._trace``.
"""

from __future__ import annotations

from ._trace._chrome import ChromeTraceSink as ChromeTraceSink
from ._trace._jsonl import JsonlSink as JsonlSink
from ._trace._jsonl import read_events as read_events
from ._trace._recorder import ListSink as ListSink
from ._trace._recorder import Recorder as Recorder
from ._trace._recorder import Sink as Sink
from ._trace._recorder import replay as replay
from ._trace._records import EVENT_TYPES as EVENT_TYPES
from ._trace._records import VERSION as VERSION
from ._trace._records import CallFinished as CallFinished
from ._trace._records import CallQueued as CallQueued
from ._trace._records import CallSettled as CallSettled
from ._trace._records import CallStarted as CallStarted
from ._trace._records import ChildFinished as ChildFinished
from ._trace._records import ChildStarted as ChildStarted
from ._trace._records import Event as Event
from ._trace._records import FetchFinished as FetchFinished
from ._trace._records import FetchPhase as FetchPhase
from ._trace._records import FetchStarted as FetchStarted
from ._trace._records import LeaseLost as LeaseLost
from ._trace._records import LeaseRenewed as LeaseRenewed
from ._trace._records import LoopLag as LoopLag
from ._trace._records import MapFinished as MapFinished
from ._trace._records import MapProgress as MapProgress
from ._trace._records import MapStall as MapStall
from ._trace._records import MapStarted as MapStarted
from ._trace._records import PageFinished as PageFinished
from ._trace._records import PageLost as PageLost
from ._trace._records import PageStarted as PageStarted
from ._trace._records import PlayLog as PlayLog
from ._trace._records import ReceiptClaimed as ReceiptClaimed
from ._trace._records import ReceiptFollowed as ReceiptFollowed
from ._trace._records import ReceiptReplayed as ReceiptReplayed
from ._trace._records import ReceiptWaited as ReceiptWaited
from ._trace._records import RowAdmitted as RowAdmitted
from ._trace._records import RowCommitted as RowCommitted
from ._trace._records import RowResolverStarted as RowResolverStarted
from ._trace._records import RowTerminal as RowTerminal
from ._trace._records import RowWriterAdmitted as RowWriterAdmitted
from ._trace._records import RunFinished as RunFinished
from ._trace._records import RunStarted as RunStarted
from ._trace._records import WriterBatchCommitted as WriterBatchCommitted
from ._trace._records import WriterBatchFailed as WriterBatchFailed
from ._trace._records import WriterBatchStarted as WriterBatchStarted
from ._trace._records import from_json as from_json
from ._trace._records import to_json as to_json
