"""Figures from the long table (matplotlib, Agg backend, PNG).

Per task: learning curves of the return and of each cost with its limit d and the
feasibility tolerance d(1 + tol); multiplier trajectories (with the optimal multipliers
lambda* only for algorithms whose lambda is in the reward's units, the only ones it can be
compared with); return against normalised violation of every run, with the tolerance
line at tol (runs at the same point drawn as concentric markers and named); and, for
algorithms that log ``eff_w_*``, the effective weights of the GRPO aggregators. Curves
are the mean over seeds on a common env-step grid (linear interpolation, up to the
shortest run) with the min-max band of the seeds, clipped at 0 for costs and
multipliers (neither can be negative). Each algorithm has one colour in every figure
(``eval.colors``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from constrained_grpo.eval.scoring.colors import algo_colors, algo_marker  # noqa: E402
from constrained_grpo.eval.scoring.metrics import run_metrics  # noqa: E402
from constrained_grpo.schema import TaskMeta  # noqa: E402
from constrained_grpo.eval.storage import safe_name  # noqa: E402

__all__ = ["curve", "make_plots"]

_GRID_POINTS = 200


def curve(train: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean, min, max) of ``column`` over seeds on a common grid; None if no seed has it."""
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
    values = np.stack([np.interp(grid, s, v) for s, v in series])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def _component_colors(columns: list[str]) -> dict[str, Any]:
    """Colours of the components of the effective weights (reward, then the costs): not algorithms."""
    cmap = plt.get_cmap("Dark2")
    return {c: cmap(i % 8) for i, c in enumerate(columns)}


def _band(ax: plt.Axes, train: pd.DataFrame, column: str, label: str, color: Any, floor: float | None = None) -> bool:
    """Mean over seeds and the seeds' min-max band; the band is clipped at ``floor`` (a cost's 0)."""
    c = curve(train, column)
    if c is None:
        return False
    x, mean, lo, hi = c
    if floor is not None:
        lo, hi = np.maximum(lo, floor), np.maximum(hi, floor)
    ax.plot(x, mean, color=color, label=label, lw=1.5)
    ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0)
    return True


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def _coinciding(x: np.ndarray, y: np.ndarray) -> list[list[int]]:
    """Groups of indices whose points coincide (equal to 1e-9 relative), each group in input order."""
    groups: dict[tuple[float, float], list[int]] = {}
    for i, (a, b) in enumerate(zip(x, y)):
        key = (round(float(a), 9), round(float(b), 9))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _return_vs_violation(ax: plt.Axes, r: pd.DataFrame, colors: Mapping[str, Any], tol: float) -> None:
    """One point per run; points at the same place become concentric markers (the first
    drawn largest) with the algorithms named beside them."""
    r = r.sort_values(["algo", "seed"]).reset_index(drop=True)
    x, y = r["violation"].to_numpy(dtype=float), r["eval_return"].to_numpy(dtype=float)
    labelled: set[str] = set()
    for group in _coinciding(x, y):
        algos_here = list(dict.fromkeys(r.loc[group, "algo"]))
        for rank, a in enumerate(algos_here):
            size = 28 * (1 + 1.2 * (len(algos_here) - 1 - rank))
            ax.scatter(x[group[0]], y[group[0]], s=size, facecolor=colors[a], edgecolor="white", lw=0.6,
                       marker=algo_marker(a), zorder=2 + rank)
            if a not in labelled:  # one legend entry per algorithm, at the plain marker size
                ax.scatter([], [], s=28, facecolor=colors[a], marker=algo_marker(a), label=a)
                labelled.add(a)
        if len(algos_here) > 1:
            ax.annotate(" = ".join(algos_here), (x[group[0]], y[group[0]]), xytext=(6, 6),
                        textcoords="offset points", fontsize=6, color="0.25")
    ax.axvline(0.0, color="0.6", ls="-", lw=0.6)
    ax.axvline(tol, color="r", ls=":", lw=1, label=f"tolerance {tol:g} (J ≤ d(1+{tol:g}))")


