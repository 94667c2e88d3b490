"""Figures from the long table (matplotlib, Agg backend, PNG).

Per task: learning curves of the return and of each cost with its limit line;
multiplier trajectories (with the optimal multipliers lambda* where the task has
them); return against normalised violation of every run; and, for algorithms that
log ``eff_w_*``, the effective weights of the GRPO aggregators. Curves are the mean
over seeds on a common env-step grid (linear interpolation, up to the shortest run)
with the min-max band of the seeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from constrained_grpo.eval.metrics import run_metrics  # noqa: E402
from constrained_grpo.eval.runner import TaskMeta  # noqa: E402
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


def _colors(algos: list[str]) -> dict[str, tuple[float, ...]]:
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(algos)}


def _band(ax: plt.Axes, train: pd.DataFrame, column: str, label: str, color: tuple[float, ...]) -> bool:
    c = curve(train, column)
    if c is None:
        return False
    x, mean, lo, hi = c
    ax.plot(x, mean, color=color, label=label, lw=1.5)
    ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0)
    return True


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def make_plots(table: pd.DataFrame, tasks: Mapping[str, TaskMeta], out: str | Path) -> list[Path]:
    """Write every figure of every task under ``out``; return the paths."""
    out = Path(out)
    paths: list[Path] = []
    runs = run_metrics(table, tasks)
    for task in sorted(table["task"].unique()):
        meta = tasks[task]
        rows = table[(table["task"] == task) & (table["kind"] == "train")]
        algos = sorted(rows["algo"].unique())
        colors = _colors(algos)
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
                _band(ax, rows[rows["algo"] == a], f"cost_{c.name}", a, colors[a])
            ax.axhline(c.limit, color="r", ls="--", lw=1, label=f"limit {c.limit:g}")
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
                    _band(ax, rows[rows["algo"] == a], f"lambda_{n}", a, colors[a])
                if meta.optimal_multipliers is not None:
                    ax.axhline(meta.optimal_multipliers[j], color="k", ls=":", lw=1, label="optimal λ*")
                ax.set(title=f"multiplier λ {n}", xlabel="env steps")
                ax.legend(fontsize=7)
            fig.suptitle(task, fontsize=10)
            paths.append(_save(fig, out / f"{stem}_multipliers.png"))

        # Return against violation, one point per run.
        r = runs[runs["task"] == task]
        fig, ax = plt.subplots(figsize=(5, 4))
        for a in algos:
            g = r[r["algo"] == a]
            ax.scatter(g["violation"], g["eval_return"], color=colors[a], label=a, s=28, alpha=0.8)
        if meta.optimum_return is not None:
            ax.axhline(meta.optimum_return, color="k", ls="--", lw=1, label="optimum R*")
        ax.axvline(0.0, color="r", ls=":", lw=1)
        ax.set(title=f"{task}: return vs violation", xlabel="max_k max(0, J_k - d_k)/d_k (eval)", ylabel="eval return")
        ax.legend(fontsize=7)
        paths.append(_save(fig, out / f"{stem}_return_vs_violation.png"))

        # Effective weights of the GRPO aggregators (eff_w_<component>).
        eff_cols = sorted(c for c in rows.columns if c.startswith("eff_w_") and rows[c].notna().any())
        eff_algos = [a for a in algos if rows.loc[rows["algo"] == a, eff_cols].notna().any().any()] if eff_cols else []
        if eff_algos:
            fig, axes = plt.subplots(1, len(eff_algos), figsize=(4.2 * len(eff_algos), 3.4), squeeze=False)
            comp_colors = _colors(eff_cols)
            for j, a in enumerate(eff_algos):
                ax = axes[0, j]
                for col in eff_cols:
                    _band(ax, rows[rows["algo"] == a], col, col.removeprefix("eff_w_"), comp_colors[col])
                ax.set(title=f"{a}: effective weights", xlabel="env steps")
                ax.legend(fontsize=7)
            fig.suptitle(task, fontsize=10)
            paths.append(_save(fig, out / f"{stem}_effective_weights.png"))
    return paths
