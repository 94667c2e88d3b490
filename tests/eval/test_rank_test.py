"""The rank test (stats.permutation_test, stats.holm, leaderboard.shared_ranks): exact p-values
worked out by hand, its size checked by simulation, and the tables a careful statistician
would rank: ties that share, outliers that do not outrank, one verdict per task and suite."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.scoring import stats
from constrained_grpo.eval.scoring.leaderboard import seeds_to_separate, shared_ranks


def test_exact_paired_p_values_by_hand() -> None:
    # d = x - y = (1, 2, 3): of the 8 sign patterns only +++ and --- reach |mean| = 2.
    t, p = stats.permutation_test({"t": [1.0, 2.0, 3.0]}, {"t": [0.0, 0.0, 0.0]})
    assert t == pytest.approx(2.0) and p == 2 / 8
    # d = (1, 1, 3): |mean| >= 5/3 again only for +++ and ---; (1, 1, -3) etc. give 1/3 or 1.
    assert stats.permutation_test({"t": [1.0, 1.0, 3.0]}, {"t": [0.0] * 3})[1] == 2 / 8
    # d = (1, 1, 1, 1): the patterns with two + and two - give 0; |mean| = 1 for 2 of 16, 0.5 for 8.
    assert stats.permutation_test({"t": [1.0] * 4}, {"t": [0.0] * 4})[1] == 2 / 16
    # Identical samples: every relabelling ties the observed 0, p = 1.
    assert stats.permutation_test({"t": [0.3] * 6}, {"t": [0.3] * 6}) == (0.0, 1.0)


def test_pairs_pool_over_tasks_and_swap_within_each_seed() -> None:
    # Two tasks of 3 seeds: 6 pairs, 64 relabellings; a constant difference of 1 -> p = 2/64.
    x = {"a": [2.0, 2.0, 2.0], "b": [5.0, 5.0, 5.0]}
    y = {"a": [1.0, 1.0, 1.0], "b": [4.0, 4.0, 4.0]}
    t, p = stats.permutation_test(x, y)
    assert t == pytest.approx(1.0) and p == 2 / 64


def test_holm_by_hand() -> None:
    adj = stats.holm({"ab": 0.01, "ac": 0.04, "bc": 0.03, "ad": float("nan")})
    # Sorted 0.01, 0.03, 0.04 with multipliers 3, 2, 1: 0.03, max(0.03, 0.06), max(0.06, 0.04).
    assert adj["ab"] == pytest.approx(0.03) and adj["bc"] == pytest.approx(0.06) and adj["ac"] == pytest.approx(0.06)
    assert np.isnan(adj["ad"])


@pytest.mark.slow
@pytest.mark.parametrize("paired", [True, False])
def test_size_of_the_rank_test_on_null_data(paired: bool) -> None:
    """Two algorithms with the same skewed score distribution, 10 paired seeds with a shared
    seed effect, or 8 seeds each unpaired (C(16, 8) = 12,870 splits): the test rejects at 5%
    at most 5% of the time (exact test: P(p <= 0.05) <= 0.05), and not vacuously: at about
    its nominal rate."""
    rng = np.random.default_rng(3)
    reps, n = 2000, 10 if paired else 8
    seed_effect = rng.exponential(1.0, size=(reps, n)) if paired else np.zeros((reps, n))
    x = seed_effect + rng.exponential(0.5, size=(reps, n))
    y = seed_effect + rng.exponential(0.5, size=(reps, n))
    if paired:
        p = np.array([stats.permutation_test({"t": a}, {"t": b})[1] for a, b in zip(x, y)])
    else:
        p = np.array(stats.two_sample_p_values([([a], [b]) for a, b in zip(x, y)]))
    rate = float(np.mean(p <= 0.05))
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / reps), rate
    assert rate >= 0.02, rate


@pytest.mark.slow
def test_power_of_the_two_sample_test() -> None:
    """A shift of one standard deviation at 10 seeds each (normal scores): the exact test at
    5% rejects with probability about 0.56 (the t-test's power at this size), by simulation."""
    rng = np.random.default_rng(8)
    reps = 600
    x = rng.standard_normal((reps, 10)) + 1.0
    y = rng.standard_normal((reps, 10))
    power = float(np.mean(np.array(stats.two_sample_p_values([([a], [b]) for a, b in zip(x, y)])) <= 0.05))
    assert 0.45 <= power <= 0.68, power


def test_power_on_a_consistent_difference() -> None:
    # Ahead by 0.1 on 9 of 10 paired seeds, behind by 0.05 on one: mean 0.085. As extreme:
    # every sign equal (0.085) and the loss flipped (0.095), each with its mirror: p = 4/1024;
    # flipping a win as well gives 0.075.
    rng = np.random.default_rng(4)
    y = rng.normal(0.5, 0.2, size=10)
    d = np.array([0.1] * 9 + [-0.05])
    assert stats.permutation_test({"t": y + d}, {"t": y})[1] == 4 / 1024


def test_a_one_seed_outlier_does_not_outrank_a_nine_of_ten_winner() -> None:
    a = np.array([6.0] * 9 + [600.0])   # higher mean (65.4) from one seed
    b = np.full(10, 7.0)                # ahead on 9 of 10 paired seeds
    t, p = stats.permutation_test({"t": a}, {"t": b})
    assert t == pytest.approx(58.4) and p == 1.0   # every relabelling is as extreme: no evidence either way
    rank, _, diff = shared_ranks({"a": a, "b": b})
    # Unpaired, the split that puts the 600 with b is as extreme the other way: p >= 1/2.
    assert rank == {"a": 1, "b": 1} and diff[("a", "b")][1] > 0.5


def test_near_identical_policies_share_a_rank() -> None:
    # Three algorithms whose seeds differ by noise only (3 hazard events in 500 apart): shared.
    rng = np.random.default_rng(5)
    base = rng.normal(0.2, 0.05, size=10)
    samples = {k: base + rng.normal(0, 0.006, size=10) for k in ("a", "b", "c")}
    rank, _, diff = shared_ranks(samples)
    assert set(rank.values()) == {1} and all(q > 0.05 for _, _, q in diff.values())


def test_seeds_needed_to_separate_pairs() -> None:
    # 2 / C(2n, n) <= 0.05 / m: C(2n, n) >= 40 m; C(2n, n) = 2, 6, 20, 70, 252, 924, 3432, 12870,
    # 48620; and pairs are tested from 5 seeds each.
    assert [seeds_to_separate(m) for m in (1, 3, 15, 21, 136, 300, 1000)] == [5, 5, 6, 6, 8, 8, 9]
    assert 40 * 300 <= 12_870 and 40 * 136 > 3_432 and 40 * 3 > 70


def test_exact_two_sample_p_values_by_hand() -> None:
    # 3 against 3: of the C(6, 3) = 20 splits only the observed one and its mirror reach |T| = 1.
    assert stats.permutation_test({"t": [1.0] * 3}, {"t": [0.0] * 3}, paired=False) == (1.0, 2 / 20)
    # (2, 0, 0) against (1, 0, 0): T = 1/3. A split's |T| is |S_x - S_y|/3 with S_x + S_y = 3:
    # below 1/3 only when the sums are equal, impossible (3 is odd), so every split is as extreme.
    assert stats.permutation_test({"t": [2.0, 0.0, 0.0]}, {"t": [1.0, 0.0, 0.0]}, paired=False)[1] == 1.0
    # (3, 0, 0) against (1, 1, 1): T = 0; every split ties or exceeds it: p = 1.
    assert stats.permutation_test({"t": [3.0, 0.0, 0.0]}, {"t": [1.0, 1.0, 1.0]}, paired=False) == (0.0, 1.0)
    # (4, 3, 1) against (2, 0, 0): T = 2; |T*| = |2 S_x - 10|/3 >= 2 when S_x >= 8 or <= 2:
    # {4, 3, 2}, {4, 3, 1} and their mirrors {1, 0, 0}, {2, 0, 0}: p = 4/20.
    assert stats.permutation_test({"t": [4.0, 3.0, 1.0]}, {"t": [2.0, 0.0, 0.0]}, paired=False)[1] == 4 / 20
    # Ten seeds each, all of one above all of the other: 2/C(20, 10), separable among 300 pairs.
    assert stats.permutation_test({"t": [1.0] * 10}, {"t": [0.0] * 10}, paired=False)[1] == 2 / 184_756
    # Two tasks: labels permuted within each task (random splits): p about 2/C(20,10)^2, drawn.
    t, p = stats.permutation_test({"a": [1.0] * 10, "b": [3.0] * 10}, {"a": [0.0] * 10, "b": [2.0] * 10}, paired=False)
    assert t == 1.0 and p == 1 / 20_001


def test_the_p_value_does_not_depend_on_summation_order() -> None:
    # Scores that differ in the last bits by the order they were summed in tie exactly.
    x = np.array([0.1 + 0.2, 0.3, 0.3, 0.3, 0.3, 0.3])
    y = np.array([0.3, 0.1 + 0.2, 0.3, 0.3, 0.3, 0.3])
    assert stats.permutation_test({"t": x}, {"t": y}, paired=False)[1] == 1.0


@pytest.mark.slow
def test_clearly_ordered_algorithms_are_separated_at_ten_seeds() -> None:
    # 25 algorithms (300 pairs), 10 seeds each, means 0.1 apart with sd 0.01: every pair is
    # separated under Holm (the paired test's floor 2/1024 is above 0.05/300 and could not).
    rng = np.random.default_rng(7)
    samples = {f"a{i:02d}": 0.1 * i + 0.01 * rng.standard_normal(10) for i in range(25)}
    rank, _, diff = shared_ranks(samples)
    assert sorted(rank.values()) == list(range(1, 26))
    assert rank["a24"] == 1 and rank["a00"] == 25


def test_unpaired_seeds_use_a_permutation_of_labels() -> None:
    # Labels permuted within the task: exact over the C(16, 8) = 12,870 splits.
    t, p = stats.permutation_test({"t": [1.0] * 8}, {"t": [0.0] * 8}, paired=False)
    assert t == 1.0 and p == 2 / 12_870
    rank, _, diff = shared_ranks({"a": np.ones(8), "b": np.zeros(8)})
    assert rank == {"a": 1, "b": 2}


def _one_task_board():
    """Three algorithms x 8 seeds on a one-constraint task, 20 evaluation episodes each."""
    from constrained_grpo.constraints import Constraint
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard
    from constrained_grpo.schema import TaskMeta

    meta = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.2, "", indicator=True),), optimum_return=2.0,
                    unconstrained_return=3.0, optimal_multipliers=(0.5,))
    rng = np.random.default_rng(6)
    rows = []
    for algo, ret, hazard in (("a", 1.9, 0.0), ("b", 1.5, 0.0), ("c", 1.52, 0.05)):
        for seed in range(8):
            r = ret + 0.02 * rng.standard_normal()
            for t in range(10):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                             "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": r, "length": np.nan,
                             "cost_hazard": hazard, "lambda_hazard": np.nan})
            for i in range(20):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "eval",
                             "policy": "sampled", "iteration": 9, "episode": i, "reset_seed": 1_000_000 + i,
                             "env_steps": 1000, "wall_s": np.nan, "return": r, "length": 5.0,
                             "cost_hazard": float(i < round(hazard * 20)), "lambda_hazard": np.nan})
    return build_leaderboard(pd.DataFrame(rows), {meta.task: meta}, reps=200)


def test_suite_and_task_verdicts_agree_on_one_task() -> None:
    """On a suite of one task, the aggregate's pairs are the task's pairs, with the same p."""
    lb = _one_task_board()
    assert lb.per_task["Toy/T-v0"].set_index("algo").loc["a", "rank"] == 1
    pairs = lb.pairs
    task = pairs[pairs["scope"] != "suite:toy"].drop(columns="scope").reset_index(drop=True)
    suite = pairs[pairs["scope"] == "suite:toy"].drop(columns="scope").reset_index(drop=True)
    pd.testing.assert_frame_equal(task, suite)
    per_task = lb.per_task["Toy/T-v0"].set_index("algo")["rank"].to_dict()
    overall = lb.overall["toy"].set_index("algo")["rank"].to_dict()
    assert per_task == overall
