"""One colour per algorithm, the same in every figure (``cgrpo plot`` and the coupling analysis).

An algorithm's colour comes from its name alone: the suite's main algorithms have fixed
colours; any other name takes the entry ``crc32(name) mod 20`` of the first 20 (Tableau 20).
Two algorithms that would share a colour are told apart by giving the later name (the fixed
names first, then in sorted order) the next free entry, the 15 Tableau 20b tones after the
first 20 included, so that up to ``len(PALETTE)`` = 35 algorithms (the standard board draws 31:
28 learners and 3 references) never show one colour twice; past that, colours repeat in the
same order. ``cgrpo plot`` and the HTML page take the colours of all their algorithms at
once, so an algorithm has one colour across a board's tasks.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

__all__ = ["HIGHLIGHT", "PALETTE", "algo_color", "algo_colors", "algo_marker", "highlighted_colors", "muted"]

#: Tableau 10, then the lighter Tableau 20 tones: distinct hues first; then 10 Tableau 20b
#: tones (the darkest of each of its five hues, then one mid tone each) and its 5 lightest,
#: taken only when a figure has used the first 20.
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd",
    "#9c9ede", "#cedb9c", "#e7cb94", "#e7969c", "#de9ed6",
)
#: The entries a name's hash picks from (the first 20), so that an algorithm's preferred
#: colour is the same as before the darker tones were added.
_HASHED = 20

#: Fixed palette entries of the algorithms most figures show.
_FIXED: dict[str, int] = {
    "cgrpo": 0, "grpo": 1, "grpo-screw": 2, "ppo-lag": 3, "pid-lag": 4, "cpo": 5, "cgrpo-dara": 6,
    "ppo": 7, "saute-ppo": 8, "focops": 9, "cgrpo-pid": 10, "trpo-lag": 11, "cgrpo-gdpo": 12, "pcpo": 13,
    "cup": 14, "p3o": 15, "rcpo": 16, "cgrpo-softmax": 18, "cgrpo-norm": 19,
}

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _preferred(name: str) -> int:
    return _FIXED.get(name, zlib.crc32(name.encode()) % _HASHED)


def algo_color(name: str) -> str:
    """The colour of algorithm ``name`` (hex), the same in every figure."""
    return PALETTE[_preferred(name)]


def algo_colors(algos: Iterable[str]) -> dict[str, str]:
    """Colours of the algorithms of one figure: :func:`algo_color`, made distinct.

    >>> algo_colors(["grpo", "cgrpo"])
    {'cgrpo': '#1f77b4', 'grpo': '#ff7f0e'}
    """
    used: set[int] = set()
    out: dict[str, str] = {}
    # The suite's fixed colours first, so that they never move to make room for a hashed name.
    for name in sorted(set(algos), key=lambda n: (n not in _FIXED, n)):
        i = _preferred(name)
        # The first 20 from the preferred entry on (wrapping), then the darker tones.
        order = [(i + step) % _HASHED for step in range(_HASHED)] + list(range(_HASHED, len(PALETTE)))
        free = [j for j in order if j not in used]
        if not free:  # every colour taken: a new round, in the same order
            used.clear()
            free = [i]
        used.add(free[0])
        out[name] = PALETTE[free[0]]
    return out


def algo_marker(name: str) -> str:
    """A marker per algorithm (from its name), so that coinciding points stay apart."""
    return _MARKERS[zlib.crc32(name.encode()) % len(_MARKERS)]


#: The reserved colour of a highlighted algorithm (``--highlight``): in no figure's palette.
HIGHLIGHT = "#d6008f"


def muted(color: str, keep: float = 0.5) -> str:
    """``color`` blended with white: ``keep`` of it, the rest white (the others beside a highlight).

    >>> muted("#1f77b4")
    '#8fbbda'
    """
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(keep * c + (1 - keep) * 255):02x}" for c in rgb)


def highlighted_colors(colors: dict[str, str], highlight: str) -> dict[str, str]:
    """``colors`` with ``highlight`` in :data:`HIGHLIGHT` and every other algorithm :func:`muted`."""
    return {a: HIGHLIGHT if a == highlight else muted(c) for a, c in colors.items()}
