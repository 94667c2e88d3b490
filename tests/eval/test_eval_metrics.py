"""Metrics and statistics on synthetic series and tables whose answers are known by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring import metrics as M
from constrained_grpo.eval.scoring import stability as ST
from constrained_grpo.eval.scoring import stats as S
from constrained_grpo.eval.runner import TaskMeta

# ----------------------------------------------------------------------------- return


def test_final_performance_is_mean_of_last_fifth():
    x = np.arange(10.0)  # last 20% = {8, 9}
    assert M.final_performance(x) == 8.5
    assert M.final_performance([3.0]) == 3.0
    assert M.final_performance(np.arange(11.0)) == pytest.approx(np.mean([8, 9, 10]))  # ceil(2.2) = 3


def test_final_performance_skips_iterations_without_estimate():
    assert M.final_performance([1.0, 2.0, 3.0, np.nan, 5.0], frac=0.4) == 5.0
    assert math.isnan(M.final_performance([1.0, np.nan], frac=0.5))


def test_normalised_return():
    assert M.normalised_return(1.1333, 1.1333) == pytest.approx(1.0)
    assert M.normalised_return(0.5, 1.0) == pytest.approx(0.5)
    assert M.normalised_return(-3.0, -2.0) == pytest.approx(0.5)  # 1 - (-2 + 3)/2
    assert math.isnan(M.normalised_return(1.0, None))


def test_return_anchored_by_two_references():
    # ref-random 2.0, ref-safe-driver 5.0: a return of 5.75 is 1.25 safe drivers above random.
    assert M.normalised_return(5.75, None, (2.0, 5.0)) == pytest.approx(1.25)
    assert M.normalised_return(2.0, None, (2.0, 5.0)) == 0.0
    assert M.normalised_return(0.5, 1.0, (2.0, 5.0)) == pytest.approx(0.5)  # an exact optimum wins
    # The score of a run within the limits is the anchored return, floored at 0.
    assert M.constrained_score(5.75, None, 0.0, 0.1, (2.0, 5.0)) == pytest.approx(1.25)
    assert M.constrained_score(1.0, None, 0.0, 0.1, (2.0, 5.0)) == 0.0
    assert M.constrained_score(9.0, None, 0.3, 0.1, (2.0, 5.0)) == pytest.approx(-0.3)


def test_anchor_returns_are_the_references_mean_sampled_returns():
    ev = pd.DataFrame({
        "task": ["H"] * 6 + ["G"],
        "algo": ["ref-random", "ref-random", "ref-safe", "ref-safe", "ref-safe", "ppo", "ref-random"],
        "seed": [0, 1, 0, 1, 0, 0, 0],
        "policy": ["sampled", "sampled", "sampled", "sampled", "deterministic", "sampled", "sampled"],
        "return_mean": [1.0, 2.0, 5.0, 6.0, 100.0, 7.0, 3.0],
    })
    # The deterministic row and the learner are not anchors; G lacks its high reference.
    out = M.anchor_returns(ev, {"H": ("ref-random", "ref-safe"), "G": ("ref-random", "ref-safe")})
    assert out == {"H": (1.5, 5.5)}
    # A high reference no better than the low one gives no unit: the task stays raw.
    assert M.anchor_returns(ev, {"H": ("ref-safe", "ref-random")}) == {}


# ----------------------------------------------------------------------- satisfaction


def test_constraint_satisfaction_metrics():
    costs = np.array([0.0, 0.0, 1.0, 0.0])  # an indicator cost, violation rate 0.25
    assert M.fraction_within(costs, 0.1) == 0.75
    assert M.normalised_violation(costs.mean(), 0.1) == pytest.approx(1.5)  # (0.25 - 0.1)/0.1
    assert M.normalised_violation(0.05, 0.1) == 0.0
    assert M.normalised_violation(2.0, 0.0) == 2.0  # zero limit: cost units


def test_cumulative_violation_integrates_over_env_steps():
    steps = np.array([100, 200, 400])
    costs = np.array([0.3, 0.1, 0.2])  # limit 0.1: violations 2, 0, 1 (normalised)
    assert M.cumulative_violation(steps, costs, 0.1) == pytest.approx(2 * 100 + 0 * 100 + 1 * 200)
    assert M.cumulative_violation(steps, [0.3, np.nan, 0.1], 0.1) == pytest.approx(200)


# ------------------------------------------------------------------ multiplier stability

N = 200  # iterations; the second half is t = 100..199
STEPS = 1000.0 * (np.arange(N) + 1)


def sine(amplitude: float = 0.5, period: int = 20, phase: float = 0.3) -> np.ndarray:
    return 1.0 + amplitude * np.sin(2 * np.pi * np.arange(N) / period + phase)


# The stability metrics have one home, constrained_grpo.eval.scoring.stability (what the leaderboard
# and the tutorial use); these are its path statistics on hand-computed shapes.


def _stab(lam: np.ndarray, steps: np.ndarray = STEPS) -> ST.StabilityResult:
    return ST.multiplier_stability(steps, lam, np.full(len(lam), 0.1), 0.1)


def test_sine_oscillations():
    # Five periods in t = 100..199, extrema at t = 2.02 + 10 j: ten turns of the increments.
    assert _stab(sine()).oscillations == 10


def test_oscillation_tolerance_ignores_noise():
    rng = np.random.default_rng(0)
    flat = 2.0 + 1e-4 * rng.standard_normal(N)  # jitter far below 1% of lambda
    assert _stab(flat).oscillations == 0
    assert ST._oscillations(flat[N // 2:], 0.0) > 10  # with no tolerance the jitter counts


def test_step_response_overshoot_and_settling():
    lam = np.array([0.0, 0.5, 1.0, 1.3, 1.2, 1.05, 0.95, 1.02] + [1.0] * 42)
    steps = 10.0 * (np.arange(len(lam)) + 1)  # 10 .. 500
    res = _stab(lam, steps)
    assert res.overshoot == pytest.approx(0.3)  # (1.3 - 1.0) / max(1.0, 1)
    # Outside +-10% of 1.0 last at t = 4 (1.2): settled from t = 5, at 60 of 500 env steps.
    assert res.settling == pytest.approx(60 / 500)
    never = np.array([0.0, 1.0] * 25)
    assert _stab(never, steps).settling == 1.0


def test_a_ramp_has_no_oscillation():
    assert _stab(1e-4 * STEPS).oscillations == 0


# (Drift, total variation and the stability score are tested in tests/eval/test_stability.py.)


# -------------------------------------------------------------------------- run metrics


def synthetic_table(lams: dict[str, np.ndarray], hazard_cost: dict[str, float]) -> tuple[pd.DataFrame, dict[str, TaskMeta]]:
    """One run per algorithm on a one-constraint task (hazard <= 0.1), with given multipliers."""
    meta = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0, unconstrained_return=3.0,
                    optimal_multipliers=(0.5,))
    rows = []
    for algo, lam in lams.items():
        for t in range(N):
            rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": 0, "kind": "train", "iteration": t,
                         "env_steps": int(STEPS[t]), "wall_s": float(t), "return": 1.0, "length": np.nan,
                         "cost_hazard": hazard_cost[algo], "lambda_hazard": lam[t]})
        for i in range(4):
            rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": 0, "kind": "eval", "policy": "deterministic", "iteration": N - 1, "episode": i,
                         "env_steps": int(STEPS[-1]), "wall_s": np.nan, "return": 1.5, "length": 10.0,
                         "cost_hazard": float(i == 0 and hazard_cost[algo] > 0.1), "lambda_hazard": lam[-1]})
    return pd.DataFrame(rows), {meta.task: meta}


def test_run_metrics_ranks_diverging_multiplier_below_oscillating_one():
    table, tasks = synthetic_table(
        {"diverge": 1e-4 * STEPS, "oscillate": sine(amplitude=0.9)}, {"diverge": 0.3, "oscillate": 0.1}
    )
    m = M.run_metrics(table, tasks).set_index("algo")
    assert m.loc["diverge", "stability"] < m.loc["oscillate", "stability"]
    assert m.loc["diverge", "drift_hazard"] > 0.5 and m.loc["oscillate", "osc_hazard"] >= 10
    assert m.loc["oscillate", "eval_return_norm"] == pytest.approx(0.75)  # 1.5 / 2.0
    assert m.loc["diverge", "within_hazard"] == 0.75 and m.loc["diverge", "violation_hazard"] == pytest.approx(1.5)
    assert not m.loc["diverge", "satisfied"] and m.loc["oscillate", "satisfied"]
    assert m.loc["diverge", "train_violation_hazard"] == pytest.approx(2.0)  # (0.3 - 0.1)/0.1 throughout
    assert m.loc["oscillate", "final_return"] == 1.0


def test_run_metrics_unconstrained_algorithm_has_no_stability():
    table, tasks = synthetic_table({"ppo": np.zeros(N)}, {"ppo": 0.0})
    table["lambda_hazard"] = np.nan
    m = M.run_metrics(table, tasks)
    assert math.isnan(m.loc[0, "stability"]) and "drift_hazard" not in m.columns


# ---------------------------------------------------------------------------- statistics


def test_iqm_matches_definition():
    x = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0])
    assert S.iqm(x) == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))


def test_stratified_bootstrap_is_reproducible_and_keeps_strata():
    a, b = np.array([0.0, 0.0, 0.0]), np.array([10.0, 10.0])
    boots = S.stratified_bootstrap([a, b], np.mean, reps=500, seed=3)
    # Each replicate keeps 3 draws from a and 2 from b: the mean is always 4.
    assert np.allclose(boots, 4.0)
    x = [np.random.default_rng(1).normal(size=8), np.random.default_rng(2).normal(size=5)]
    assert S.stratified_bootstrap_ci(x, S.iqm) == S.stratified_bootstrap_ci(x, S.iqm)
    point, lo, hi = S.stratified_bootstrap_ci(x, np.mean)
    assert lo <= point <= hi


def test_aggregate_counts_nan_instead_of_dropping_silently():
    df = pd.DataFrame({"algo": ["a"] * 4, "task": ["t1", "t1", "t2", "t2"], "v": [1.0, 2.0, 3.0, np.nan]})
    out = S.aggregate(df, "v", reps=200).iloc[0]
    assert out["n"] == 3 and out["n_nan"] == 1 and out["n_strata"] == 2
    assert out["mean"] == pytest.approx(2.0)


def test_probability_of_improvement_definition():
    assert S.probability_of_improvement({"t": [2.0, 3.0]}, {"t": [0.0, 1.0]}) == 1.0
    assert S.probability_of_improvement({"t": [1.0, 1.0]}, {"t": [1.0, 1.0]}) == 0.5
    # Mann-Whitney by hand: pairs (1>0, 1<2, 3>0, 3>2) = 3/4 on t1; 0 on t2; mean 0.375.
    x = {"t1": [1.0, 3.0], "t2": [0.0]}
    y = {"t1": [0.0, 2.0], "t2": [5.0]}
    assert S.probability_of_improvement(x, y) == pytest.approx(0.375)
    p, lo, hi = S.probability_of_improvement_ci(x, y, reps=500)
    assert p == pytest.approx(0.375) and 0.0 <= lo <= p <= hi <= 1.0
