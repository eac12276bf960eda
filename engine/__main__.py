"""``python -m trioplay``: the same command line as ``trioplay``."""

from __future__ import annotations

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
