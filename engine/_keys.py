"""Every content-addressed key of a run's effects, in one place.

A receipt key names an effect: the same effect always gets the same key (so
its receipt is found again on rerun), independent of dict key order, of the
process and of the Python version. Each key is a SHA-256 over canonical JSON
(:func:`~trioplay._json.canonical_json`). Changing any spelling here makes
every stored receipt unreachable: ``tests/test_properties.py`` pins them.

Scopes (``docs/architecture.md``, "Receipt scopes"): a tool call is scoped to
the play, so the same input is paid for once across the play's runs; a step
or a fetch to the run; a row step to the run and the row; an event wait to the
run, the row, its name, its key and how many waits on them came before it.
"""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING, Any

from ._json import canonical_json, digest

if TYPE_CHECKING:
    from collections.abc import Callable


def tool_receipt_key(tool_id: str, canonical_input: str, scope: str) -> str:
    """The receipt key of a tool call.

    SHA-256 over the canonical JSON of ``["tool", tool_id, scope]`` followed by
    the canonical JSON of the input: independent of dict key order, of the
    process and of the Python version.
    """
    return _key_hasher(tool_id, scope)(canonical_input)


@functools.lru_cache(maxsize=1024)
def _key_hasher(tool_id: str, scope: str) -> Callable[[str], str]:
    """The key function of one tool in one scope, its head hashed once."""
    head = hashlib.sha256(canonical_json(["tool", tool_id, scope]).encode())

    def key(canonical_input: str) -> str:
        digest = head.copy()
        digest.update(canonical_input.encode())
        return digest.hexdigest()

    return key


def step_receipt_key(run_id: str, key: str) -> str:
    """The receipt key of ``ctx.step(key, ...)``: one per run."""
    return digest("step", run_id, key)


def row_step_receipt_key(run_id: str, dataset: str, row_key: str, key: str) -> str:
    """The receipt key of ``rc.step(key, ...)``: one per run and row of ``dataset``."""
    return digest("step", run_id, dataset, row_key, key)


def fetch_receipt_key(run_id: str, identity: dict[str, Any]) -> str:
    """The receipt key of a fetch, ``identity`` being ``Fetcher.prepare(...).identity()``."""
    return digest("fetch", run_id, identity)


def wait_key(
    run_id: str, dataset: str | None, row_key: str | None, name: str, key_json: str, occurrence: int
) -> str:
    """The key of an event wait: one per run, row (``None`` for the play's own), name,
    key and occurrence (the first wait on ``(name, key)`` in its row is 0, the next 1, ...).

    Derived like a receipt key, so a rerun meets the same wait again.
    """
    return digest("wait", run_id, dataset, row_key, name, key_json, occurrence)


def idempotency_key(receipt_key: str, lease_id: str | None) -> str:
    """The provider idempotency key of a call (``ToolCall.idempotency_key``).

    The same on every try of one receipt, so a provider that deduplicates
    sees one request; a forced call passes its ``lease_id`` and so asks anew.
    """
    material = receipt_key if lease_id is None else f"{receipt_key}:{lease_id}"
    return hashlib.sha256(material.encode()).hexdigest()[:32]
