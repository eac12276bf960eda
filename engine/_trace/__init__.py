"""The typed event stream: records, the recorder, and its sinks (JSON Lines, Chrome trace).

``docs/events.md`` is the schema; :mod:`._spans` pairs records into spans, which the
Chrome sink and the pictures room (:mod:`trioplay._pictures`) draw.
"""

from __future__ import annotations

from ._chrome import ChromeTraceSink as ChromeTraceSink
from ._jsonl import JsonlSink as JsonlSink
from ._jsonl import read_events as read_events
from ._recorder import ListSink as ListSink
from ._recorder import Recorder as Recorder
from ._recorder import Sink as Sink
from ._recorder import replay as replay
from ._records import EVENT_TYPES as EVENT_TYPES
from ._records import VERSION as VERSION
from ._records import Event as Event
from ._records import from_json as from_json
from ._records import to_json as to_json
