"""The pictures room: drawings of a recorded run, above the engine core.

Nothing of the engine's core imports it: the command line (``trioplay
timeline``) and the scenario lab (``timeline.svg``) import it lazily, where
they draw. It reads the typed records and their spans
(:mod:`trioplay._trace._spans`), and needs nothing else.
"""

from __future__ import annotations

from ._timeline import render_timeline as render_timeline
