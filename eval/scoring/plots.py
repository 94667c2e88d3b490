"""Figures from the long table (matplotlib, Agg backend, PNG).

Per task: learning curves of the return and of each cost with its limit d and the
feasibility tolerance d(1 + tol); multiplier trajectories (with the optimal multipliers
lambda* only for algorithms whose lambda is in the reward's units, the only ones it can be
compared with); return against normalised violation of every run, with the tolerance
line at tol; and, for algorithms that log ``eff_w_*``, the effective weights of the GRPO
aggregators. Each algorithm has one colour in every figure (``eval.colors``).

Curves. A line is the mean over the S seeds on a common env-step grid (each seed linearly
interpolated, up to the shortest run). The band around it:

* return, a non-indicator cost, a multiplier, an effective weight: the seeds' min-max,
  [min_s y_s(t), max_s y_s(t)], clipped at 0 for costs and multipliers (neither can be
  negative);
* an indicator cost (``Constraint.indicator``: the per-iteration training cost is the
  fraction of episodes with an event, a per-episode probability): the Wilson 95% score
  interval of the mean rate p = E[y_s(t)], with the seeds as the n = S independent units and
  p_hat = (1/S) sum_s y_s(t)::

      centre = (p_hat + z^2/(2n)) / (1 + z^2/n)
      half   = z / (1 + z^2/n) * sqrt(p_hat (1 - p_hat)/n + z^2/(4n^2)),   z = 1.95996

  A seed's rate y_s lies in [0, 1], so Var y_s <= p (1 - p) (Bhatia-Davis), the binomial
  variance that the score interval inverts: the interval is valid (conservative where the
  seeds agree) without knowing how many episodes each iteration ended, and it counts the
  seed-to-seed spread that pooling the episodes of all seeds would hide. It stays in
  [0, 1], where a min-max band of two seeds spans 0..1 as soon as one seed saw an event.

Each figure says which band it draws in a caption below the axes.

Return against violation: one point per run (final policy, primary evaluation). Markers
have equal area whatever their shape (``s`` scaled by area('o') / area(shape), the areas
of matplotlib's unit marker paths). Runs at the same point are concentric markers (the
first drawn largest, area (1 + 1.2 r) for rank r from the top); every group of markers
that touch on screen (centres closer than the larger marker's diameter) and holds more than
one algorithm is named by a label in a column at the right of the axes, with a leader line,
stacked so that no two labels overlap (:func:`stack_positions`).

Legibility: env-step axes read 500k / 1.5M with at most 6 ticks (:func:`env_steps_axis`);
one legend per figure, right of the top-right axes and off every data area
(:func:`outside_legend`), with as many columns as that height needs; layout is matplotlib's constrained layout, so nothing is
clipped, and the PNGs are deterministic (no Software metadata).
"""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.markers import MarkerStyle  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402
from matplotlib.transforms import ScaledTranslation  # noqa: E402

from constrained_grpo.eval.scoring.colors import algo_colors, algo_marker, highlighted_colors  # noqa: E402
from constrained_grpo.eval.scoring.metrics import run_metrics  # noqa: E402
from constrained_grpo.eval.storage import safe_name  # noqa: E402
from constrained_grpo.schema import TaskMeta  # noqa: E402

__all__ = [
    "MARKER_SIZE",
    "band",
    "build_figures",
    "caption",
    "curve",
    "env_steps_axis",
    "iter_figures",
    "make_plots",
    "marker_size",
    "outside_legend",
    "stack_positions",
    "steps_label",
    "wilson_interval",
]

_GRID_POINTS = 200
#: Two-sided 95% normal quantile.
_Z95 = 1.959963984540054
#: Area (points^2, scatter's ``s``) of a plain circle marker; other shapes get the same area.
MARKER_SIZE = 36.0
#: Width of one panel (inches) and height of a row of panels; legends and captions add to these.
_PANEL_W, _PANEL_H = 4.2, 3.2
_FONT = 7  # legends, captions and point labels
_DPI = 110


