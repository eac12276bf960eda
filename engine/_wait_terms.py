"""What a wait and an event are checked against before any store call, and sending one.

The waits room (:mod:`trioplay._waits`) registers and polls waits inside a
run; this module is what needs no Trio: the checks of a wait's name, key,
bound and linger, :func:`event_request` (an event to send, every argument
checked) and :func:`send_checked`. So ``trioplay send-event`` sends an event
on the same path as ``Runtime.send_event`` without importing Trio or the
waits room (docs/cli.md, "What a command loads").
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from ._errors import InvalidWait
from ._json import canonical_json
from ._records import SendRequest

if TYPE_CHECKING:
    from ._limits import Limits
    from ._records import SendResult
    from ._store import WaitStore
    from ._trace import Recorder

MISSING: Any = object()
"""The ``default`` of a wait that has none: its timeout raises ``EventWaitTimeout``."""

MAX_LINGER = 300.0
"""The longest a row may linger in-process for its event (seconds): longer waits suspend."""


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidWait("name", f"must be a non-empty string, got {name!r}")
    return name


def key_json(key: object) -> str:
    """The canonical JSON of a wait's key; :class:`InvalidWait` if it has none."""
    try:
        return canonical_json(key)
    except (TypeError, ValueError) as exc:
        problem = f"must be JSON (str, int, float, bool, None, list, dict): {exc}"
        raise InvalidWait("key", problem) from None


def _seconds(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidWait(field, f"must be finite seconds, got {value!r}")
    return float(value)


def wait_deadline(timeout: object, deadline: object, *, now: float, limits: Limits) -> float:
    """The wall-clock deadline a new wait gets from ``timeout=`` or ``deadline=``.

    Exactly one is given; a timeout is above 0 and at most
    ``limits.max_event_wait``; a deadline (epoch seconds) at most that far
    from ``now`` (one already past is accepted: the wait times out at once,
    as it does when a rerun meets a wait whose stored deadline passed).
    """
    longest = limits.max_event_wait
    if timeout is None and deadline is None:
        raise InvalidWait(
            "timeout",
            "is required: every wait is bounded; give timeout= (seconds) or deadline= "
            f"(epoch seconds), at most Limits.max_event_wait={longest:,.0f} s away",
        )
    if timeout is not None and deadline is not None:
        raise InvalidWait("deadline", "give timeout= or deadline=, not both")
    if timeout is not None:
        seconds = _seconds("timeout", timeout)
        if seconds <= 0:
            raise InvalidWait("timeout", f"must be above 0 seconds, got {timeout!r}")
        if seconds > longest:
            problem = f"must be at most Limits.max_event_wait={longest:,.0f} s, got {timeout!r}"
            raise InvalidWait("timeout", problem)
        return now + seconds
    instant = _seconds("deadline", deadline)
    if instant - now > longest:
        raise InvalidWait(
            "deadline",
            f"is {instant - now:,.0f} s away, more than Limits.max_event_wait={longest:,.0f} s",
        )
    return instant


def check_linger(linger: object) -> float | None:
    if linger is None:
        return None
    seconds = _seconds("linger", linger)
    if not 0 < seconds <= MAX_LINGER:
        problem = f"must be above 0 and at most {MAX_LINGER:.0f} s, got {linger!r}"
        raise InvalidWait("linger", problem)
    return seconds


def event_request(
    run_id: object,
    name: object,
    key: object,
    *,
    data: Any,
    reject: object,
    event_id: object,
    token: object,
    limits: Limits,
) -> SendRequest:
    """The event to send, every argument checked (:class:`InvalidWait` names the bad one).

    ``data`` is any JSON value (``MISSING`` with ``reject``), at most
    ``limits.max_event_payload_bytes`` as JSON; ``token`` replaces ``name``
    and ``key``; ``event_id`` defaults to a fresh random id.
    """
    if not isinstance(run_id, str) or not run_id:
        raise InvalidWait("run_id", f"must be a non-empty string, got {run_id!r}")
    if token is not None:
        if not isinstance(token, str) or not token:
            raise InvalidWait("token", f"must be a non-empty string, got {token!r}")
        if name is not None or key is not None:
            raise InvalidWait("token", "addresses one wait: give it instead of name and key")
        name_text, key_text = "", ""
    else:
        name_text = check_name(name)
        key_text = key_json(key)
    if reject is not None:
        if not isinstance(reject, str) or not reject:
            raise InvalidWait("reject", f"must be a non-empty reason, got {reject!r}")
        if data is not MISSING:
            raise InvalidWait("reject", "an event carries data or a reject reason, not both")
        payload: str | None = None
    else:
        if data is MISSING:
            raise InvalidWait("data", "an event needs data (any JSON value) or a reject reason")
        try:
            payload = canonical_json(data)
        except (TypeError, ValueError) as exc:
            raise InvalidWait("data", f"must be JSON: {exc}") from None
        size = len(payload.encode())
        if size > limits.max_event_payload_bytes:
            raise InvalidWait(
                "data",
                f"is {size:,} bytes as JSON, more than "
                f"Limits.max_event_payload_bytes={limits.max_event_payload_bytes:,}",
            )
    if event_id is None:
        # What secrets.token_hex(16) is, without its module: it loads hashlib (OpenSSL).
        event_id = os.urandom(16).hex()
    elif not isinstance(event_id, str) or not event_id:
        raise InvalidWait("event_id", f"must be a non-empty string, got {event_id!r}")
    return SendRequest(
        run_id=run_id,
        name=name_text,
        key_json=key_text,
        payload_json=payload,
        event_id=event_id,
        reject=reject,
        token=token,
    )


async def send_checked(
    store: WaitStore, request: SendRequest, *, now: float, facts: Recorder | None
) -> SendResult:
    """Send an event already checked (:func:`event_request` made it), and record that it was."""
    result = await store.send_event(request, now=now)
    if facts is not None:
        from ._trace._records import EventSent  # the recorder's: a command without one skips it

        facts.add(
            EventSent,
            request.run_id,
            request.name,
            request.key_json,
            result.event_id,
            result.outcome,
            result.dataset,
            result.row_key,
        )
    return result


__all__ = [
    "MAX_LINGER",
    "MISSING",
    "check_linger",
    "check_name",
    "event_request",
    "key_json",
    "send_checked",
    "wait_deadline",
]
