"""Canonical JSON and content-addressed keys.

Receipt keys must not depend on dict key order, on the process, or on the
Python version, so every key is a SHA-256 over one canonical JSON spelling:
sorted keys, no whitespace, UTF-8, no NaN or infinity.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._errors import PlayInputError

if TYPE_CHECKING:
    from collections.abc import Callable

_canonical = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _storable(text: str) -> str:
    """``text``, if it is valid Unicode; a lone surrogate raises ``ValueError``.

    JSON text is stored as UTF-8, which has no spelling for a lone surrogate
    (what ``os.fsdecode`` makes of a byte that is not UTF-8, say). Refused
    here, such text fails the one call or row that made it, on every store
    alike, instead of the store's write for a whole batch.
    """
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise ValueError(
            f"text that is not valid Unicode ({bad!r}, a lone surrogate, at character"
            f" {exc.start} of its JSON) cannot be stored; decode bytes with the right"
            " codec, or errors='replace'"
        ) from None
    return text


def _fast(encoder: json.JSONEncoder, name: str, doc: str) -> Callable[[Any], str]:
    """``encoder.encode`` of storable text (see :func:`_storable`), minus the
    Python-level set-up ``encode`` repeats on every call; named ``name``.

    ``JSONEncoder.encode`` goes through ``iterencode``, which gathers the
    encoder's options in Python before it builds the C encoder, on every
    call. Here the options are gathered once and the C encoder is built once
    and shared (see below): each call only runs it, about 70% of the
    instructions of building one per call, several encodings per row. ASCII text is storable
    as it is, checked without a call. Same output, same errors; falls back
    where the C encoder is absent.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    args = (
        encoder.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    if make is None:  # pragma: no cover - CPython always has it

        def encode(value: Any) -> str:
            return _storable(encoder.encode(value))

    else:
        # Built once, without circular-reference markers (None): it keeps no state
        # between calls, so threads share it. What the markers would catch, a
        # value that contains itself, recurses until RecursionError instead; that
        # (rare) error is raised again by an encoder with markers, for json's own
        # ValueError, or the same RecursionError for a value merely nested too deep.
        shared = make(None, *args)

        def encode(value: Any) -> str:
            try:
                text = "".join(shared(value, 0))
            except RecursionError:
                text = "".join(make({}, *args)(value, 0))
            return text if text.isascii() else _storable(text)

    encode.__name__ = encode.__qualname__ = name
    encode.__doc__ = doc
    return encode


canonical_json = _fast(
    _canonical,
    "canonical_json",
    """The one canonical spelling of ``value`` as JSON: what receipt keys are made of.

    Sorted keys, no whitespace, non-ASCII characters as they are, so equal
    values (whatever their dict order) give equal text, in any process and
    Python version. Raises ``TypeError`` for what JSON cannot hold and
    ``ValueError`` for NaN, infinities and text that is not valid Unicode.
    """,
)

dumps = _fast(_compact, "dumps", "Compact JSON in insertion order (for stored rows and payloads).")


def play_input_json(input: Any, what: str) -> str:
    """A play's input as canonical JSON; without one, :class:`PlayInputError` naming ``what``."""
    try:
        return canonical_json(input)
    except (TypeError, ValueError) as exc:
        raise PlayInputError(f"{what} must be JSON-serialisable: {exc}") from None


def _to_dict(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_output = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_to_dict
)


def dumps_output(value: Any) -> str:
    """Like :func:`dumps`, also accepting objects with ``to_dict()`` (a play's output)."""
    return _output.encode(value)


# The C scanner json.loads ends up in, which typeshed does not declare.
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads(text: str) -> Any:
    """``json.loads``, minus its two whitespace regex matches per call.

    Text this package wrote has no surrounding whitespace, so the scanner
    runs on it directly; anything else (a document with whitespace around
    it, trailing data, an empty string) goes through ``json.loads`` for the
    same value or the same error.
    """
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def digest(*parts: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``parts``."""
    import hashlib  # here: the commands that only read hash nothing (docs/cli.md)

    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()