# ------------------------------------------------------------------------------ statistics


def curve(train: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean, min, max) of ``column`` over seeds on a common grid; None if no seed has it."""
    c = _seed_values(train, column)
    if c is None:
        return None
    grid, values = c
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def _seed_values(train: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(grid, values[seed, grid]): each seed with ``column`` interpolated on the steps all cover."""
    series = []
    for _, run in train.groupby("seed", sort=True):
        run = run.sort_values("iteration")
        if column not in run or run[column].isna().all():
            continue
        ok = run[column].notna()
        series.append((run.loc[ok, "env_steps"].to_numpy(dtype=float), run.loc[ok, column].to_numpy(dtype=float)))
    if not series:
        return None
    end = min(s[-1] for s, _ in series)
    start = max(s[0] for s, _ in series)
    grid = np.linspace(start, end, _GRID_POINTS) if end > start else np.array([end])
    return grid, np.stack([np.interp(grid, s, v) for s, v in series])


def wilson_interval(p: np.ndarray | float, n: int, z: float = _Z95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (lo, hi) of a rate p_hat from n units (module docstring), in [0, 1].

    >>> [round(float(v), 4) for v in wilson_interval(0.0, 10)]
    [0.0, 0.2775]
    """
    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * np.sqrt(p * (1 - p) / n + z2n / (4 * n))
    # Clip only the rounding: the exact interval lies in [0, 1] (lo = 0 exactly at p_hat = 0).
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def band(
    train: pd.DataFrame, column: str, *, indicator: bool = False, floor: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean, lo, hi) over seeds: the min-max band clipped at ``floor``, or for an
    ``indicator`` rate the Wilson 95% interval of the mean with n = the seeds (module docstring)."""
    c = _seed_values(train, column)
    if c is None:
        return None
    grid, values = c
    mean = values.mean(axis=0)
    if indicator:
        lo, hi = wilson_interval(mean, len(values))
    else:
        lo, hi = values.min(axis=0), values.max(axis=0)
        if floor is not None:
            lo, hi = np.maximum(lo, floor), np.maximum(hi, floor)
    return grid, mean, lo, hi


# ------------------------------------------------------------------------------ legibility helpers


def steps_label(value: float, _pos: int | None = None) -> str:
    """An env-step count in at most 4 significant digits: 0, 500, 250k, 1.5M, 2G."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def env_steps_axis(ax: plt.Axes, label: str = "env steps") -> None:
    """An env-step x axis: at most 6 ticks at round values, labelled 250k / 1.5M (no "1e6" offset)."""
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10], integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(steps_label))
    ax.set_xlabel(label)


def _dedupe(handles: Sequence[Any], labels: Sequence[str]) -> tuple[list[Any], list[str]]:
    seen: dict[str, Any] = {}
    for h, lab in zip(handles, labels):
        if lab and not lab.startswith("_"):
            seen.setdefault(lab, h)
    return list(seen.values()), list(seen)


def outside_legend(fig: plt.Figure, handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None,
                   fontsize: float = _FONT) -> Any:
    """One legend for the whole figure, right of its top-right axes, off every data area.

    Without ``handles``, the entries of every axes, each label once. It hangs from the top of
    the top-right axes (so below the suptitle, which a figure legend at the top would run
    into), in the layout's right margin; it gets as many columns as it needs to fit beside
    that axes and its tick labels, and the figure widens by its width so that the axes
    keep theirs. :func:`_name_points` moves it right of its label column.
    """
    if handles is None:
        pairs = [ax.get_legend_handles_labels() for ax in fig.axes]
        handles, labels = [h for hs, _ in pairs for h in hs], [lab for _, ls in pairs for lab in ls]
    handles, labels = _dedupe(handles, labels or [])
    if not handles:
        return None
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # the layout places the axes whose top the legend hangs from
    ax = max(fig.axes, key=lambda a: (round(a.get_position().y1, 3), a.get_position().x1))
    # Pixels: the axes' height and its tick labels below. Longer, the layout would count the legend as
    # the axes' decoration and shrink them to make room below.
    room = ax.get_window_extent(renderer).height + 0.3 * fig.dpi
    kw = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, "fontsize": fontsize}
    leg = ax.legend(handles, labels, **kw)
    tall = leg.get_window_extent(renderer).height
    if tall > room:  # too tall for one column: as few columns as fit
        ncols = math.ceil(len(handles) / max(1, math.floor(len(handles) * room / tall)))
        leg = ax.legend(handles, labels, ncols=ncols, **kw)  # replaces the first
    w, h = fig.get_size_inches()
    fig.set_size_inches(w + leg.get_window_extent(renderer).width / fig.dpi + 0.1, h)
    return leg


def caption(fig: plt.Figure, text: str, fontsize: float = _FONT) -> Any:
    """A caption under the axes (what the lines and bands are), wrapped to the figure's
    width; the constrained layout is confined to the area above it."""
    w, h = fig.get_size_inches()
    chars = max(40, int(w * 72 / (0.6 * fontsize)))  # DejaVu Sans averages about 0.55 em a character
    t = fig.text(0.01, 0.01, textwrap.fill(text, chars), ha="left", va="bottom", fontsize=fontsize, color="0.25")
    height = t.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi + 0.08
    fig.set_size_inches(w, h + height)  # the axes keep their height
    frac = (height + 0.02) / (h + height)
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.set(rect=(0.0, frac, 1.0, 1.0 - frac))
    return t


def _seeds_phrase(rows: pd.DataFrame) -> str:
    counts = sorted(set(rows.groupby("algo")["seed"].nunique()))
    if not counts:
        return "no seeds"
    if len(counts) == 1:
        return f"{counts[0]} seed{'s' * (counts[0] != 1)}"
    return f"{counts[0]}-{counts[-1]} seeds (per algorithm)"


@functools.cache
def _unit_area(marker: str) -> float:
    """Area of matplotlib's path of ``marker`` at size 1 (shoelace over its polygons)."""
    style = MarkerStyle(marker)
    path = style.get_path().transformed(style.get_transform())
    return float(sum(abs(0.5 * (np.dot(p[:-1, 0], p[1:, 1]) - np.dot(p[1:, 0], p[:-1, 1])))
                     for p in path.to_polygons(closed_only=True)))


def marker_size(marker: str, size: float = MARKER_SIZE) -> float:
    """Scatter ``s`` giving ``marker`` the area of a circle of ``s = size`` (a star's path covers
    0.28 of its box, a circle's 0.79, a square's 1: equal ``s`` makes stars look small)."""
    return size * _unit_area("o") / _unit_area(marker)


def stack_positions(wanted: Sequence[float], heights: Sequence[float], lo: float = 0.0, hi: float = 1.0,
                    gap: float = 0.0) -> list[float]:
    """Centres near ``wanted`` for boxes of ``heights`` in one column, none overlapping, within
    [lo, hi] where they fit: placed top-down at min(wanted, room left), then pushed up from
    ``lo`` where the stack ran out of room. Deterministic; the order of ``wanted`` is kept."""
    order = sorted(range(len(wanted)), key=lambda i: (-wanted[i], i))
    centre = [0.0] * len(wanted)
    top = hi
    for i in order:
        centre[i] = min(wanted[i], top - heights[i] / 2)
        top = centre[i] - heights[i] / 2 - gap
    floor = lo
    for i in reversed(order):
        centre[i] = max(centre[i], floor + heights[i] / 2)
        floor = centre[i] + heights[i] / 2 + gap
    return centre


def _figure(ncols: int, nrows: int = 1, width: float = _PANEL_W, height: float = _PANEL_H) -> tuple[plt.Figure, np.ndarray]:
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, layout="constrained",
                        dpi=_DPI)


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI, metadata={"Software": None})  # no version string: the same runs give the same bytes
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------ figures


