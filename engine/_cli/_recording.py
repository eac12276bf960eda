"""The recorder of ``run`` and ``demo``: the progress reporter, ``--events FILE.jsonl``
and ``--trace FILE.json``, all sinks of one recorder.

Both files are written through :func:`._export.open_output` (``-``, symlinks,
FIFOs, a regular file renamed into place once complete) and kept when the
run fails or is interrupted: the events of such a run are what explains it.
The recorder's sinks write synchronously to the opened file, in batches, in
the task that recorded the last event of a batch (see
:mod:`trioplay._trace._recorder`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .._trace import ChromeTraceSink, JsonlSink, Recorder
from ._export import open_output, written

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._trace import Sink


@contextlib.asynccontextmanager
async def open_recording(
    events: str | None, trace: str | None, *live: Sink
) -> AsyncIterator[Recorder | None]:
    """A recorder handing the run's events to ``live`` (the progress reporter) and writing
    ``events`` (JSON Lines) and ``trace`` (Chrome trace JSON); ``None`` when there is
    no sink at all. Close the runtime inside the block: the recorder is closed (its
    last events written) when the block is left."""
    if events is None and trace is None and not live:
        yield None
        return
    async with contextlib.AsyncExitStack() as files:
        sinks: list[Sink] = list(live)
        if events is not None:
            file = await files.enter_async_context(open_output(events, keep_on_error=True))
            sinks.append(JsonlSink(file.wrapped))
        if trace is not None:
            file = await files.enter_async_context(open_output(trace, keep_on_error=True))
            sinks.append(ChromeTraceSink(file.wrapped))
        recorder = Recorder(*sinks)
        try:
            yield recorder
        finally:
            # The sinks write their last lines now: a full disk says so here.
            with written(" and ".join(path for path in (events, trace) if path is not None)):
                recorder.close()
