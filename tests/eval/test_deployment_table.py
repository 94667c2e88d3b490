"""The paired deployment table: gains over a learner's own last iterate, paired by seed, and
the refusal to test two deployments of one training as independent samples."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.scoring.deployment import (
    SharedTrainingError,
    check_independent,
    deployment_table,
    last_iterate_runs,
    mcnemar_exact_p,
    paired_interval,
    run_selections,
    selection_check,
    suite_deployment_table,
    with_deployment,
)
from constrained_grpo.eval.scoring.loader import run_deployment


def _runs(learner: str, algo: str, deploy: str, scores, feasible, task: str = "T") -> pd.DataFrame:
    return pd.DataFrame({"task": task, "algo": algo, "learner": learner, "deploy": deploy, "seed": range(len(scores)),
                         "score": scores, "feasible": feasible})


def test_paired_interval_and_mcnemar_by_hand():
    # d = 1, 2, 3: mean 2, sd 1, t_{2, 0.975} = 4.302653 (a t table): 2 +- 4.302653 / sqrt(3).
    mean, lo, hi = paired_interval(np.array([1.0, 2.0, 3.0]))
    assert (mean, lo, hi) == pytest.approx((2.0, 2 - 2.484138, 2 + 2.484138), abs=1e-6)
    assert mcnemar_exact_p(6, 0) == pytest.approx(2 / 64)  # six seeds all one way: p = 2 * 2^-6
    assert mcnemar_exact_p(5, 0) == pytest.approx(2 / 32)  # five are not enough at 5%
    assert mcnemar_exact_p(3, 1) == pytest.approx(2 * 5 / 16) and mcnemar_exact_p(0, 0) == 1.0


def test_the_table_pairs_each_rule_with_its_own_last_iterate():
    base = np.linspace(0.0, 0.9, 10)
    gain = np.array([0.5, 0.6, 0.4, 0.5, 0.55, 0.45, 0.5, 0.6, 0.4, 0.5])  # mean 0.5
    noisy = np.array([0.5, -0.6, 0.4, -0.5, 0.1, -0.1, 0.3, -0.2, 0.0, 0.2])  # mean 0.01: not shown
    last_ok = np.array([False] * 7 + [True] * 3)
    runs = pd.concat([
        _runs("a", "a", "last", base, last_ok),
        _runs("a", "a-best", "best-feasible", base + gain, np.ones(10, bool)),  # 7 seeds moved in, none out
        _runs("a", "a-mix", "tail-mixture", base + noisy, last_ok),
        _runs("b", "b", "last", base, np.ones(10, bool)),
        _runs("b", "b", "tail-mixture", base - 1.0, np.r_[np.zeros(6, bool), np.ones(4, bool)]),  # 6 moved out
    ])
    table = deployment_table(runs).set_index(["learner", "deploy"])
    best = table.loc[("a", "best-feasible")]
    half = 2.262157 * np.std(gain, ddof=1) / np.sqrt(10)  # t_{9, 0.975} = 2.262157
    assert best["seeds"] == 10 and best["gain_mean"] == pytest.approx(0.5)
    assert (best["gain_lo"], best["gain_hi"]) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-5)
    assert best["gain"] == "gain" and (best["moved_in"], best["moved_out"]) == (7, 0) and best["limits"] == "into"
    assert best["limits_p"] == pytest.approx(2 / 128) and (best["feasible_last"], best["feasible_deploy"]) == (3, 10)
    mix = table.loc[("a", "tail-mixture")]
    assert mix["gain"] == "not shown" and mix["limits"] == "no change shown"
    worse = table.loc[("b", "tail-mixture")]
    assert worse["gain"] == "loss" and worse["gain_mean"] == pytest.approx(-1.0) and worse["limits"] == "out of"
    assert ("a", "last") not in table.index  # the last iterate is the reference, not a row


def test_two_deployments_of_one_training_are_never_independent_samples():
    runs = pd.concat([_runs("cgrpo", "cgrpo", "last", np.zeros(10), np.ones(10, bool)),
                      _runs("cgrpo", "cgrpo-best", "best-feasible", np.ones(10), np.ones(10, bool)),
                      _runs("ppo-lag", "ppo-lag", "last", np.ones(10), np.ones(10, bool))])
    with pytest.raises(SharedTrainingError, match=r"cgrpo and cgrpo-best share 10 training\(s\).*paired by seed"):
        check_independent(runs, "cgrpo", "cgrpo-best")
    check_independent(runs, "cgrpo", "ppo-lag")  # other trainings: independent
    check_independent(runs, "cgrpo-best", "ppo-lag")
    twice = pd.concat([runs, _runs("cgrpo", "cgrpo-best2", "best-feasible", np.ones(10), np.ones(10, bool))])
    with pytest.raises(SharedTrainingError, match="deployed with 'best-feasible' by more than one run"):
        deployment_table(twice)


def test_learner_and_rule_come_from_config_json():
    new = {"algo": {"name": "cgrpo-best", "alias_of": "cgrpo", "resolved": {"config": {"deploy": "best-feasible"}}}}
    old = {"algo": {"name": "cgrpo-mix", "defaults": {"algo": "cgrpo-mix", "final_policy": "tail-mixture"},
                    "resolved": {"config": {"final_policy": "tail-mixture"}}}}
    option = {"algo": {"name": "ppo-lag", "resolved": {"config": {"deploy": "tail-mixture"}}}}
    plain = {"algo": {"name": "cgrpo-pid", "defaults": {"algo": "cgrpo-pid"}, "resolved": {"config": {}}}}
    assert run_deployment(new) == ("cgrpo", "best-feasible") and run_deployment(old) == ("cgrpo", "tail-mixture")
    assert run_deployment(option) == ("ppo-lag", "tail-mixture") and run_deployment(plain) == ("cgrpo-pid", "last")
    # A run is named as the long table names it (run.algo), even where its algo section says otherwise.
    renamed = {"run": {"algo": "mine"}, "algo": {"name": "cgrpo", "resolved": {"config": {}}}}
    assert run_deployment(renamed) == ("mine", "last")
    runs = pd.DataFrame({"task": ["T", "T"], "algo": ["cgrpo-best", "ppo"], "seed": [0, 0]})
    out = with_deployment(runs, {("T", "cgrpo-best", 0): new})
    assert out["learner"].tolist() == ["cgrpo", "ppo"] and out["deploy"].tolist() == ["best-feasible", "last"]


def test_selection_check_compares_evaluated_costs_with_the_selections_bound():
    runs = pd.DataFrame({"task": "T", "algo": "a", "seed": [0, 1, 2, 3], "eval_cost_hit": [0.05, 0.19, 0.05, 0.3],
                         "eval_cost_fuel": [3.0, 3.0, 4.5, 3.0]})
    sel = {"rule": "best-feasible", "best_iteration": 7, "cost_bound": [0.18, 4.4]}
    selections = {("T", "a", 0): sel, ("T", "a", 1): sel, ("T", "a", 2): sel,
                  ("T", "a", 3): {"rule": "best-feasible", "best_iteration": None, "cost_bound": None}}
    out = selection_check(runs, selections, {"T": ["hit", "fuel"]})
    # Seed 0 within both bounds; seed 1 over the hit bound (0.19 > 0.18); seed 2 over fuel; seed 3 kept nothing.
    assert out["within_bound"].tolist() == [True, False, False, False]
    assert out["selected"].tolist() == [True, True, True, False] and out["iteration"].iloc[0] == 7
    assert selection_check(runs, {("T", "a", 0): {"rule": "last"}}, {"T": ["hit", "fuel"]}).empty


def test_a_run_records_its_deployment_in_done_json(tmp_path):
    from constrained_grpo.eval.runner import RunSpec, execute_run

    tiny = {"n_envs": 4, "n_steps": 32, "batch_size": 64, "n_epochs": 1, "deploy": "best-feasible"}
    spec = RunSpec("Grid/HazardFuel3x3-v0", "ppo-lag", 0, 1024, 100, tiny, save_agent=False)
    assert execute_run(spec, tmp_path).status == "done"
    selected = run_selections(str(tmp_path))[("Grid/HazardFuel3x3-v0", "ppo-lag", 0)]
    assert selected["rule"] == "best-feasible" and selected["alpha"] == 0.05 and "cost_bound" in selected
    recorded = json.loads((spec.run_dir(tmp_path) / "config.json").read_text())
    assert run_deployment(recorded) == ("ppo-lag", "best-feasible")


def test_the_main_tables_rank_each_learner_once_on_its_last_iterate():
    runs = pd.concat([_runs("cgrpo", "cgrpo", "last", np.zeros(3), np.ones(3, bool)),
                      _runs("cgrpo", "cgrpo-best", "best-feasible", np.ones(3), np.ones(3, bool)),
                      _runs("ppo-lag", "ppo-lag", "last", np.ones(3), np.ones(3, bool))])
    ranked = last_iterate_runs(runs)
    assert sorted(set(ranked["algo"])) == ["cgrpo", "ppo-lag"] and len(ranked) == 6
    assert ranked[ranked["algo"] == "cgrpo"]["score"].tolist() == [0.0, 0.0, 0.0]  # not the alias's scores
    with pytest.raises(SharedTrainingError, match="two runs deploy its last iterate"):
        last_iterate_runs(pd.concat([runs, _runs("cgrpo", "cgrpo-copy", "last", np.zeros(3), np.ones(3, bool))]))


def test_the_suite_aggregate_is_stratified_by_task():
    """Task A's paired gains 1, 2, 3 (mean 2, variance 1), task B's 0, 0, 3 (mean 1, variance
    3): the suite's gain is (2 + 1) / 2 = 1.5 with variance (1/3 + 3/3) / 4 = 1/3 on
    Welch-Satterthwaite's (4/3)^2 / ((1/3)^2 / 2 + 1 / 2) = 3.2 degrees of freedom,
    t_{3.2, 0.975} = 3.072829: 1.5 +- 1.774099. Two seeds moved into the limits, none out:
    McNemar's p = 1/2, no change shown."""
    base = np.zeros(3)
    runs = pd.concat([
        _runs("a", "a", "last", base, np.array([False, False, True]), task="A"),
        _runs("a", "a-best", "best-feasible", np.array([1.0, 2.0, 3.0]), np.ones(3, bool), task="A"),
        _runs("a", "a", "last", base, np.ones(3, bool), task="B"),
        _runs("a", "a-best", "best-feasible", np.array([0.0, 0.0, 3.0]), np.ones(3, bool), task="B"),
        _runs("b", "b", "last", base, np.ones(3, bool), task="A"),  # b has no deployment on B: not in the suite
        _runs("b", "b-best", "best-feasible", base + 1, np.ones(3, bool), task="A"),
    ])
    table = suite_deployment_table(runs, ["A", "B"])
    assert table["learner"].tolist() == ["a"]
    row = table.iloc[0]
    assert (row["gain_mean"], row["gain_lo"], row["gain_hi"]) == pytest.approx((1.5, 1.5 - 1.774099, 1.5 + 1.774099), abs=1e-5)
    assert row["gain"] == "not shown" and (row["moved_in"], row["moved_out"]) == (2, 0) and row["limits_p"] == 0.5
    assert row["seeds"] == 6 and row["task"] == "suite"
