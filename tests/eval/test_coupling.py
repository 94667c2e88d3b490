"""Tests of ``constrained_grpo.eval.studies.coupling``: the controlled demo and the run analysis.

The analysis is checked on synthetic harness run directories (the layout ``cgrpo bench``
writes: 2 algorithms x 3 seeds, T = 10 iterations, so the tail is the last
ceil(0.2 * 10) = 2 iterations and the second half is iterations 5..9) whose metrics are
worked out by hand below.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.studies import coupling
from constrained_grpo.eval import storage
from constrained_grpo.schema import CONFIG_SCHEMA
from constrained_grpo.eval.scoring.metrics import tail_length, tail_summary
from constrained_grpo.eval.scoring.stats import stratified_bootstrap_ci

R_STAR = 1.1333333333333337  # Grid/HazardFuel-v0, limits hazard 0.1, fuel 12
T = 10


# ------------------------------------------------------------------------- demo


def test_sweep_by_hand() -> None:
    """One group of two episodes: R = (0, 1), H = (0, 1), F = (0, 2).

    sigma_R = sigma_H = 0.5, sigma_F = 1. With lambda = (1, 1): S = R - H - F = (0, -2),
    sigma_S = 1, so ScRew's weights are (0.5/1, 1*0.5/1, 1*1/1) = (0.5, 0.5, 1); with
    lambda_fuel = 0: S = (0, 0), sigma_S = 0 -> no signal in S, weights 0. ScAdv: (1, 1, lambda_F).
    """
    x = np.array([[[0.0, 0.0, 0.0], [1.0, 1.0, 2.0]]])
    df = coupling.effective_weight_sweep(x, ("reward", "hazard", "fuel"), {"hazard": 1.0}, "fuel", [0.0, 1.0])
    w = df.set_index(["aggregator", "lambda_fuel", "component"])["weight"]
    assert w[("screw", 1.0, "reward")] == pytest.approx(0.5)
    assert w[("screw", 1.0, "hazard")] == pytest.approx(0.5)
    assert w[("screw", 1.0, "fuel")] == pytest.approx(1.0)
    assert w[("screw", 0.0, "reward")] == pytest.approx(0.0)
    assert [w[("scadv", 1.0, c)] for c in ("reward", "hazard", "fuel")] == pytest.approx([1.0, 1.0, 1.0])
    assert w[("scadv", 0.0, "fuel")] == pytest.approx(0.0)
    assert set(df.columns) == {"aggregator", "lambda_hazard", "lambda_fuel", "component", "weight"}


def test_sweep_rejects_missing_multiplier() -> None:
    x = np.zeros((1, 2, 3))
    with pytest.raises(ValueError, match="fixed"):
        coupling.effective_weight_sweep(x, ("reward", "hazard", "fuel"), {}, "mud", [0.0])


def test_scadv_weights_constant_while_screw_moves(tmp_path: Path) -> None:
    """On real episodes, ScAdv's reward and hazard weights do not depend on lambda_fuel
    (to 1e-12: they are 1 and lambda_hazard); ScRew's both change."""
    x, names = coupling.collect_batch(num_groups=4, group_size=8, seed=3)
    assert x.shape == (4, 8, 3) and names == ("reward", "hazard", "fuel")
    assert (x.std(axis=1) > 0).any(axis=0).all(), "the scripted mixture must vary every component"
    lam_h = 0.7
    df = coupling.effective_weight_sweep(x, names, {"hazard": lam_h}, "fuel", np.linspace(0, 3, 7))
    spans = coupling.sweep_spans(df).set_index(["aggregator", "component"])
    assert spans.loc[("scadv", "reward"), "span"] <= 1e-12
    assert spans.loc[("scadv", "hazard"), "span"] <= 1e-12
    assert spans.loc[("scadv", "reward"), "max"] == pytest.approx(1.0, abs=1e-12)
    assert spans.loc[("scadv", "hazard"), "max"] == pytest.approx(lam_h, abs=1e-12)
    assert spans.loc[("screw", "reward"), "span"] > 0.05
    assert spans.loc[("screw", "hazard"), "span"] > 0.05
    # ScRew's reward weight shrinks as fuel dominates sigma_S.
    scr = df[(df["aggregator"] == "screw") & (df["component"] == "reward")]
    assert scr["weight"].iloc[-1] < scr["weight"].iloc[0]


