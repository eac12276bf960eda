"""What the command line shows while a run works, and the summary after it.

:class:`RunReporter` is a sink of the run's recorder like the event files'
(``trioplay.events.Sink``), a live one: it reads the records as the
``RuntimeEvent`` events every ``on_event`` listener gets (one table,
:data:`trioplay._trace._listen.FACTS`, derives them) and follows
``run.*``, ``map.started``, ``map.progress`` and ``map.finished``. It shows, on stderr:

- on a terminal, a rich progress bar per running map (rows done of the total,
  completed and failed, rate, ETA) that exists only while a map runs;
- otherwise, plain lines, at most one every ``interval`` seconds per map,
  and one when the map finishes::

      leads_enriched: 4,000/10,000 rows (3,950 ok, 50 failed) 812 rows/s, eta 7 s

It also remembers what :func:`format_summary` needs. Times come from the
events (the Trio clock), so the reporter behaves the same under a mock clock.
Rich is imported here and nowhere else.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from .._map._report import handed_over_text
from .._trace._listen import EventStream
from ._failures import failures_line

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from rich.progress import Progress, TaskID

    from .._events import RuntimeEvent
    from ._failures import FailureKind


@attrs.define
class MapProgress:
    """The latest counts of one map, as its events reported them."""

    name: str
    started_at: float
    total: int | None = None
    completed: int = 0
    failed: int = 0
    skipped: int = 0
    duplicates: int = 0
    unconfirmed: int = 0  # rows of a write whose outcome is unknown
    columns: tuple[str, ...] = ()  # as map.started said: a header for an empty sheet
    waiting: int = 0  # rows suspended on an event wait (issue 22)
    handed_over: int = 0  # rows left to another owner that took their page over (issue 26)
    pages_handed_over: int = 0
    at: float = 0.0
    finished: bool = False
    last_line_at: float | None = None

    @property
    def done(self) -> int:
        """Rows accounted for: committed in this attempt, skipped, waiting, or handed over."""
        return self.completed + self.failed + self.skipped + self.waiting + self.handed_over

    @property
    def elapsed(self) -> float:
        return max(0.0, self.at - self.started_at)

    @property
    def rate(self) -> float | None:
        """Rows committed per second in this attempt (skipped rows cost nothing)."""
        processed = self.completed + self.failed
        if self.elapsed <= 0 or processed == 0:
            return None
        return processed / self.elapsed

    @property
    def eta(self) -> float | None:
        rate = self.rate
        if self.total is None or rate is None:
            return None
        return max(0, self.total - self.done) / rate

    def update(self, data: Mapping[str, Any], at: float) -> None:
        self.at = at
        total = data.get("total")
        self.total = total if isinstance(total, int) else self.total
        self.completed = int(data.get("completed", self.completed))
        self.failed = int(data.get("failed", self.failed))
        self.skipped = int(data.get("skipped", self.skipped))
        self.duplicates = int(data.get("duplicates", self.duplicates))
        self.unconfirmed = int(data.get("unconfirmed", self.unconfirmed))
        columns = data.get("columns")
        if isinstance(columns, list):
            self.columns = tuple(str(name) for name in columns)
        self.waiting = int(data.get("waiting", self.waiting))
        self.handed_over = int(data.get("handed_over", self.handed_over))
        self.pages_handed_over = int(data.get("pages_handed_over", self.pages_handed_over))


@attrs.define
class RunOutcome:
    """What a run reported about itself, collected from its events."""

    run_id: str | None = None
    play: str | None = None
    attempt: int | None = None
    status: str | None = None
    error: str | None = None
    stats: dict[str, int] = attrs.field(factory=dict)
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def elapsed(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


class RunReporter(EventStream):
    """Progress on stderr from runtime events; a sink of the run's recorder.

    ``interactive`` defaults to whether stderr is a terminal. ``stream``
    defaults to ``sys.stderr`` as it is when a line is written (so a test's
    captured stderr sees it). Call :meth:`close` when the run is over, even
    after an error, so a live progress bar stops.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interactive: bool | None = None,
        interval: float = 2.0,
    ) -> None:
        super().__init__()
        self._stream = stream
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.interval = interval
        self.maps: dict[str, MapProgress] = {}
        self.outcome = RunOutcome()
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    # -- the event sink -----------------------------------------------------
    def tell(self, event: RuntimeEvent) -> None:
        handler = _HANDLERS.get(event.type)
        if handler is None:
            return
        run_id = self.outcome.run_id
        if run_id is not None and event.run_id != run_id:
            return  # a child play's run: the command reports its root (the first run)
        handler(self, event)

    def _run_started(self, event: RuntimeEvent) -> None:
        self.outcome.run_id = event.run_id
        self.outcome.play = event.data.get("play")
        self.outcome.attempt = event.data.get("attempt")
        self.outcome.started_at = event.at

    def _run_finished(self, event: RuntimeEvent) -> None:
        self.outcome.run_id = event.run_id
        self.outcome.status = event.data.get("status")
        self.outcome.error = event.data.get("error")
        self.outcome.stats = dict(event.data.get("stats") or {})
        self.outcome.finished_at = event.at
        self.close()

    def _map_started(self, event: RuntimeEvent) -> None:
        name = str(event.data.get("map"))
        state = MapProgress(name=name, started_at=event.at, at=event.at)
        state.update(event.data, event.at)
        self.maps[name] = state
        if self.interactive:
            self._bar_add(state)

    def _map_progress(self, event: RuntimeEvent) -> None:
        state = self._state(event)
        state.update(event.data, event.at)
        if self.interactive:
            self._bar_update(state)
        elif state.last_line_at is None or event.at - state.last_line_at >= self.interval:
            # The first report comes a progress interval into the map, which
            # is the right moment to say that a long map has begun.
            state.last_line_at = event.at
            self.write_line(progress_line(state))

    def _map_finished(self, event: RuntimeEvent) -> None:
        state = self._state(event)
        state.update(event.data, event.at)
        state.finished = True
        if self.interactive:
            self._bar_remove(state)
        self.write_line(finished_line(state))

    def _state(self, event: RuntimeEvent) -> MapProgress:
        name = str(event.data.get("map"))
        state = self.maps.get(name)
        if state is None:  # a progress event without its start: start now
            state = self.maps[name] = MapProgress(name=name, started_at=event.at, at=event.at)
            if self.interactive:
                self._bar_add(state)
        return state

    # -- output -------------------------------------------------------------
    def write_line(self, text: str) -> None:
        """Write one line to stderr, above the progress bar when one is live."""
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Stop the progress bar, if one is live. Safe to call twice."""
        progress, self._progress = self._progress, None
        self._tasks.clear()
        if progress is not None:
            progress.stop()

    # -- the rich bar -------------------------------------------------------
    def _bar_add(self, state: MapProgress) -> None:
        if self._progress is None:
            self._progress = _new_progress(self.stream)
            self._progress.start()
        self._tasks[state.name] = self._progress.add_task(
            state.name, total=state.total, **_bar_fields(state)
        )

    def _bar_update(self, state: MapProgress) -> None:
        task = self._tasks.get(state.name)
        if self._progress is not None and task is not None:
            self._progress.update(
                task, completed=state.done, total=state.total, **_bar_fields(state)
            )

    def _bar_remove(self, state: MapProgress) -> None:
        task = self._tasks.pop(state.name, None)
        if self._progress is not None and task is not None:
            self._progress.remove_task(task)
        if not self._tasks:
            self.close()


_HANDLERS = {
    "run.started": RunReporter._run_started,
    "run.finished": RunReporter._run_finished,
    "map.started": RunReporter._map_started,
    "map.progress": RunReporter._map_progress,
    "map.finished": RunReporter._map_finished,
}


def _new_progress(stream: TextIO) -> Progress:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[rows]} ({task.fields[ok]} ok, {task.fields[failed]} failed)"),
        TextColumn("{task.fields[rate]}"),
        TextColumn("{task.fields[eta]}"),
        console=Console(file=stream),
        transient=True,
        refresh_per_second=4,
    )


def _bar_fields(state: MapProgress) -> dict[str, Any]:
    """The bar's text fields, by the names its columns use (rich's task fields)."""
    return {
        "rows": _of_total(state),
        "ok": f"{state.completed:,}",
        "failed": f"{state.failed:,}",
        "rate": _rate(state.rate),
        "eta": f"eta {_duration(state.eta)}" if state.eta is not None else "",
    }


# -- lines ------------------------------------------------------------------


def _counts(state: MapProgress) -> str:
    parts = [f"{state.completed:,} ok", f"{state.failed:,} failed"]
    if state.skipped:
        parts.append(f"{state.skipped:,} skipped")
    if state.waiting:
        parts.append(f"{state.waiting:,} waiting")
    if state.handed_over:
        parts.append(f"{state.handed_over:,} handed over")
    return ", ".join(parts)


def _of_total(state: MapProgress) -> str:
    if state.total is None:
        return f"{state.done:,} rows"
    return f"{state.done:,}/{state.total:,} rows"


def _rate(rate: float | None) -> str:
    return f"{rate:,.0f} rows/s" if rate is not None else ""


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes}:{rest:02d}" if minutes else f"{rest} s"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def progress_line(state: MapProgress) -> str:
    """``leads_enriched: 4,000/10,000 rows (3,950 ok, 50 failed) 812 rows/s, eta 7 s``."""
    line = f"{state.name}: {_of_total(state)} ({_counts(state)})"
    if state.rate is not None:
        line += f" {_rate(state.rate)}"
        if state.eta is not None:
            line += f", eta {_duration(state.eta)}"
    return line


def finished_line(state: MapProgress) -> str:
    """``leads_enriched: done, 1,200/1,200 rows (...) in 3.1 s, 380 rows/s``."""
    line = (
        f"{state.name}: done, {_of_total(state)} ({_counts(state)}) in {_duration(state.elapsed)}"
    )
    if state.rate is not None:
        line += f", {_rate(state.rate)}"
    return line


# -- the summary ------------------------------------------------------------


@attrs.frozen
class OutputFile:
    """A file the command wrote: where, which dataset, how many rows."""

    path: str
    dataset: str
    rows: int


def format_summary(
    outcome: RunOutcome,
    maps: Sequence[MapProgress],
    *,
    sheets: Mapping[str, Mapping[str, int]] | None = None,
    outputs: Sequence[OutputFile] = (),
    elapsed: float | None = None,
    failures: Mapping[str, Sequence[FailureKind]] | None = None,
) -> str:
    """The end-of-run summary, several lines, for stdout.

    ``maps`` are this attempt's counts; ``sheets`` the rows each dataset's
    sheet holds now (every attempt together), by status; ``failures`` why
    each dataset's failed rows failed (a line under the dataset's).
    """
    sheets = sheets or {}
    failures = failures or {}
    status = outcome.status or "unknown"
    head = f"run {outcome.run_id or '?'}: {status}"
    details = []
    if outcome.play:
        details.append(f"play {outcome.play}")
    if outcome.attempt is not None:
        details.append(f"attempt {outcome.attempt}")
    if details:
        head += f" ({', '.join(details)})"
    lines = [head]
    names = [state.name for state in maps] + [name for name in sheets if name not in _names(maps)]
    by_name = {state.name: state for state in maps}
    for name in names:
        state = by_name.get(name)
        text = f"  {name}: "
        if state is not None:
            text += f"{state.completed:,} completed, {state.failed:,} failed, "
            text += f"{state.skipped:,} skipped"
            if state.waiting:
                text += f", {state.waiting:,} waiting"
            if state.duplicates:
                keys = "key" if state.duplicates == 1 else "keys"
                text += f" ({state.duplicates:,} duplicate {keys})"
            if state.handed_over:
                handed = handed_over_text(state.handed_over, state.pages_handed_over)
                text += f"; {handed} handed to another owner"
            if state.unconfirmed:
                text += (
                    f"; {state.unconfirmed:,} more in a write whose outcome is unknown"
                    " (the sheet may hold them; a rerun skips those it finds)"
                )
        sheet = sheets.get(name)
        if sheet is not None:
            held = f"{sheet.get('completed', 0):,} completed, {sheet.get('failed', 0):,} failed"
            text += f"; sheet holds {held}" if state is not None else f"sheet holds {held}"
        lines.append(text)
        if failures.get(name):
            lines.append(f"    {failures_line(failures[name])}")
    stats = outcome.stats
    lines.append(f"  provider calls: {stats.get('provider_calls', 0):,}")
    lines.append(f"  replayed receipts: {stats.get('replayed', 0):,}")
    if stats.get("failed_calls"):
        lines.append(f"  failed calls (recorded): {stats['failed_calls']:,}")
    seconds = elapsed if elapsed is not None else outcome.elapsed
    if seconds is not None:
        lines.append(f"  elapsed: {seconds:.1f} s")
    for output in outputs:
        rows = "row" if output.rows == 1 else "rows"
        lines.append(f"  output: {output.path} ({output.rows:,} {rows} of {output.dataset})")
    if outcome.error and status != "completed":
        lines.append(f"  error: {outcome.error}")
    return "\n".join(lines)


def _names(maps: Sequence[MapProgress]) -> set[str]:
    return {state.name for state in maps}
