"""One colour per algorithm, the same in every figure (``cgrpo plot`` and the coupling analysis).

An algorithm's colour comes from its name alone: the suite's main algorithms have fixed
colours; any other name takes the palette entry at ``crc32(name) mod len(PALETTE)``. Two
algorithms of one figure that would share a colour are told apart by giving the later
name (in sorted order) the next free entry, so a figure never shows one colour twice.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

__all__ = ["PALETTE", "algo_color", "algo_colors", "algo_marker"]

#: Tableau 10, then the lighter Tableau 20 tones: distinct hues first.
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)

#: Fixed palette entries of the algorithms most figures show.
_FIXED: dict[str, int] = {
    "cgrpo": 0, "grpo": 1, "grpo-screw": 2, "ppo-lag": 3, "pid-lag": 4, "cpo": 5, "cgrpo-dara": 6,
    "ppo": 7, "saute-ppo": 8, "focops": 9, "cgrpo-pid": 10, "trpo-lag": 11, "cgrpo-gdpo": 12, "pcpo": 13,
    "cup": 14, "p3o": 15, "rcpo": 16, "cgrpo-softmax": 18, "cgrpo-norm": 19,
}

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _preferred(name: str) -> int:
    return _FIXED.get(name, zlib.crc32(name.encode()) % len(PALETTE))


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
    for name in sorted(set(algos)):
        i = _preferred(name)
        for step in range(len(PALETTE)):
            if (i + step) % len(PALETTE) not in used:
                i = (i + step) % len(PALETTE)
                break
        used.add(i)
        out[name] = PALETTE[i]
    return out


def algo_marker(name: str) -> str:
    """A marker per algorithm (from its name), so that coinciding points stay apart."""
    return _MARKERS[zlib.crc32(name.encode()) % len(_MARKERS)]
