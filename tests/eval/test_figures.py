"""Figures read right: one colour per algorithm everywhere, coinciding points visible, the
tolerance line at d(1 + tol), lambda* only beside multipliers in its units, bands >= 0; and,
measured with the renderer on the toy runs and on a 22-algorithm synthetic table, no two
texts overlap, legends stay off the data, everything lies inside the figure, env-step ticks
are compact, each figure says what its band is, markers have one area whatever the shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED
from constrained_grpo.eval.scoring import plots
from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring.colors import PALETTE, algo_color, algo_colors, algo_marker
from constrained_grpo.eval.scoring.loader import load_results
from constrained_grpo.eval.presets import STANDARD_ALGOS
from constrained_grpo.schema import TaskMeta


def test_an_algorithm_keeps_its_colour_across_figures():
    a = algo_colors(["grpo", "grpo-screw"])
    b = algo_colors(["cgrpo", "grpo", "grpo-screw", "ppo-lag"])
    assert a["grpo"] == b["grpo"] == algo_color("grpo") and a["grpo-screw"] == b["grpo-screw"]
    assert a["grpo"] != a["grpo-screw"]
    many = algo_colors([f"user_algo_{i}" for i in range(len(PALETTE))])
    assert len(set(many.values())) == len(PALETTE)  # distinct within a figure, even for hashed names


def test_the_standard_board_draws_each_algorithm_in_its_own_colour_and_keeps_the_fixed_ones():
    # 28 learners and 3 references: more than Tableau 20's 20 colours. Hashed names sorted
    # before a fixed one ("cgrpo-crpo" before "grpo") once took its colour in a full figure.
    # (The other learners' -best/-mix aliases are second deployments: `cgrpo plot` leaves them out.)
    algos = [*STANDARD_ALGOS, "ref-random", "ref-optimal", "ref-unconstrained"]
    assert len(algos) == 31
    full = algo_colors(algos)
    assert len(set(full.values())) == 31
    assert (full["cgrpo"], full["grpo"], full["grpo-screw"], full["ppo-lag"]) == (
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
    small = algo_colors(["cgrpo", "grpo", "grpo-screw", "ppo-lag", "cpo"])
    assert all(full[a] == small[a] for a in small)
    # Past the 35 colours they repeat, from the preferred one again.
    more = algo_colors([f"user_algo_{i}" for i in range(len(PALETTE) + 1)])
    assert len(set(more.values())) == len(PALETTE)


@pytest.mark.slow
def test_an_algorithm_has_one_colour_in_every_task_s_figures(toy_results: Path):
    # Task A ran pid-lag and crpo, task B crpo and ppo-lag-al. crpo's hashed colour is
    # pid-lag's fixed one: per task, crpo would be drawn in it on B and moved on A.
    import dataclasses

    res = load_results(toy_results)
    a = res.table.replace({"algo": {TOY: "pid-lag", TOY_UNCONSTRAINED: "crpo"}})
    b = res.table.replace({"algo": {TOY: "crpo", TOY_UNCONSTRAINED: "ppo-lag-al"}}).assign(task="Grid/Copy-v0")
    tasks = {TASK: res.tasks[TASK], "Grid/Copy-v0": dataclasses.replace(res.tasks[TASK], task="Grid/Copy-v0")}
    assert algo_color("crpo") == algo_color("pid-lag")
    colours: dict[str, set[str]] = {}
    for name, fig in plots.iter_figures(pd.concat([a, b], ignore_index=True), tasks):
        if name.endswith("_curves.png"):
            for line in fig.axes[0].lines:
                if line.get_label() in ("pid-lag", "crpo", "ppo-lag-al"):
                    colours.setdefault(line.get_label(), set()).add(line.get_color())
        plt.close(fig)
    assert colours["crpo"] != colours["pid-lag"] and all(len(c) == 1 for c in colours.values()), colours
    assert colours["pid-lag"] == {algo_color("pid-lag")}


def test_coinciding_points_are_all_drawn_and_named():
    r = pd.DataFrame({"algo": ["cgrpo", "grpo", "grpo-screw", "ppo"], "seed": [0, 0, 0, 0],
                      "violation": [0.5, 0.5, 0.0, 0.5], "eval_return": [1.0, 1.0, 0.9, 1.0]})
    fig = plots._return_vs_violation_figure(r, TaskMeta("T-v0", "s", ()), algo_colors(r["algo"]), tol=0.1)
    ax = fig.axes[0]
    drawn = [c for c in ax.collections if len(c.get_offsets())]
    assert len(drawn) == 4
    sizes = {tuple(c.get_offsets()[0]): [] for c in drawn}
    for c in drawn:
        sizes[tuple(c.get_offsets()[0])].append(float(c.get_sizes()[0]))
    # Concentric, none hidden: areas 3.4, 2.2 and 1 times the plain one, each scaled to its shape's equal area.
    want = [plots.marker_size(algo_marker(a)) * k for a, k in (("cgrpo", 3.4), ("grpo", 2.2), ("ppo", 1.0))]
    assert sizes[(0.5, 1.0)] == pytest.approx(want)
    assert [t.get_text() for t in ax.texts] == ["cgrpo = grpo = ppo"]
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [0.1]
    plt.close(fig)


def test_stacked_labels_keep_their_order_and_do_not_overlap():
    # Three labels of height 0.2 wanted at 0.95, 0.9 and 0.05: pushed apart top-down, within [0, 1].
    c = plots.stack_positions([0.95, 0.9, 0.05], [0.2, 0.2, 0.2], 0.0, 1.0, gap=0.0)
    assert c == pytest.approx([0.9, 0.7, 0.1])
    # More than fits: the stack keeps its order and starts at the bottom.
    c = plots.stack_positions([0.5] * 6, [0.2] * 6)
    assert c == pytest.approx([1.1, 0.9, 0.7, 0.5, 0.3, 0.1])


def test_env_step_labels_are_compact():
    assert [plots.steps_label(v) for v in (0, 500, 50_000, 150_000, 1_000_000, 1_500_000, 2_250_000)] == \
        ["0", "500", "50k", "150k", "1M", "1.5M", "2.25M"]


def _figures(monkeypatch: pytest.MonkeyPatch, toy_results: Path, tmp_path: Path, units: dict[str, bool]) -> dict[str, plt.Figure]:
    kept: dict[str, plt.Figure] = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.setdefault(path.name, fig) and path)
    res = load_results(toy_results)
    plots.make_plots(res.table, res.tasks, tmp_path, tol=0.1, lambda_in_reward_units=units)
    return kept


@pytest.mark.slow
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


@pytest.mark.slow
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
    # The same legibility as the suite's figures (the band is named in the suptitle, not a caption).
    problems = [p for n, f in kept.items() for p in _legibility_problems(n, f, captioned=False)]
    assert not problems, "\n".join(problems)
    plt.close("all")


# ------------------------------------------------------------------ legibility, read from the renderer
# Every figure type is built from the toy runs and from a synthetic table like the benchmark's
# worst case (many algorithms, coinciding points, millions of env steps), then measured.

_SYNTH_ALGOS = ("cgrpo", "grpo", "grpo-screw", "ppo-lag", "pid-lag", "cpo", "cgrpo-dara", "ppo", "saute-ppo",
                "focops", "cgrpo-pid", "trpo-lag", "cgrpo-gdpo", "pcpo", "cup", "p3o", "rcpo", "cgrpo-softmax",
                "cgrpo-norm", "user_algo_long_name_1", "user_algo_2", "cgrpo-opg")


def _synthetic(steps: int, task: str = "Highway/Synth-v0") -> tuple[pd.DataFrame, dict[str, TaskMeta]]:
    """A long table of 22 algorithms x 3 seeds on one task with an indicator and a plain cost:
    the first 8 algorithms' evaluations coincide exactly, the next 4 lie within a hair of
    each other; half log multipliers, 6 log effective weights."""
    meta = TaskMeta(task, "highway", (Constraint("crash", 0.1, "a crash", indicator=True),
                                      Constraint("speed", 2.0, "over speed")), optimum_return=20.0)
    rng = np.random.default_rng(0)
    iters = 40
    rows: list[dict] = []
    for i, algo in enumerate(_SYNTH_ALGOS):
        for seed in range(3):
            base = {"suite": "highway", "task": task, "algo": algo, "seed": seed}
            for it in range(iters):
                row = {**base, "kind": "train", "policy": "", "iteration": it, "episode": np.nan, "reset_seed": np.nan,
                       "env_steps": int(steps * (it + 1) / iters), "wall_s": float(it), "return": 10 + rng.normal() + i / 4,
                       "length": np.nan, "cost_crash": float(rng.uniform(0, 0.4)), "cost_speed": float(rng.uniform(0, 4))}
                if i % 2 == 0:
                    row |= {"lambda_crash": float(rng.uniform(0, 2)), "lambda_speed": float(rng.uniform(0, 1))}
                if i < 6:
                    row |= {"eff_w_reward": 1.0, "eff_w_crash": float(rng.uniform(0, 1)), "eff_w_speed": 0.3}
                rows.append(row)
            for ep in range(10):
                if i < 8:  # the same episodes: one point for 24 runs
                    ret, crash, speed = 15.0 + ep % 2, float(ep < 2), 1.5
                elif i < 12:  # within a hair of one another
                    ret, crash, speed = 12.0 + 0.01 * i + 0.002 * seed, float(ep < 1), 2.1
                else:
                    ret, crash, speed = 5 + i / 2 + seed / 3 + ep % 3, float(ep < (i + seed) % 4), 1.0 + i / 10
                rows.append({**base, "kind": "eval", "policy": "sampled", "iteration": iters - 1, "episode": ep,
                             "reset_seed": 1000 + ep, "env_steps": steps, "wall_s": np.nan, "return": ret, "length": 30.0,
                             "cost_crash": crash, "cost_speed": speed})
    return pd.DataFrame(rows), {task: meta}


def _built(table: pd.DataFrame, tasks: dict[str, TaskMeta], units: dict[str, bool] | None = None) -> dict[str, plt.Figure]:
    return plots.build_figures(table, tasks, tol=0.1, lambda_in_reward_units=units)


def _drawn_tick_labels(axis: Any) -> list[Text]:
    # Axis keeps a pool of Tick objects, some stale; _update_ticks() returns those drawn (within the view).
    return [lab for t in axis._update_ticks() for lab in (t.label1, t.label2) if lab.get_visible() and lab.get_text()]


def _texts(fig: plt.Figure) -> list[Text]:
    """Every text the figure draws: titles, axis labels, drawn tick labels, legend texts, annotations, captions."""
    pooled = {id(lab) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
              for t in axis.get_major_ticks() + axis.get_minor_ticks() for lab in (t.label1, t.label2)}
    texts = [t for t in fig.findobj(Text) if id(t) not in pooled and t.get_visible() and t.get_text().strip()]
    return texts + [lab for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for lab in _drawn_tick_labels(axis)]


def _box(t: Text, renderer: Any) -> Bbox:
    return Text.get_window_extent(t, renderer)  # an Annotation's own extent includes its arrow; the text's only


def _overlap(a: Bbox, b: Bbox, slack: float = 0.5) -> bool:
    return a.x0 < b.x1 - slack and b.x0 < a.x1 - slack and a.y0 < b.y1 - slack and b.y0 < a.y1 - slack


def _legibility_problems(name: str, fig: plt.Figure, captioned: bool = True) -> list[str]:
    fig.canvas.draw()  # runs the layout
    renderer = fig.canvas.get_renderer()
    problems: list[str] = []
    texts = _texts(fig)
    boxes = [_box(t, renderer) for t in texts]
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if _overlap(boxes[i], boxes[j]):
                problems.append(f"{name}: texts {texts[i].get_text()!r} and {texts[j].get_text()!r} overlap")
    inside = fig.bbox.padded(0.5)
    problems += [f"{name}: {t.get_text()!r} outside the figure" for t, b in zip(texts, boxes)
                 if not (inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0 and b.y1 <= inside.y1)]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    assert legends, f"{name}: no legend"
    for leg in legends:
        frame = leg.get_window_extent(renderer)
        problems += [f"{name}: legend over the data area of {ax.get_title()!r}" for ax in fig.axes
                     if _overlap(frame, ax.get_window_extent(renderer))]
        own = set(map(id, leg.get_texts()))
        problems += [f"{name}: {t.get_text()!r} under the legend" for t, b in zip(texts, boxes)
                     if id(t) not in own and _overlap(frame, b)]
    for ax in fig.axes:
        if ax.get_xlabel().startswith("env steps"):
            drawn = sorted(_drawn_tick_labels(ax.xaxis), key=lambda t: _box(t, renderer).x0)
            labels = [lab.get_text() for lab in drawn]
            # At most 3 digits before an optional k/M ("150000" runs into its neighbours) and no "1e6" offset.
            if (not 2 <= len(labels) <= 7 or not all(re.fullmatch(r"\d{1,3}(\.\d+)?[kM]?", s) for s in labels)
                    or ax.xaxis.get_offset_text().get_text()):
                problems.append(f"{name}: env-step ticks {labels} {ax.xaxis.get_offset_text().get_text()!r} "
                                "(want 2-7 compact labels like 500k, 1.5M, no offset)")
            gaps = [_box(b, renderer).x0 - _box(a, renderer).x1 for a, b in zip(drawn, drawn[1:])]
            if gaps and min(gaps) < 3.0:  # pixels: touching labels read as one number
                problems.append(f"{name}: env-step tick labels {labels} {min(gaps):.1f} px apart")
    if captioned and not any("band" in t.get_text() for t in fig.texts):
        problems.append(f"{name}: no caption saying what the band or points are")
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("source", ["toy", "synthetic_3M", "synthetic_250k"])
def test_figures_are_legible(source: str, toy_results: Path):
    if source == "toy":
        res = load_results(toy_results)
        table, tasks = res.table, res.tasks
    else:
        table, tasks = _synthetic(3_000_000 if source == "synthetic_3M" else 250_000)
    figs = _built(table, tasks, {TOY: True, "ppo-lag": True})
    for kind in ("curves", "multipliers", "return_vs_violation", "effective_weights"):
        assert any(n.endswith(f"_{kind}.png") for n in figs), sorted(figs)
    problems = [p for n, f in figs.items() for p in _legibility_problems(n, f)]
    plt.close("all")
    assert not problems, "\n".join(problems[:30])


@pytest.mark.slow
def test_markers_have_equal_area_whatever_their_shape():
    table, tasks = _synthetic(3_000_000)
    fig = next(f for n, f in _built(table, tasks).items() if n.endswith("return_vs_violation.png"))
    ink: dict[tuple[float, float], list[float]] = {}  # per place: s x the area of the marker's unit path
    for c in fig.axes[0].collections:
        if len(c.get_offsets()):
            poly = np.concatenate(c.get_paths()[0].to_polygons(closed_only=True))
            unit = 0.5 * abs(np.dot(poly[:-1, 0], poly[1:, 1]) - np.dot(poly[1:, 0], poly[:-1, 1]))
            ink.setdefault(tuple(c.get_offsets()[0]), []).append(unit * float(c.get_sizes()[0]))
    shapes = {algo_marker(a) for a in _SYNTH_ALGOS}
    assert {"*", "o", "s"} <= shapes  # stars beside circles and squares
    # A plain marker and the innermost ring of a concentric stack: one area, whatever the shape.
    smallest = [min(v) for v in ink.values()]
    assert max(smallest) == pytest.approx(min(smallest), rel=0.03)
    plt.close(fig)


def test_wilson_interval_by_hand():
    # 0 events in 10: Wilson's upper bound is 0.2775 (z = 1.96); the interval never leaves [0, 1].
    lo, hi = plots.wilson_interval(np.array([0.0, 0.5, 1.0]), 10)
    assert lo[0] == 0.0 and hi[0] == pytest.approx(0.27753, abs=1e-4)
    assert lo[1] == pytest.approx(1 - hi[1]) and lo[1] == pytest.approx(0.23659, abs=1e-4)
    assert hi[2] == pytest.approx(1.0) and lo[2] == pytest.approx(1 - 0.27753, abs=1e-4)


@pytest.mark.slow
def test_indicator_costs_get_the_wilson_band_of_the_mean_over_seeds(toy_results: Path):
    res = load_results(toy_results)
    rows = res.table[(res.table["kind"] == "train") & (res.table["algo"] == TOY)]
    x, mean, lo, hi = plots.band(rows, "cost_hazard", indicator=True)
    n = rows["seed"].nunique()
    want_lo, want_hi = plots.wilson_interval(np.clip(mean, 0, 1), n)
    assert np.allclose(lo, want_lo) and np.allclose(hi, want_hi) and lo.min() >= 0 and hi.max() <= 1
    _, _, mn, mx = plots.curve(rows, "cost_hazard")
    assert not np.allclose(lo, mn)  # not the min-max band any more
