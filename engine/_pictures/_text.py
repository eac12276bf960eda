"""Text in the pictures: how wide it is, and where a lane's labels go without one dropped.

The widths are DejaVu Sans's advance widths (the font the pictures name
first, and what ImageMagick and most Linux browsers draw them with), in ems:
a lane name or a label is measured as drawn, not by a mean width that
underestimates digits (``page 9,900``) and wide letters.
"""

from __future__ import annotations

from typing import NamedTuple

_EM = {
    **dict.fromkeys("0123456789", 0.637),
    **dict.fromkeys(" ,.:;!|", 0.318),
    **dict.fromkeys("ijl'", 0.278),
    **dict.fromkeys("ft", 0.392),
    "r": 0.411,
    "s": 0.521,
    "c": 0.550,
    "z": 0.525,
    **dict.fromkeys("kvxy", 0.592),
    **dict.fromkeys("abdeghnopqu", 0.635),
    "m": 0.974,
    "w": 0.818,
    **dict.fromkeys("-()[]", 0.390),
    "_": 0.500,
    "/": 0.337,
    "#": 0.838,
    "…": 1.000,
    "×": 0.838,
    "=": 0.838,
}
_WIDE = 0.760  # capitals and anything not listed


def text_width(body: str, size: float) -> float:
    """The width in pixels of ``body`` written at ``size`` px in DejaVu Sans (a close bound)."""
    return size * sum(_EM.get(c, _WIDE) for c in body)


class Label(NamedTuple):
    """A label placed in a lane: where it starts, what is written, its colour."""

    x: float
    body: str
    colour: str


_GAP = 8.0  # pixels between two labels of a lane


def place_labels(
    marks: list[tuple[float, str, str]],
    codes: dict[str, str],
    left: float,
    right: float,
    size: float,
) -> list[Label]:
    """Where the labels of one lane go, and whether whole or as their code.

    ``marks`` are ``(x, label, colour)`` where the lane's label changes, in
    order of ``x``. Each is written at its mark, whole if it ends before the
    next mark (or, if it has no room there, ending at its mark when the room
    before it is free), else as its code (``codes``: a label's short name,
    listed in full in the picture's legend). A label never overlaps the one before it:
    one that has no room at its mark moves right (or, at the lane's end,
    left). The first time a label is named in the lane it is always written;
    a change back to a label already named in the lane is left unwritten
    only when not even its code fits before the next mark.
    """
    placed: list[Label] = []
    named: set[str] = set()
    cursor = left  # where the last label written ends, plus a gap
    for n, (x, label, colour) in enumerate(marks):
        start = max(x, cursor)
        end = marks[n + 1][0] - _GAP if n + 1 < len(marks) else right
        whole = text_width(label, size)
        if whole <= end - start:
            body = label
        elif x - whole >= cursor:  # no room after its mark, but before it: ends at the mark
            body, start = label, x - whole
        else:
            body = codes[label]
            width = text_width(body, size)
            if label in named and start + width > end:
                continue  # named already in this lane, and no room even for its code
            start = max(cursor, min(start, right - width))
        placed.append(Label(start, body, colour))
        named.add(label)
        cursor = start + text_width(body, size) + _GAP
    return placed