def test_run_demo_writes_outputs(tmp_path: Path) -> None:
    paths, spans = coupling.run_demo(tmp_path, num_groups=2, group_size=4, points=4, verbose=False)
    assert [p.name for p in paths] == ["controlled.csv", "controlled.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    df = pd.read_csv(tmp_path / "controlled.csv")
    assert list(df.columns) == ["aggregator", "lambda_hazard", "lambda_fuel", "component", "weight"]
    assert len(df) == 5 * 4 * 3
    assert list(dict.fromkeys(spans["aggregator"])) == ["screw", "scadv", "corr", "is", "mdp"]


def test_literature_aggregators_beside_screw_and_scadv_as_lambda_moves() -> None:
    """On real episodes, as lambda_fuel runs over (0, 3] with lambda_hazard fixed: CorrGRPO's
    reward and hazard weights do not move (its denominator sees a multiplier's sign, not its
    size) but jump when fuel enters at lambda_fuel > 0; IS-GRPO's and MDP-GRPO's are constant
    like ScAdv's; every fuel weight grows in proportion to lambda_fuel, unlike ScRew's."""
    x, names = coupling.collect_batch(num_groups=4, group_size=8, seed=3)
    values = np.linspace(0, 3, 7)
    df = coupling.effective_weight_sweep(x, names, {"hazard": 0.7}, "fuel", values)
    assert list(dict.fromkeys(df["aggregator"])) == ["screw", "scadv", "corr", "is", "mdp"]
    w = df.set_index(["aggregator", "component", "lambda_fuel"])["weight"]
    for agg in ("corr", "is", "mdp"):
        for comp in ("reward", "hazard"):
            moving = [w[(agg, comp, v)] for v in values[1:]]
            assert max(moving) - min(moving) <= 1e-12, (agg, comp)
        fuel = np.array([w[(agg, "fuel", v)] for v in values[1:]])
        np.testing.assert_allclose(fuel / values[1:], fuel[0] / values[1], rtol=1e-9)
        assert w[(agg, "fuel", 0.0)] == 0.0
    assert w[("corr", "reward", 0.0)] != pytest.approx(w[("corr", "reward", 3.0)])
    screw_fuel = np.array([w[("screw", "fuel", v)] for v in values[1:]])
    assert np.ptp(screw_fuel / values[1:]) > 0.1  # ScRew's fuel weight is not proportional to lambda_fuel


# ---------------------------------------------------------------------- analyze


def _progress(algo: str, seed: int) -> pd.DataFrame:
    """The synthetic trajectory of one run (the hand-worked values are in the tests)."""
    t = np.arange(1, T + 1)
    ret = np.full(T, 0.5)
    haz = np.full(T, 0.5)
    fuel = np.full(T, 20.0)
    lam_f = np.full(T, 0.5)
    if algo == "cgrpo":
        ret[-2:] = [1.1 + 0.01 * seed, 1.2 + 0.01 * seed]
        haz[-2:] = [0.05, 0.15]
        fuel[-2:] = [12.0, 12.0]
        lam_h = np.array([0, 0, 0, 0, 0, 1, 2, 1, 2, 1], dtype=float)
        scale = 1.0
        w_r = np.ones(T)
    else:
        if seed == 2:
            ret[-2:] = [1.1, 1.1]
            haz[-2:] = [0.1, 0.1]
        else:
            ret[-2:] = [0.9, 0.9]
            haz[-2:] = [0.2, 0.3]
        fuel[-2:] = [11.0, 13.0]
        lam_h = t.astype(float)
        scale = 0.5
        w_r = np.array([0.5] * 5 + [0.2, 0.4, 0.2, 0.4, 0.2])
    lag = lambda v: np.concatenate([[0.0], v[:-1]])  # noqa: E731  eff_w_t uses lambda_{t-1}
    return pd.DataFrame({
        "iteration": t - 1, "env_steps": 100 * t, "wall_s": 0.1 * t, "return": ret, "cost_hazard": haz,
        "cost_fuel": fuel, "lambda_hazard": lam_h, "lambda_fuel": lam_f, "eff_w_reward": w_r,
        "eff_w_hazard": scale * lag(lam_h), "eff_w_fuel": scale * lag(lam_f),
    })


def _evals(algo: str) -> pd.DataFrame:
    """4 sampled and 4 deterministic evaluation episodes. Sampled: cgrpo R = 1.0, 1.2, 1.1, 1.1
    (mean 1.1 >= 0.9 R*), hazard 0, 0, 0, 0.4 (mean 0.1), fuel 12; grpo-screw R = 0.9 (< 0.9 R*).
    The deterministic episodes (R = 0, hazard 1) must not enter the last-iterate metrics."""
    sampled = [1.0, 1.2, 1.1, 1.1] if algo == "cgrpo" else [0.9] * 4
    haz = [0.0, 0.0, 0.0, 0.4] if algo == "cgrpo" else [0.0] * 4
    rows = [{"episode": i, "policy": "sampled", "reset_seed": 1000 + i, "return": r, "length": 12,
             "cost_hazard": h, "cost_fuel": 12.0} for i, (r, h) in enumerate(zip(sampled, haz))]
    rows += [{"episode": i, "policy": "deterministic", "reset_seed": 1000 + i, "return": 0.0, "length": 30,
              "cost_hazard": 1.0, "cost_fuel": 30.0} for i in range(4)]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def grid_meta():
    from constrained_grpo.eval.runner import task_meta

    return task_meta(coupling.ENV_ID)


def _write_run(root: Path, meta, algo: str, seed: int, progress: pd.DataFrame, *, done: bool = True) -> None:
    """One run directory as ``cgrpo bench`` lays it out (``<task>/<algo>/seed_<k>``)."""
    d = storage.run_dir(root, coupling.ENV_ID, algo, seed)
    d.mkdir(parents=True)
    progress.to_csv(d / storage.PROGRESS_FILE, index=False)
    evals = _evals(algo)
    evals.to_csv(d / storage.EVAL_FILE, index=False)
    run = {"task": coupling.ENV_ID, "algo": algo, "seed": seed, "steps": 1000, "eval_episodes": 4, "config": {}}
    resolved = {"algo": algo, "kind": "control", "config": {"aggregator": coupling.ALGOS[algo], "lr": 0.01}}
    config = {"schema": CONFIG_SCHEMA, "run": run, "task": meta.to_dict(), "algo": {"name": algo, "resolved": resolved}}
    (d / storage.CONFIG_FILE).write_text(json.dumps(config))
    if done:
        (d / storage.DONE_FILE).write_text(json.dumps({"progress_rows": len(progress), "eval_rows": len(evals)}))


@pytest.fixture()
def runs_dir(tmp_path: Path, grid_meta) -> Path:
    """2 algorithms x 3 finished seeds."""
    root = tmp_path / "runs"
    for algo in ("cgrpo", "grpo-screw"):
        for seed in range(3):
            _write_run(root, grid_meta, algo, seed, _progress(algo, seed))
    return root


def test_tail_is_the_metrics_ceil_rule() -> None:
    """tail_return is the mean over metrics' tail, ceil(0.2 T): 2 of 7 iterations and 3 of 12,
    where the rounding rule the coupling analysis once had took 1 and 2."""
    assert [tail_length(n) for n in (1, 2, 7, 10, 12, 553)] == [1, 1, 2, 2, 3, 111]
    for n in (1, 7, 10, 12, 553):
        ret = np.arange(n, dtype=float) ** 1.5
        records = [{"ep_return": r, "ep_cost": [0.0], "multipliers": []} for r in ret]
        m = max(1, math.ceil(0.2 * n))
        expected = float(np.mean(ret[-m:]))
        assert tail_summary(records, [1.0], None).ep_return == pytest.approx(expected)
        p = pd.DataFrame({"iteration": np.arange(n), "env_steps": np.arange(1, n + 1), "return": ret})
        assert coupling.run_row(p, (), None)["tail_return"] == pytest.approx(expected)
    p = pd.DataFrame({"iteration": np.arange(7), "env_steps": np.arange(1, 8), "return": [0, 0, 0, 0, 0, 1.0, 3.0]})
    assert coupling.run_row(p, (), None)["tail_return"] == 2.0  # (1 + 3) / 2, not 3


def test_violation_rate_and_weight_helpers_by_hand() -> None:
    assert coupling.violation_rate([9, 9, 9, 0.05, 0.15], 0.1, frac=0.4) == 0.5
    assert coupling.violation_rate([0.1, 0.1], 0.1, frac=1.0) == 0.0  # "exceeds" is strict
    assert coupling.violation_rate([1.0, np.nan, 0.0], 0.5, frac=1.0) == 0.5  # NaN left out
    assert coupling.weight_variability([9, 9, 0.2, 0.4]) == pytest.approx(0.1)
    assert coupling.weight_variability([9, 9, 9, 0.2, 0.0, 0.4]) == pytest.approx(0.1)  # 0 = no signal
    assert coupling.zero_weight_fraction([9, 9, 9, 0.2, 0.0, 0.4]) == pytest.approx(1 / 3)
    assert coupling.transmission([0, 1, 0, 3], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert coupling.transmission([0, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert coupling.transmission([0, 0.5, 1, 1.5], [1, 2, 3, 4]) == pytest.approx(0.5)


def test_run_metrics_by_hand(runs_dir: Path) -> None:
    runs, cons = coupling.load_runs(runs_dir)
    assert [c.name for c in cons] == ["hazard", "fuel"] and [c.limit for c in cons] == [0.1, 12.0]
    assert sorted((r.algo, r.seed) for r in runs) == [(a, s) for a in ("cgrpo", "grpo-screw") for s in range(3)]
    assert runs[0].optimum == pytest.approx(R_STAR)
    by = {(r.algo, r.seed): coupling.run_row(r.progress, cons, r.optimum) for r in runs}

    c1 = by[("cgrpo", 1)]
    assert c1["tail_iterations"] == 2
    assert c1["tail_return"] == pytest.approx(1.16)  # (1.11 + 1.21) / 2
    assert c1["return_gap"] == pytest.approx(R_STAR - 1.16)
    assert c1["rel_return_gap"] == pytest.approx((R_STAR - 1.16) / R_STAR)
    assert c1["tail_cost_hazard"] == pytest.approx(0.10) and c1["viol_rate_hazard"] == 0.5  # 0.15 > 0.1
    assert c1["tail_cost_fuel"] == 12.0 and c1["viol_rate_fuel"] == 0.0
    assert c1["within_limits"] and c1["return_ok"] and c1["passed"]
    # lambda_hazard = 0,0,0,0,0,1,2,1,2,1: second half 1,2,1,2,1 -> TV 4, 3 reversals.
    assert c1["tv_hazard"] == pytest.approx(4.0) and c1["osc_hazard"] == 3
    assert c1["tail_lambda_hazard"] == pytest.approx(1.5) and c1["max_lambda_hazard"] == 2.0
    assert c1["tv_fuel"] == 0.0 and c1["osc_fuel"] == 0 and c1["drift_fuel"] == 0.0
    # eff_w_hazard_t = lambda_{t-1}: second half 0,1,2,1,2; nonzero 1,2,1,2 -> mean 1.5,
    # std 0.5, one zero in five; w/lambda = 1.
    assert c1["effw_std_hazard"] == pytest.approx(0.5)
    assert c1["effw_mean_hazard"] == pytest.approx(1.5) and c1["effw_zero_hazard"] == pytest.approx(0.2)
    assert c1["effw_std_reward"] == 0.0 and c1["effw_mean_reward"] == 1.0
    assert c1["transmission_hazard"] == pytest.approx(1.0) and c1["transmission_fuel"] == pytest.approx(1.0)

    s0 = by[("grpo-screw", 0)]
    assert s0["tail_return"] == pytest.approx(0.9) and not s0["return_ok"]  # 0.9 < 0.9 R* = 1.02
    assert s0["tail_cost_hazard"] == pytest.approx(0.25) and s0["viol_rate_hazard"] == 1.0
    assert s0["tail_cost_fuel"] == 12.0 and s0["viol_rate_fuel"] == 0.5  # 13 > 12, 11 not
    assert not s0["within_limits"] and not s0["passed"]
    # lambda_hazard = t: second half 6..10 at steps 600..1000: TV 4, no reversal,
    # drift 2 (s1 - s0) / (s1 + s0) = 0.5, R^2 1, overshoot 0.
    assert s0["tv_hazard"] == pytest.approx(4.0) and s0["osc_hazard"] == 0
    assert s0["drift_hazard"] == pytest.approx(0.5) and s0["stability_class_hazard"] == "diverging"
    assert s0["max_lambda_hazard"] == 10.0 and s0["tail_lambda_hazard"] == pytest.approx(9.5)
    # eff_w_reward second half 0.2, 0.4, 0.2, 0.4, 0.2: mean 0.28, std sqrt(0.048 / 5).
    assert s0["effw_mean_reward"] == pytest.approx(0.28) and s0["effw_std_reward"] == pytest.approx(math.sqrt(0.0096))
    assert s0["transmission_hazard"] == pytest.approx(0.5) and s0["transmission_fuel"] == pytest.approx(0.5)
    assert s0["stability_hazard"] < by[("grpo-screw", 2)]["stability_hazard"]  # climbing while violated

    s2 = by[("grpo-screw", 2)]
    assert s2["passed"] and s2["viol_rate_hazard"] == 0.0  # 0.1 does not exceed 0.1


def test_last_iterate_uses_the_sampled_eval_rows(runs_dir: Path) -> None:
    runs, cons = coupling.load_runs(runs_dir)
    by = {(r.algo, r.seed): r for r in runs}
    c = coupling.last_iterate_row(by[("cgrpo", 0)].evals, cons, R_STAR)
    evals = by[("cgrpo", 0)].evals  # the summary of the sampled policy's 4 episodes
    assert len(evals) == 1 and evals["policy"].tolist() == ["sampled"] and evals["episodes"].tolist() == [4]
    assert c["final_eval_return"] == pytest.approx(1.1) and c["final_eval_cost_hazard"] == pytest.approx(0.1)
    assert c["final_eval_cost_fuel"] == 12.0 and c["final_passed"]
    s = coupling.last_iterate_row(by[("grpo-screw", 0)].evals, cons, R_STAR)
    assert s["final_eval_return"] == pytest.approx(0.9) and s["final_within_limits"] and not s["final_passed"]


@pytest.mark.slow
def test_analyze_writes_outputs_and_summary(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    paths, table, summary = coupling.analyze(runs_dir, out, verbose=False)
    names = {p.name for p in paths}
    assert names == {"coupling_runs.csv", "coupling_summary.csv", "coupling.md",
                     "multipliers.png", "effective_weights.png", "costs.png"}
    assert all((out / n).stat().st_size > 0 for n in names)

    runs_csv = pd.read_csv(out / "coupling_runs.csv")
    assert len(runs_csv) == 6 and list(runs_csv["algo"]) == ["cgrpo"] * 3 + ["grpo-screw"] * 3
    summ = pd.read_csv(out / "coupling_summary.csv")
    assert list(summ.columns) == ["algo", "metric", "mean", "ci_low", "ci_high", "n"]
    s = summ.set_index(["algo", "metric"])

    r = s.loc[("cgrpo", "tail_return")]
    assert r["mean"] == pytest.approx(1.16) and r["n"] == 3
    point, lo, hi = stratified_bootstrap_ci([[1.15, 1.16, 1.17]], np.mean)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi))
    assert 1.15 <= r["ci_low"] <= 1.16 <= r["ci_high"] <= 1.17
    assert s.loc[("cgrpo", "return_gap"), "mean"] == pytest.approx(R_STAR - 1.16)
    assert s.loc[("cgrpo", "passed"), "mean"] == 1.0 and s.loc[("cgrpo", "final_passed"), "mean"] == 1.0
    assert s.loc[("grpo-screw", "passed"), "mean"] == pytest.approx(1 / 3)
    assert s.loc[("grpo-screw", "final_passed"), "mean"] == 0.0
    assert s.loc[("grpo-screw", "viol_rate_hazard"), "mean"] == pytest.approx(2 / 3)  # 1, 1, 0
    assert s.loc[("grpo-screw", "viol_rate_fuel"), "mean"] == pytest.approx(0.5)
    # Identical seeds: the interval collapses onto the value.
    t = s.loc[("cgrpo", "tv_hazard")]
    assert (t["mean"], t["ci_low"], t["ci_high"]) == pytest.approx((4.0, 4.0, 4.0))
    assert s.loc[("cgrpo", "osc_hazard"), "mean"] == 3.0 and s.loc[("grpo-screw", "osc_hazard"), "mean"] == 0.0
    assert s.loc[("grpo-screw", "effw_std_reward"), "mean"] == pytest.approx(math.sqrt(0.0096))

    md = (out / "coupling.md").read_text()
    assert "python -m constrained_grpo.eval.studies.coupling analyze" in md and "| metric | `cgrpo` | `grpo-screw` |" in md
    assert f"cgrpo bench --preset coupling --out {runs_dir} --no-save" in md
    assert "1.160 [" in md
    assert coupling.config_differences(coupling.load_runs(runs_dir)[0]) == {
        "config.aggregator": {"cgrpo": ["'scadv'"], "grpo-screw": ["'screw'"]}}
    assert "`config.aggregator`: `cgrpo` 'scadv'; `grpo-screw` 'screw'" in md


def test_incomplete_runs(runs_dir: Path, grid_meta) -> None:
    """A run without done.json (still training) is an error naming the flag, or left out with it."""
    from constrained_grpo.eval.scoring.loader import ResultsError

    _write_run(runs_dir, grid_meta, "grpo-screw", 7, _progress("grpo-screw", 0).iloc[:4], done=False)
    with pytest.raises(ResultsError, match="--allow-incomplete"):
        coupling.load_runs(runs_dir)
    runs, _ = coupling.load_runs(runs_dir, allow_incomplete=True)
    assert ("grpo-screw", 7) not in {(r.algo, r.seed) for r in runs} and len(runs) == 6


@pytest.mark.slow
def test_no_runs_is_a_clear_error(tmp_path: Path) -> None:
    from constrained_grpo.eval.scoring.loader import ResultsError

    with pytest.raises(ResultsError, match="cgrpo bench"):
        coupling.load_runs(tmp_path / "missing")
    r = subprocess.run([sys.executable, "-m", "constrained_grpo.eval.studies.coupling", "analyze", str(tmp_path / "missing"),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "cgrpo bench --preset coupling" in r.stderr


@pytest.mark.slow
def test_cli_smoke(runs_dir: Path, tmp_path: Path) -> None:
    """Both commands end to end in a subprocess, with a tiny batch."""
    demo = subprocess.run(
        [sys.executable, "-m", "constrained_grpo.eval.studies.coupling", "demo", "--out", str(tmp_path / "demo"),
         "--groups", "2", "--group-size", "4", "--points", "3"],
        capture_output=True, text=True, timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
    assert "headline" in demo.stdout and (tmp_path / "demo" / "controlled.png").exists()
    ana = subprocess.run(
        [sys.executable, "-m", "constrained_grpo.eval.studies.coupling", "analyze", str(runs_dir), "--out", str(tmp_path / "a")],
        capture_output=True, text=True, timeout=300,
    )
    assert ana.returncode == 0, ana.stderr
    assert "passed 3/3" in ana.stdout and (tmp_path / "a" / "coupling.md").exists()


def test_coupling_preset_is_the_committed_experiment() -> None:
    """``cgrpo bench --preset coupling``: cgrpo and grpo-screw on HazardFuel, 10 seeds x 3M steps,
    100 evaluation episodes, and the two resolved configurations differ in the aggregator only."""
    from constrained_grpo.eval.presets import get_preset
    from constrained_grpo.registry import resolve_config

    runs = get_preset("coupling").runs(save_agent=False)
    assert [(r.task, r.algo, r.seed, r.steps, r.eval_episodes) for r in runs] == [
        (coupling.ENV_ID, a, s, 3_000_000, 100) for a in ("cgrpo", "grpo-screw") for s in range(10)]
    a, b = (resolve_config(algo, coupling.ENV_ID, **runs[0].config) for algo in ("cgrpo", "grpo-screw"))
    assert {k for k in a["config"] if a["config"][k] != b["config"][k]} == {"aggregator"}