def _component_colors(columns: list[str]) -> dict[str, Any]:
    """Colours of the components of the effective weights (reward, then the costs): not algorithms."""
    cmap = plt.get_cmap("Dark2")
    return {c: cmap(i % 8) for i, c in enumerate(columns)}


def _band(ax: plt.Axes, train: pd.DataFrame, column: str, label: str, color: Any, floor: float | None = None,
          indicator: bool = False, lw: float = 1.5, top: bool = False) -> bool:
    """Draw :func:`band`'s mean and band; False if no seed has ``column``. ``top`` (a
    highlighted algorithm): its line above every other, its band below them all."""
    c = band(train, column, indicator=indicator, floor=floor)
    if c is None:
        return False
    x, mean, lo, hi = c
    ax.plot(x, mean, color=color, label=label, lw=lw, zorder=3 if top else 2)
    ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0, zorder=0.5 if top else 1)
    return True


def _coinciding(x: np.ndarray, y: np.ndarray) -> list[list[int]]:
    """Groups of indices whose points coincide (equal to 1e-9 relative), each group in input order."""
    groups: dict[tuple[float, float], list[int]] = {}
    for i, (a, b) in enumerate(zip(x, y)):
        key = (round(float(a), 9), round(float(b), 9))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _return_vs_violation(ax: plt.Axes, r: pd.DataFrame, colors: Mapping[str, Any], tol: float,
                         highlight: str | None = None) -> list[dict[str, Any]]:
    """One point per run, of equal area per shape; points at the same place become concentric
    markers (the first drawn largest). Returns the drawn places (x, y, algorithms, diameter in
    points) for :func:`_name_points`."""
    r = r.sort_values(["algo", "seed"]).reset_index(drop=True)
    x, y = r["violation"].to_numpy(dtype=float), r["eval_return"].to_numpy(dtype=float)
    places: list[dict[str, Any]] = []
    for group in _coinciding(x, y):
        algos_here = list(dict.fromkeys(r.loc[group, "algo"]))
        for rank, a in enumerate(algos_here):
            grow = 1 + 1.2 * (len(algos_here) - 1 - rank)  # area steps: each ring stays visible
            ax.scatter(x[group[0]], y[group[0]], s=marker_size(algo_marker(a)) * grow, facecolor=colors[a],
                       edgecolor="white", lw=0.6, marker=algo_marker(a), zorder=(20 if a == highlight else 2) + rank)
        diameter = math.sqrt(MARKER_SIZE * (1 + 1.2 * (len(algos_here) - 1)))
        places.append({"x": x[group[0]], "y": y[group[0]], "algos": algos_here, "diameter": diameter})
    for a in sorted(set(r["algo"])):  # one legend entry per algorithm, at the plain marker size, in name order
        ax.scatter([], [], s=marker_size(algo_marker(a)), facecolor=colors[a], marker=algo_marker(a), label=a)
    ax.axvline(0.0, color="0.6", ls="-", lw=0.6)
    ax.axvline(tol, color="r", ls=":", lw=1, label=f"tolerance {tol:g} (J ≤ d(1+{tol:g}))")
    return places


