"""Figures read right: one colour per algorithm everywhere, coinciding points visible, the
tolerance line at d(1 + tol), lambda* only beside multipliers in its units, bands >= 0."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY
from constrained_grpo.eval.scoring import plots
from constrained_grpo.eval.scoring.colors import PALETTE, algo_color, algo_colors
from constrained_grpo.eval.scoring.loader import load_results


def test_an_algorithm_keeps_its_colour_across_figures():
    a = algo_colors(["grpo", "grpo-screw"])
    b = algo_colors(["cgrpo", "grpo", "grpo-screw", "ppo-lag"])
    assert a["grpo"] == b["grpo"] == algo_color("grpo") and a["grpo-screw"] == b["grpo-screw"]
    assert a["grpo"] != a["grpo-screw"]
    many = algo_colors([f"user_algo_{i}" for i in range(len(PALETTE))])
    assert len(set(many.values())) == len(PALETTE)  # distinct within a figure, even for hashed names


def test_coinciding_points_are_all_drawn_and_named():
    r = pd.DataFrame({"algo": ["cgrpo", "grpo", "grpo-screw", "ppo"], "seed": [0, 0, 0, 0],
                      "violation": [0.5, 0.5, 0.0, 0.5], "eval_return": [1.0, 1.0, 0.9, 1.0]})
    fig, ax = plt.subplots()
    plots._return_vs_violation(ax, r, algo_colors(r["algo"]), tol=0.1)
    drawn = [c for c in ax.collections if len(c.get_offsets())]
    assert len(drawn) == 4
    sizes = {tuple(c.get_offsets()[0]): [] for c in drawn}
    for c in drawn:
        sizes[tuple(c.get_offsets()[0])].append(float(c.get_sizes()[0]))
    assert sorted(sizes[(0.5, 1.0)]) == pytest.approx([28.0, 28 * 2.2, 28 * 3.4])  # concentric, none hidden
    assert [t.get_text() for t in ax.texts] == ["cgrpo = grpo = ppo"]
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [0.1]
    plt.close(fig)


def _figures(monkeypatch: pytest.MonkeyPatch, toy_results: Path, tmp_path: Path, units: dict[str, bool]) -> dict[str, plt.Figure]:
    kept: dict[str, plt.Figure] = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.setdefault(path.name, fig) and path)
    res = load_results(toy_results)
    plots.make_plots(res.table, res.tasks, tmp_path, tol=0.1, lambda_in_reward_units=units)
    return kept


def test_limit_tolerance_and_lambda_star_lines(monkeypatch: pytest.MonkeyPatch, toy_results: Path, tmp_path: Path):
    figs = _figures(monkeypatch, toy_results, tmp_path, {})
    curves = figs["Grid_HazardFuel3x3-v0_curves.png"].axes
    # Grid/HazardFuel3x3-v0: hazard d = 0.2, fuel d = 4.4; the tolerance lines at d(1 + 0.1).
    for ax, d in zip(curves[1:], (0.2, 4.4)):
        levels = sorted(line.get_ydata()[0] for line in ax.lines if line.get_linestyle() in ("--", ":"))
        assert levels == pytest.approx([d, d * 1.1])
        for band in ax.collections:  # min-max bands of the costs never go below 0
            assert band.get_paths()[0].vertices[:, 1].min() >= 0.0
    lam = figs["Grid_HazardFuel3x3-v0_multipliers.png"].axes
    assert not any("λ*" in (line.get_label() or "") for ax in lam for line in ax.lines)  # no algorithm in reward units
    plt.close("all")
    figs = _figures(monkeypatch, toy_results, tmp_path, {TOY: True})
    lam = figs["Grid_HazardFuel3x3-v0_multipliers.png"].axes
    stars = [line for line in lam[0].lines if "λ*" in line.get_label()]
    assert len(stars) == 1 and TOY in stars[0].get_label()
    assert stars[0].get_ydata()[0] == pytest.approx(load_results(toy_results).tasks[TASK].optimal_multipliers[0])
    plt.close("all")


def test_coupling_figures_name_their_task_share_colours_and_clip_bands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from constrained_grpo.constraints import Constraint
    from constrained_grpo.eval.studies import coupling

    steps = np.arange(1, 51) * 100.0
    runs = []
    for algo in ("grpo-screw", "cgrpo"):
        for seed, scale in ((0, 0.0), (1, 1.0)):  # two seeds far apart: the t-interval reaches below 0
            progress = pd.DataFrame({"env_steps": steps, "return": np.full(50, 0.5), "cost_fuel": np.full(50, 4.0 * scale),
                                     "lambda_fuel": np.full(50, 0.3 * scale), "eff_w_reward": np.ones(50),
                                     "eff_w_fuel": np.full(50, 0.2)})
            runs.append(coupling.RunData(algo, seed, progress, pd.DataFrame(), "Grid/HazardFuel3x3-v0", 1.2))
    kept: dict[str, plt.Figure] = {}
    monkeypatch.setattr(coupling, "_save", lambda fig, path: kept.setdefault(path.name, fig) and path)
    coupling._figures(runs, (Constraint("fuel", 4.4, "fuel"),), 1.2, tmp_path)
    assert set(kept) == {"multipliers.png", "effective_weights.png", "costs.png"}
    for fig in kept.values():
        assert fig._suptitle.get_text().startswith("Grid/HazardFuel3x3-v0: ")
    cost_ax = kept["costs.png"].axes[1]
    colours = {line.get_label().split(" ")[0]: line.get_color() for line in cost_ax.lines if "(n=" in line.get_label()}
    assert colours == algo_colors(["grpo-screw", "cgrpo"])
    for band in cost_ax.collections:
        assert band.get_paths()[0].vertices[:, 1].min() >= 0.0
    plt.close("all")