def make_plots(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    out: str | Path,
    *,
    tol: float = 0.1,
    lambda_in_reward_units: Mapping[str, bool] | None = None,
    evals: pd.DataFrame | None = None,
) -> list[Path]:
    """Write every figure of every task under ``out``; return the paths (``evals``: the
    runs' evaluation summaries when ``table`` holds only train rows).

    ``tol``: the feasibility tolerance on (J - d)/d (the leaderboard's); ``lambda_in_reward_units``
    (per algorithm, ``loader.algo_properties``) says whose multipliers lambda* is drawn beside.
    """
    out = Path(out)
    in_units = dict(lambda_in_reward_units or {})
    paths: list[Path] = []
    runs = run_metrics(table, tasks, evals=evals)
    for task in sorted(table["task"].unique()):
        meta = tasks[task]
        rows = table[(table["task"] == task) & (table["kind"] == "train")]
        algos = sorted(rows["algo"].unique())
        colors = algo_colors(algos)
        stem = "_".join(safe_name(p) for p in task.split("/"))
        names = meta.constraint_names

        # Learning curves: return, then each cost with its limit.
        fig, axes = plt.subplots(1, 1 + len(names), figsize=(4.2 * (1 + len(names)), 3.4), squeeze=False)
        ax = axes[0, 0]
        for a in algos:
            _band(ax, rows[rows["algo"] == a], "return", a, colors[a])
        if meta.optimum_return is not None:
            ax.axhline(meta.optimum_return, color="k", ls="--", lw=1, label="optimum R*")
        ax.set(title="return", xlabel="env steps")
        ax.legend(fontsize=7)
        for j, c in enumerate(meta.constraints, start=1):
            ax = axes[0, j]
            for a in algos:
                _band(ax, rows[rows["algo"] == a], f"cost_{c.name}", a, colors[a], floor=0.0)
            ax.axhline(c.limit, color="r", ls="--", lw=1, label=f"limit d = {c.limit:g}")
            ax.axhline(c.limit * (1 + tol), color="r", ls=":", lw=1, label=f"tolerance d(1+{tol:g})")
            ax.set(title=f"cost {c.name}", xlabel="env steps")
            ax.legend(fontsize=7)
        fig.suptitle(task, fontsize=10)
        paths.append(_save(fig, out / f"{stem}_curves.png"))

        # Multiplier trajectories, if any algorithm has multipliers.
        lam_cols = [f"lambda_{n}" for n in names if f"lambda_{n}" in rows and rows[f"lambda_{n}"].notna().any()]
        if lam_cols:
            fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
            for j, n in enumerate(names):
                ax = axes[0, j]
                for a in algos:
                    _band(ax, rows[rows["algo"] == a], f"lambda_{n}", a, colors[a], floor=0.0)
                comparable = [a for a in algos if in_units.get(a) and rows.loc[rows["algo"] == a, f"lambda_{n}"].notna().any()]
                if meta.optimal_multipliers is not None and comparable:
                    # lambda* weighs costs in reward units: only these algorithms' lambda can be read against it.
                    ax.axhline(meta.optimal_multipliers[j], color="k", ls=":", lw=1,
                               label=f"optimal λ* (same units: {', '.join(comparable)})")
                ax.set(title=f"multiplier λ {n}", xlabel="env steps")
                ax.legend(fontsize=7)
            fig.suptitle(task, fontsize=10)
            paths.append(_save(fig, out / f"{stem}_multipliers.png"))

        # Return against violation, one point per run.
        r = runs[runs["task"] == task]
        fig, ax = plt.subplots(figsize=(5.5, 4.2))
        _return_vs_violation(ax, r, colors, tol)
        if meta.optimum_return is not None:
            ax.axhline(meta.optimum_return, color="k", ls="--", lw=1, label="optimum R*")
        ax.set(title=f"{task}: return vs violation", xlabel="max_k max(0, J_k - d_k)/d_k (eval)", ylabel="eval return")
        ax.legend(fontsize=7)
        paths.append(_save(fig, out / f"{stem}_return_vs_violation.png"))

        # Effective weights of the GRPO aggregators (eff_w_<component>).
        eff_cols = sorted(c for c in rows.columns if c.startswith("eff_w_") and rows[c].notna().any())
        eff_algos = [a for a in algos if rows.loc[rows["algo"] == a, eff_cols].notna().any().any()] if eff_cols else []
        if eff_algos:
            fig, axes = plt.subplots(1, len(eff_algos), figsize=(4.2 * len(eff_algos), 3.4), squeeze=False)
            comp_colors = _component_colors(eff_cols)
            for j, a in enumerate(eff_algos):
                ax = axes[0, j]
                for col in eff_cols:
                    _band(ax, rows[rows["algo"] == a], col, col.removeprefix("eff_w_"), comp_colors[col])
                ax.set(title=f"{a}: effective weights", xlabel="env steps")
                ax.legend(fontsize=7)
            fig.suptitle(task, fontsize=10)
            paths.append(_save(fig, out / f"{stem}_effective_weights.png"))
    return paths