def _clusters(places: Sequence[Mapping[str, Any]], xy: np.ndarray, px_per_pt: float) -> list[list[int]]:
    """Places whose markers touch on screen (centre distance < the larger diameter), by union-find."""
    parent = list(range(len(places)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(places)):
        for j in range(i + 1, len(places)):
            reach = max(places[i]["diameter"], places[j]["diameter"]) * px_per_pt
            if np.hypot(*(xy[i] - xy[j])) < reach:
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(places)):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _name_points(fig: plt.Figure, ax: plt.Axes, places: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Name every touching group of markers with more than one algorithm: labels stacked in a
    column right of the axes (:func:`stack_positions`), each with a leader line to its group.
    The figure grows wider by the column and taller if the stack needs more than the axes' height."""
    if not places:
        return []
    fig.draw_without_rendering()  # the layout fixes the data -> pixel transform the clusters are measured in
    renderer = fig.canvas.get_renderer()
    xy = ax.transData.transform(np.array([[p["x"], p["y"]] for p in places], dtype=float))
    labels: list[str] = []
    anchors: list[np.ndarray] = []  # data coordinates of each group's centre
    for g in _clusters(places, xy, fig.dpi / 72):
        if len({a for i in g for a in places[i]["algos"]}) < 2:
            continue
        parts: list[str] = []  # "a = b": the same point; "a, b": touching points; each name once
        seen: set[str] = set()
        for i in g:
            names = places[i]["algos"]
            if len(names) > 1 or names[0] not in seen:
                part = " = ".join(names)
                if part not in parts:
                    parts.append(part)
                seen.update(names)
        labels.append(textwrap.fill(", ".join(parts), 38, break_on_hyphens=False))
        anchors.append(ax.transData.inverted().transform(xy[g].mean(axis=0)))
    if not labels:
        return []
    size = _FONT - 1
    probes = [fig.text(0, 0, s, fontsize=size) for s in labels]
    extents = [t.get_window_extent(renderer) for t in probes]  # pixels
    for t in probes:
        t.remove()
    column = max(e.width for e in extents) / fig.dpi + 0.15  # inches: the labels' column, right of the axes
    leg = ax.get_legend()
    if leg is not None:  # the legend moves right of the column, its top still at the axes' top
        leg.set_bbox_to_anchor((1.02, 1.0), transform=ax.transAxes + ScaledTranslation(column, 0.0, fig.dpi_scale_trans))
    gap = 3.0
    need = sum(e.height for e in extents) + gap * len(extents)
    box = ax.get_window_extent(renderer)
    w, h = fig.get_size_inches()
    # Wider by the column (the layout then keeps the axes' width), taller where the stack needs it.
    fig.set_size_inches(w + column + 0.1,
                        h + max(0.0, need - box.height) / fig.dpi + (0.2 if need > box.height else 0.0))
    out = []
    for s, anchor in zip(labels, anchors):
        out.append(ax.annotate(
            s, xy=tuple(anchor), xycoords="data", xytext=(1.03, 0.5), textcoords="axes fraction",
            ha="left", va="center", fontsize=size, color="0.2", annotation_clip=False,
            arrowprops={"arrowstyle": "-", "color": "0.55", "lw": 0.5, "shrinkA": 0, "shrinkB": 3},
        ))
    fig.draw_without_rendering()  # the layout with the column in place: the axes' final height
    box = ax.get_window_extent(renderer)
    wanted = [float(np.clip(ax.transAxes.inverted().transform(ax.transData.transform(a))[1], 0.0, 1.0)) for a in anchors]
    centres = stack_positions(wanted, [e.height / box.height for e in extents], 0.0, 1.0, gap / box.height)
    for a, yc in zip(out, centres):
        a.set_position((1.03, yc))
    return out


def _curves_figure(rows: pd.DataFrame, meta: TaskMeta, algos: list[str], colors: Mapping[str, Any],
                   tol: float, highlight: str | None = None) -> plt.Figure:
    fig, axes = _figure(1 + len(meta.constraints))
    ax = axes[0, 0]
    for a in algos:
        _band(ax, rows[rows["algo"] == a], "return", a, colors[a], lw=_width(a, highlight), top=a == highlight)
    if meta.optimum_return is not None:
        ax.axhline(meta.optimum_return, color="k", ls="--", lw=1, label="optimum R*")
    ax.set(title="return")
    env_steps_axis(ax)
    for j, c in enumerate(meta.constraints, start=1):
        ax = axes[0, j]
        for a in algos:
            _band(ax, rows[rows["algo"] == a], f"cost_{c.name}", a, colors[a], floor=0.0, indicator=c.indicator,
                  lw=_width(a, highlight), top=a == highlight)
        # Generic labels, so that the figure's one legend lists each kind of line once; the values are in the title.
        ax.axhline(c.limit, color="r", ls="--", lw=1, label="limit d")
        ax.axhline(c.limit * (1 + tol), color="r", ls=":", lw=1, label=f"tolerance d(1+{tol:g})")
        kind = "episode rate" if c.indicator else "episodic cost"
        ax.set(title=f"cost {c.name} ({kind}), d = {c.limit:g}")
        env_steps_axis(ax)
    fig.suptitle(meta.task, fontsize=10)
    outside_legend(fig)
    indicators = [c.name for c in meta.constraints if c.indicator]
    plain = ["return", *(c.name for c in meta.constraints if not c.indicator)]
    text = (f"Lines: mean over {_seeds_phrase(rows)} on a common env-step grid (linear interpolation, up to the "
            f"shortest run). band: min-max over the seeds ({', '.join(plain)}; costs clipped at 0)")
    if indicators:
        text += (f"; for the indicator cost{'s' * (len(indicators) > 1)} {', '.join(indicators)}: Wilson 95% score "
                 "interval of the mean rate, n = number of seeds")
    caption(fig, text + ".")
    return fig


def _multipliers_figure(rows: pd.DataFrame, meta: TaskMeta, algos: list[str], colors: Mapping[str, Any],
                        in_units: Mapping[str, bool], highlight: str | None = None) -> plt.Figure:
    names = meta.constraint_names
    fig, axes = _figure(len(names))
    for j, n in enumerate(names):
        ax = axes[0, j]
        for a in algos:
            _band(ax, rows[rows["algo"] == a], f"lambda_{n}", a, colors[a], floor=0.0, lw=_width(a, highlight),
                  top=a == highlight)
        comparable = [a for a in algos if in_units.get(a) and rows.loc[rows["algo"] == a, f"lambda_{n}"].notna().any()]
        if meta.optimal_multipliers is not None and comparable:
            # lambda* weighs costs in reward units: only these algorithms' lambda can be read against it.
            ax.axhline(meta.optimal_multipliers[j], color="k", ls=":", lw=1,
                       label=f"optimal λ* (same units: {', '.join(comparable)})")
        ax.set(title=f"multiplier λ {n}")
        env_steps_axis(ax)
    fig.suptitle(meta.task, fontsize=10)
    outside_legend(fig)
    caption(fig, f"Lines: mean over {_seeds_phrase(rows)} on a common env-step grid. "
                 "band: min-max over the seeds, clipped at 0 (a multiplier is never negative).")
    return fig


def _width(algo: str, highlight: str | None) -> float:
    """Line width: the highlighted algorithm's thicker."""
    return 2.6 if algo == highlight else 1.5


def _return_vs_violation_figure(r: pd.DataFrame, meta: TaskMeta, colors: Mapping[str, Any], tol: float,
                                highlight: str | None = None) -> plt.Figure:
    fig, axes = _figure(1, width=5.0, height=4.0)
    ax = axes[0, 0]
    places = _return_vs_violation(ax, r, colors, tol, highlight)
    if meta.optimum_return is not None:
        ax.axhline(meta.optimum_return, color="k", ls="--", lw=1, label="optimum R*")
    ax.set(title=f"{meta.task}: return vs violation", xlabel="max_k max(0, J_k - d_k)/d_k (eval)", ylabel="eval return")
    outside_legend(fig)
    caption(fig, "One point per run (its final policy's evaluation); no band. Markers of one area whatever "
                 "their shape; runs at the same point drawn as concentric markers, and markers that touch "
                 "named at the right ('=': the same point, ',': nearby points).")
    _name_points(fig, ax, places)
    return fig


def _effective_weights_figure(rows: pd.DataFrame, meta: TaskMeta, eff_algos: list[str], eff_cols: list[str]) -> plt.Figure:
    ncols = min(4, len(eff_algos))  # wrap: a figure one panel per algorithm wide is unreadable past four
    nrows = math.ceil(len(eff_algos) / ncols)
    fig, axes = _figure(ncols, nrows)
    comp_colors = _component_colors(eff_cols)
    for j, a in enumerate(eff_algos):
        ax = axes.flat[j]
        for col in eff_cols:
            _band(ax, rows[rows["algo"] == a], col, col.removeprefix("eff_w_"), comp_colors[col])
        ax.set(title=f"{a}: effective weights")
        env_steps_axis(ax)
    for ax in axes.flat[len(eff_algos):]:
        ax.remove()
    fig.suptitle(meta.task, fontsize=10)
    outside_legend(fig)
    caption(fig, f"Lines: mean over {_seeds_phrase(rows[rows['algo'].isin(eff_algos)])} on a common env-step grid "
                 "of each component's effective weight. band: min-max over the seeds.")
    return fig


def iter_figures(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    *,
    tol: float = 0.1,
    lambda_in_reward_units: Mapping[str, bool] | None = None,
    evals: pd.DataFrame | None = None,
    highlight: str | None = None,
) -> Iterator[tuple[str, plt.Figure]]:
    """(file name, figure) of every figure of every task, built one at a time (arguments as
    :func:`make_plots`); the caller saves or closes each."""
    in_units = dict(lambda_in_reward_units or {})
    runs = run_metrics(table, tasks, evals=evals)
    # One colour per algorithm across every task's figures; a highlighted one apart, the others muted.
    colors = algo_colors(table.loc[table["kind"] == "train", "algo"].unique())
    if highlight is not None:
        colors = highlighted_colors(colors, highlight)
    for task in sorted(table["task"].unique()):
        meta = tasks[task]
        rows = table[(table["task"] == task) & (table["kind"] == "train")]
        # The highlighted algorithm drawn last, on top of the others.
        algos = sorted(rows["algo"].unique(), key=lambda a: (a == highlight, a))
        stem = "_".join(safe_name(p) for p in task.split("/"))
        yield f"{stem}_curves.png", _curves_figure(rows, meta, algos, colors, tol, highlight)
        lam_cols = [f"lambda_{n}" for n in meta.constraint_names if f"lambda_{n}" in rows and rows[f"lambda_{n}"].notna().any()]
        if lam_cols:
            yield f"{stem}_multipliers.png", _multipliers_figure(rows, meta, algos, colors, in_units, highlight)
        yield f"{stem}_return_vs_violation.png", _return_vs_violation_figure(runs[runs["task"] == task], meta, colors, tol,
                                                                              highlight)
        eff_cols = sorted(c for c in rows.columns if c.startswith("eff_w_") and rows[c].notna().any())
        eff_algos = [a for a in algos if rows.loc[rows["algo"] == a, eff_cols].notna().any().any()] if eff_cols else []
        if eff_algos:
            yield f"{stem}_effective_weights.png", _effective_weights_figure(rows, meta, eff_algos, eff_cols)


def build_figures(table: pd.DataFrame, tasks: Mapping[str, TaskMeta], **kwargs: Any) -> dict[str, plt.Figure]:
    """Every figure of :func:`iter_figures`, by file name, open (to inspect; close them after)."""
    return dict(iter_figures(table, tasks, **kwargs))


def make_plots(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    out: str | Path,
    *,
    tol: float = 0.1,
    lambda_in_reward_units: Mapping[str, bool] | None = None,
    evals: pd.DataFrame | None = None,
    highlight: str | None = None,
) -> list[Path]:
    """Write every figure of every task under ``out``; return the paths (``evals``: the
    runs' evaluation summaries when ``table`` holds only train rows).

    ``tol``: the feasibility tolerance on (J - d)/d (the leaderboard's); ``lambda_in_reward_units``
    (per algorithm, ``loader.algo_properties``) says whose multipliers lambda* is drawn beside;
    ``highlight``: an algorithm drawn on top, thicker, in :data:`~constrained_grpo.eval.scoring.colors.HIGHLIGHT`,
    the others muted.
    """
    out = Path(out)
    return [_save(fig, out / name) for name, fig in
            iter_figures(table, tasks, tol=tol, lambda_in_reward_units=lambda_in_reward_units, evals=evals,
                         highlight=highlight)]
