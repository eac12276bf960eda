"""The ``trioplay`` command line, its progress display and the bundled demo.

The command line sits on top of the library: it is the only engine room that
imports ``trioplay.stores`` and ``trioplay.adapters``, and no engine module
outside it imports it (``__main__`` aside, the other entry point).
"""

from __future__ import annotations

from ._commands import main

__all__ = ["main"]
