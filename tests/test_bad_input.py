"""Acceptance: bad input fails with a message naming the problem and the place,
before any tool is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trioplay
from trioplay.stores.memory import MemoryStore

from .support import CountingTool, registry


def csv_play(path: Path, **kw: Any) -> Any:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return (await rc.tool("finder", {"domain": row["domain"]}))["email"]

        rows = ctx.csv(str(path), required=["domain"])
        return await ctx.dataset("s", rows).with_column("email", email).run(key="domain", **kw)

    return play


async def run_expecting(play: Any, error: type[BaseException], match: str) -> CountingTool:
    tool = CountingTool()
    async with trioplay.open_runtime(store=MemoryStore(), tools=registry(finder=tool)) as rt:
        with pytest.raises(error, match=match):
            await rt.run(play, {}, run_id="r")
    return tool


async def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    tool = await run_expecting(
        csv_play(path), trioplay.PlayInputError, rf"{path}.*(not found|no such)"
    )
    assert tool.calls == 0


async def test_missing_required_column(tmp_path: Path) -> None:
    path = tmp_path / "leads.csv"
    path.write_text("name,website\nacme,acme.example\n")
    tool = await run_expecting(
        csv_play(path),
        trioplay.PlayInputError,
        rf"{path}, line 1, column 'domain': required column is missing",
    )
    assert tool.calls == 0


async def test_malformed_line_fails_before_any_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "leads.csv"
    lines = ["domain,name"] + [f"d{i}.example,n{i}" for i in range(5000)]
    lines[4321] = "broken.example,a,b,c"
    path.write_text("\n".join(lines) + "\n")
    tool = await run_expecting(csv_play(path), trioplay.PlayInputError, rf"{path}, line 4322")
    assert tool.calls == 0


async def test_empty_required_field_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "leads.jsonl"
    path.write_text('{"domain": "a.example"}\n{"domain": ""}\n')

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", ctx.jsonl(str(path), required=["domain"])).run()

    await run_expecting(play, trioplay.PlayInputError, rf"{path}, line 2, column 'domain'")


async def test_play_input_that_is_not_json() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return None

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        with pytest.raises(trioplay.PlayInputError, match="JSON"):
            await rt.run(play, {"when": object()})


async def test_rows_that_are_not_mappings() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"a": 1}, "oops"]).run()

    await run_expecting(
        play, trioplay.PlayInputError, r"row 1: expected a mapping of fields, got str"
    )


async def test_tool_input_that_is_not_json_fails_the_run() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def bad(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("finder", {"domain": {1, 2}})

        return await ctx.dataset("s", [{"a": 1}]).with_column("x", bad).run()

    await run_expecting(
        play, trioplay.PlayDefinitionError, r"tool 'finder': its input must be JSON-serialisable"
    )


def test_bad_limits_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match=r"Limits.page_size must be a positive number, got 0"):
        trioplay.Limits(page_size=0)


@attrs.frozen
class _Settings:
    limits: trioplay.Limits = attrs.field(factory=lambda: trioplay.Limits(page_size=7))
    fetch_timeouts: trioplay.FetchTimeouts = attrs.field(
        factory=lambda: trioplay.FetchTimeouts(total=9.0)
    )
    allow_networks: tuple[str, ...] = ("127.0.0.0/8",)


async def test_open_runtime_takes_its_settings_as_one_record() -> None:
    settings = _Settings()
    async with trioplay.open_runtime(store=MemoryStore(), settings=settings) as rt:
        assert (rt.limits, rt.fetch_timeouts) == (settings.limits, settings.fetch_timeouts)
        assert rt.allow_networks == settings.allow_networks


@pytest.mark.parametrize(
    "keyword",
    [
        {"limits": trioplay.Limits()},
        {"fetch_timeouts": trioplay.FetchTimeouts()},
        {"allow_networks": ["10.0.0.0/8"]},
    ],
)
async def test_settings_and_one_of_its_keywords_are_refused(keyword: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="give settings= or its three keywords, not both"):
        async with trioplay.open_runtime(store=MemoryStore(), settings=_Settings(), **keyword):
            pass


def _tool_with(**options: Any) -> Any:
    async def tool(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        return input

    return lambda: trioplay.ToolRegistry().add("t", tool, **options)


def test_a_tool_setting_that_does_not_exist_is_named() -> None:
    with pytest.raises(TypeError, match=r"tool 't': no setting limit, rates; the settings: batch,"):
        _tool_with(rates=2, limit=1)()


NAN = float("nan")
INF = float("inf")
POSITIVE, ZERO_OR_MORE = "a positive number", "zero or positive"
WHOLE, WHOLE_OR_0 = "whole numbers of at least 1", "whole numbers of at least 0"
SECONDS, SECONDS_OR_0 = "finite seconds above 0", "finite seconds of at least 0"
SHARE, NUMBER = "a fraction above 0 and at most 1", "finite numbers above 0"
# The fields of Limits and FetchTimeouts have a maximum as well (issue 25, point 4).
MANY = "whole numbers from 1 to 1,000,000"
SIZE, SIZE_OR_0 = (f"whole numbers from {n} to 1,099,511,627,776 (1 TiB)" for n in (1, 0))
SPAN = "finite seconds above 0, at most 604,800 (a week)"
SPAN_OR_0 = "finite seconds from 0 to 604,800 (a week)"

# Issue 12, acceptance 3: every bad bound is refused where it is built, by a
# message that names the field and what it accepts. One row per case:
# (build it, the error, the field as named, must be ..., got ..., accepted: ...).
BAD_BOUNDS = [
    (
        lambda: trioplay.Limits(page_size=2.5),
        ValueError,
        "Limits.page_size",
        POSITIVE,
        "2.5",
        MANY,
    ),
    (
        lambda: trioplay.Limits(page_size=True),
        ValueError,
        "Limits.page_size",
        POSITIVE,
        "True",
        MANY,
    ),
    (
        lambda: trioplay.Limits(max_concurrent_rows=0),
        ValueError,
        "Limits.max_concurrent_rows",
        POSITIVE,
        "0",
        MANY,
    ),
    (
        lambda: trioplay.Limits(max_concurrent_external_calls=64.0),
        ValueError,
        "Limits.max_concurrent_external_calls",
        POSITIVE,
        "64.0",
        MANY,
    ),
    (
        lambda: trioplay.Limits(max_provider_share=0),
        ValueError,
        "Limits.max_provider_share",
        POSITIVE,
        "0",
        SHARE,
    ),
    (
        lambda: trioplay.Limits(max_provider_share=1.5),
        ValueError,
        "Limits.max_provider_share",
        "at most 1",
        "1.5",
        SHARE,
    ),
    (
        lambda: trioplay.Limits(max_provider_share=NAN),
        ValueError,
        "Limits.max_provider_share",
        POSITIVE,
        "nan",
        SHARE,
    ),
    (
        lambda: trioplay.Limits(active_rows_budget_bytes=INF),
        ValueError,
        "Limits.active_rows_budget_bytes",
        POSITIVE,
        "inf",
        SIZE,
    ),
    (
        lambda: trioplay.Limits(retained_rows_budget_bytes=-1),
        ValueError,
        "Limits.retained_rows_budget_bytes",
        ZERO_OR_MORE,
        "-1",
        SIZE_OR_0,
    ),
    (
        lambda: trioplay.Limits(writer_buffer_bytes=1.5),
        ValueError,
        "Limits.writer_buffer_bytes",
        POSITIVE,
        "1.5",
        SIZE,
    ),
    (
        lambda: trioplay.Limits(writer_max_flush=NAN),
        ValueError,
        "Limits.writer_max_flush",
        POSITIVE,
        "nan",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(progress_flush_interval=INF),
        ValueError,
        "Limits.progress_flush_interval",
        POSITIVE,
        "inf",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(stall_log_interval=0),
        ValueError,
        "Limits.stall_log_interval",
        POSITIVE,
        "0",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(tool_batch_window=-0.001),
        ValueError,
        "Limits.tool_batch_window",
        ZERO_OR_MORE,
        "-0.001",
        SPAN_OR_0,
    ),
    (
        lambda: trioplay.Limits(tool_batch_window=NAN),
        ValueError,
        "Limits.tool_batch_window",
        ZERO_OR_MORE,
        "nan",
        SPAN_OR_0,
    ),
    (
        lambda: trioplay.Limits(tool_batch_max=100.5),
        ValueError,
        "Limits.tool_batch_max",
        POSITIVE,
        "100.5",
        MANY,
    ),
    (
        lambda: trioplay.Limits(tool_batch_max_bytes=0),
        ValueError,
        "Limits.tool_batch_max_bytes",
        POSITIVE,
        "0",
        SIZE,
    ),
    (
        lambda: trioplay.Limits(tool_timeout=-5),
        ValueError,
        "Limits.tool_timeout",
        POSITIVE,
        "-5",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(tool_timeout=INF),
        ValueError,
        "Limits.tool_timeout",
        POSITIVE,
        "inf",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(lease_ttl=NAN),
        ValueError,
        "Limits.lease_ttl",
        POSITIVE,
        "nan",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(receipt_wait_delay=0),
        ValueError,
        "Limits.receipt_wait_delay",
        POSITIVE,
        "0",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(receipt_wait_attempts=2.5),
        ValueError,
        "Limits.receipt_wait_attempts",
        POSITIVE,
        "2.5",
        MANY,
    ),
    (
        lambda: trioplay.Limits(fetch_max_body_bytes=NAN),
        ValueError,
        "Limits.fetch_max_body_bytes",
        POSITIVE,
        "nan",
        SIZE,
    ),
    (
        lambda: trioplay.Limits(fetch_retry_attempts=0),
        ValueError,
        "Limits.fetch_retry_attempts",
        POSITIVE,
        "0",
        MANY,
    ),
    (
        lambda: trioplay.Limits(fetch_retry_delay=-1),
        ValueError,
        "Limits.fetch_retry_delay",
        ZERO_OR_MORE,
        "-1",
        SPAN_OR_0,
    ),
    (
        lambda: trioplay.Limits(cleanup_timeout=INF),
        ValueError,
        "Limits.cleanup_timeout",
        POSITIVE,
        "inf",
        SPAN,
    ),
    (
        lambda: trioplay.FetchTimeouts(headers=NAN),
        ValueError,
        "FetchTimeouts.headers",
        POSITIVE,
        "nan",
        SPAN,
    ),
    (
        lambda: trioplay.FetchTimeouts(body=-1),
        ValueError,
        "FetchTimeouts.body",
        POSITIVE,
        "-1",
        SPAN,
    ),
    (
        lambda: trioplay.FetchTimeouts(total=INF),
        ValueError,
        "FetchTimeouts.total",
        POSITIVE,
        "inf",
        SPAN,
    ),
    (
        lambda: trioplay.FetchTimeouts(total="120"),
        ValueError,
        "FetchTimeouts.total",
        POSITIVE,
        "'120'",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(page_size=10**30),
        ValueError,
        "Limits.page_size",
        "at most 1,000,000",
        str(10**30),
        MANY,
    ),
    (
        lambda: trioplay.Limits(csv_field_limit=2**63),
        ValueError,
        "Limits.csv_field_limit",
        "at most 1,099,511,627,776",
        str(2**63),
        SIZE,
    ),
    (
        lambda: trioplay.Limits(writer_max_flush=1e300),
        ValueError,
        "Limits.writer_max_flush",
        "at most 604,800",
        "1e+300",
        SPAN,
    ),
    (
        lambda: trioplay.Limits(tool_batch_window=604_801),
        ValueError,
        "Limits.tool_batch_window",
        "at most 604,800",
        "604801",
        SPAN_OR_0,
    ),
    (
        lambda: trioplay.FetchTimeouts(total=1e9),
        ValueError,
        "FetchTimeouts.total",
        "at most 604,800",
        "1000000000.0",
        SPAN,
    ),
    (lambda: trioplay.Rate(NAN), ValueError, "Rate.n", POSITIVE, "nan", NUMBER),
    (lambda: trioplay.Rate(10, per=0), ValueError, "Rate.per", POSITIVE, "0", NUMBER),
    (lambda: trioplay.Rate(10, per=INF), ValueError, "Rate.per", POSITIVE, "inf", NUMBER),
    (lambda: trioplay.Rate(10, burst=2.5), ValueError, "Rate.burst", POSITIVE, "2.5", WHOLE),
    (lambda: trioplay.Rate(10, burst=0), ValueError, "Rate.burst", POSITIVE, "0", WHOLE),
    (
        _tool_with(timeout=-1),
        trioplay.PlayDefinitionError,
        "tool 't': timeout",
        POSITIVE,
        "-1",
        SECONDS,
    ),
    (
        _tool_with(timeout=NAN),
        trioplay.PlayDefinitionError,
        "tool 't': timeout",
        POSITIVE,
        "nan",
        SECONDS,
    ),
    (
        _tool_with(concurrency=2.5),
        trioplay.PlayDefinitionError,
        "tool 't': concurrency",
        POSITIVE,
        "2.5",
        WHOLE,
    ),
    (
        _tool_with(concurrency=0),
        trioplay.PlayDefinitionError,
        "tool 't': concurrency",
        POSITIVE,
        "0",
        WHOLE,
    ),
    (
        _tool_with(retries=-1),
        trioplay.PlayDefinitionError,
        "tool 't': retries",
        ZERO_OR_MORE,
        "-1",
        WHOLE_OR_0,
    ),
    (
        _tool_with(batch_max=0),
        trioplay.PlayDefinitionError,
        "tool 't': batch_max",
        POSITIVE,
        "0",
        WHOLE,
    ),
]


@pytest.mark.parametrize(("build", "error", "field", "must_be", "got", "accepted"), BAD_BOUNDS)
def test_a_bad_bound_is_refused_where_it_is_built(
    build: Any, error: Any, field: str, must_be: str, got: str, accepted: str
) -> None:
    with pytest.raises(error) as caught:
        build()
    assert str(caught.value) == f"{field} must be {must_be}, got {got}; accepted: {accepted}"


async def test_a_page_size_that_is_not_a_whole_number_is_refused() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return (
            await ctx.dataset("s", [{"i": 1}])
            .with_column("x", lambda r, rc: 1)
            .run(
                page_size=2.5  # type: ignore[arg-type]
            )
        )

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        with pytest.raises(
            trioplay.PlayDefinitionError,
            match=r"^page_size must be a positive number, got 2.5; accepted: whole numbers",
        ):
            await rt.run(play, {}, run_id="r")


LONE_SURROGATE = "caf\udce9"  # what os.fsdecode makes of a Latin-1 byte: not storable as UTF-8


@pytest.mark.parametrize("where", ["tool result", "row output"])
async def test_text_that_is_not_valid_unicode_fails_its_row_not_the_run(
    tmp_path: Path, where: str
) -> None:
    """A lone surrogate cannot be stored as UTF-8: on SQLite it failed the whole
    run with a StoreError (and tripped the latch); now its own row fails, on
    every store alike, saying which text and what to do."""

    async def finder(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        bad = input["domain"] == "b.example" and where == "tool result"
        return {"email": LONE_SURROGATE if bad else f"info@{input['domain']}"}

    async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
        value = (await rc.tool("finder", {"domain": row["domain"]}))["email"]
        return LONE_SURROGATE if row["domain"] == "b.example" and where == "row output" else value

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        rows = [{"domain": f"{name}.example"} for name in "abc"]
        result = await ctx.dataset("s", rows).with_column("email", email).run(key="domain")
        return [row async for row in result.rows(status="failed")]

    tools = trioplay.ToolRegistry()
    tools.add("finder", finder)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    async with trioplay.open_runtime(store=store, tools=tools) as rt:
        with trio.fail_after(20):
            failed = await rt.run(play, {}, run_id="r")
    [row] = failed
    assert row["domain"] == "b.example"
    assert "not valid Unicode" in row["_error"], row["_error"]
    assert "\\udce9" in row["_error"], row["_error"]


# Issue 25, point 2: ProviderTransientError(category, message="", *, retry_after=None,
# tool_id=None) checks what it is given, and says what it accepts.
CATEGORIES = "accepted: 'rate_limit', 'network', 'upstream'"
BAD_TRANSIENT = [
    (lambda: trioplay.ProviderTransientError("timeout"), ValueError,
     f"ProviderTransientError: category must be one of the three, got 'timeout'; {CATEGORIES} "
     "(the category comes first: ProviderTransientError('network', 'what happened'))"),
    (lambda: trioplay.ProviderTransientError("rate limited", retry_after=5), ValueError,
     "got 'rate limited'"),
    (lambda: trioplay.ProviderTransientError(429), ValueError, "got 429"),  # type: ignore[arg-type]
    (lambda: trioplay.ProviderTransientError("network", 503), TypeError,  # type: ignore[arg-type]
     "ProviderTransientError: message must be a string, got 503 (int)"),
    (lambda: trioplay.ProviderTransientError("rate_limit", retry_after="5"), TypeError,  # type: ignore[arg-type]
     "ProviderTransientError: retry_after must be seconds (a number) or None, got '5' (str)"),
    (lambda: trioplay.ProviderTransientError("rate_limit", retry_after=True), TypeError,
     "retry_after must be seconds (a number) or None, got True (bool)"),
    (lambda: trioplay.ProviderTransientError("rate_limit", retry_after=-1), ValueError,
     "ProviderTransientError: retry_after must be finite seconds of at least 0, got -1"),
    (lambda: trioplay.ProviderTransientError("rate_limit", retry_after=float("nan")), ValueError,
     "retry_after must be finite seconds of at least 0, got nan"),
    (lambda: trioplay.ProviderTransientError("upstream", tool_id=7), TypeError,  # type: ignore[arg-type]
     "ProviderTransientError: tool_id must be a string or None, got 7 (int)"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "error", "message"), BAD_TRANSIENT)
def test_a_bad_provider_transient_error_says_what_it_accepts(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        build()
    assert message in str(caught.value)


def test_a_provider_transient_error_copies_and_pickles_as_it_was() -> None:
    import copy
    import pickle

    error = trioplay.ProviderTransientError("network", "reset", retry_after=2.5, tool_id="t")
    timeout = trioplay.ToolTimeout("t", 3.0)
    for same in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert (type(same), str(same), same.category, same.retry_after, same.tool_id) == (
            trioplay.ProviderTransientError,
            "[network] reset",
            "network",
            2.5,
            "t",
        )
    for same_timeout in (copy.copy(timeout), pickle.loads(pickle.dumps(timeout))):
        assert type(same_timeout) is trioplay.ToolTimeout
        assert str(same_timeout) == str(timeout)
        assert (same_timeout.category, same_timeout.timeout) == ("upstream", 3.0)


async def test_a_tool_raising_a_bad_transient_error_fails_its_row_saying_why() -> None:
    async def finder(input: dict[str, Any], call: trioplay.ToolCall) -> Any:
        raise trioplay.ProviderTransientError("timed out")

    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        async def email(row: trioplay.Row, rc: trioplay.RowContext) -> Any:
            return await rc.tool("finder", {"domain": row["domain"]})

        result = await ctx.dataset("s", [{"domain": "a.example"}]).with_column("e", email).run()
        return [row async for row in result.rows(status="failed")]

    async with trioplay.open_runtime(store=MemoryStore(), tools=registry(finder=finder)) as rt:
        [row] = await rt.run(play, {}, run_id="r")
    assert "category must be one of the three, got 'timed out'" in row["_error"]


@pytest.mark.parametrize(
    ("cls", "field"),
    [(cls, field.name) for cls in (trioplay.Limits, trioplay.FetchTimeouts)
     for field in attrs.fields(cls)],
)  # fmt: skip
def test_every_bound_has_a_maximum(cls: Any, field: str) -> None:
    """A value a million times the largest sane one is refused where it is built,
    not when a page is sliced or a deadline never comes (issue 25, point 4)."""
    huge = 10**30 if isinstance(getattr(cls(), field), int) else 1e30
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{field} must be at most "):
        cls(**{field: huge})


async def test_a_page_size_past_the_maximum_is_refused_by_run_too() -> None:
    @trioplay.play("p")
    async def play(ctx: trioplay.PlayContext, _input: Any) -> Any:
        return await ctx.dataset("s", [{"i": 1}]).run(page_size=10**30)

    async with trioplay.open_runtime(store=MemoryStore()) as rt:
        with pytest.raises(
            trioplay.PlayDefinitionError, match=r"^page_size must be at most 1,000,000, got 1000"
        ):
            await rt.run(play, {}, run_id="r")
