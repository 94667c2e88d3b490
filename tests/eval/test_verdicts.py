"""Verdicts that hold up: each numbered finding of the verdicts issue, old behaviour reproduced
on a synthetic long table by the old rule (re-stated here in a line), and the new one asserted.

Task: one constraint ``hazard`` with limit 0.1 and an exact optimum R* = 2.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring import stats
from constrained_grpo.eval.scoring.leaderboard import (
    BUDGET_RATIO,
    build_leaderboard,
    comparability,
    render_markdown,
    shared_ranks,
    write_leaderboard,
)
from constrained_grpo.eval.scoring.metrics import constrained_score, run_metrics, standard_error
from constrained_grpo.eval.scoring.verdict import cost_bounds, cost_verdict
from constrained_grpo.eval.runner import EVAL_SEED, TaskMeta

META = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0, unconstrained_return=3.0,
                optimal_multipliers=(0.5,))
TASKS = {META.task: META}
N_EVAL = 20


def run_rows(algo: str, seed: int, *, ret: float, hazard: float, train_hazard: float | None = None,
             lam: np.ndarray | None = None, steps: int = 4000, greedy_ret: float | None = None,
             greedy_hazard: float | None = None, first_seed: float = EVAL_SEED, iters: int = 40,
             policies: tuple[str, ...] = ("sampled", "deterministic"), exact: bool = False) -> list[dict]:
    """One run: ``iters`` train rows with cost ``train_hazard`` (default ``hazard``), and eval
    rows whose episodes have return ``ret`` and hazard indicator 1 on a fraction ``hazard``
    (with ``exact``, cost ``hazard`` in every episode: an evaluation without noise)."""
    rows = []
    th = hazard if train_hazard is None else train_hazard
    for t in range(iters):
        rows.append({"suite": "toy", "task": META.task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                     "env_steps": steps * (t + 1) // iters, "wall_s": 0.1 * t, "return": ret, "length": np.nan,
                     "cost_hazard": th, "lambda_hazard": np.nan if lam is None else float(lam[t])})
    for policy in policies:
        r = ret if policy == "sampled" or greedy_ret is None else greedy_ret
        h = hazard if policy == "sampled" or greedy_hazard is None else greedy_hazard
        for i in range(N_EVAL):
            rows.append({"suite": "toy", "task": META.task, "algo": algo, "seed": seed, "kind": "eval", "policy": policy,
                         "iteration": iters - 1, "episode": i, "reset_seed": first_seed + i, "env_steps": steps, "wall_s": np.nan,
                         "return": r, "length": 5.0, "cost_hazard": h if exact else float(i < round(h * N_EVAL)),
                         "lambda_hazard": np.nan if lam is None else float(lam[-1])})
    return rows


def table(*runs: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([r for rows in runs for r in rows])


def per_task(lb) -> pd.DataFrame:
    return lb.per_task[META.task].set_index("algo")


# -------------------------------------------------------------------- 1. ties and names


def test_exact_ties_share_a_rank_whatever_the_names():
    flat = np.full(40, 0.5)
    for names in (("aaa", "zzz"), ("zzz", "aaa")):
        # Seven seeds: the exact paired test's smallest p, 2/128, times Holm's 3 pairs is <= 0.05.
        # Noiseless evaluations (every run within): what one run resolves is not the question here.
        t = table(*[run_rows(a, s, ret=1.8, hazard=0.05, lam=flat, exact=True) for a in names for s in range(7)],
                  *[run_rows("weak", s, ret=1.0, hazard=0.05, lam=flat, exact=True) for s in range(7)])
        # The old rule sorted equal returns by name: rank 1 went to the alphabetically first.
        old = sorted(names, key=lambda a: (-1.8, a))
        assert old[0] == "aaa"
        lb = build_leaderboard(t, TASKS, reps=300)
        df = per_task(lb)
        assert df.loc["aaa", "rank"] == df.loc["zzz", "rank"] == 1 and df.loc["weak", "rank"] == 3
        assert bool(df.loc["aaa", "shared"]) and df.loc["aaa", "avg_rank"] == df.loc["zzz", "avg_rank"] == 1.5
        assert "zzz" in df.loc["aaa", "not_separated"] and "weak" not in df.loc["aaa", "not_separated"]
        md = render_markdown(lb)
        assert "| 1= [1, 2] | a | aaa |" in md and "| 1= [1, 2] | a | zzz |" in md and "| 3 [3, 3] | b | weak |" in md


def test_shared_ranks_separate_only_by_the_permutation_test():
    rng = np.random.default_rng(0)
    a = 1.0 + 0.01 * rng.standard_normal(10)
    b = a - 0.5                       # clearly worse: every seed of b below every seed of a
    c = a + 0.001 * rng.standard_normal(10)  # indistinguishable from a
    rank, avg, diff = shared_ranks({"a": a, "b": b, "c": c})
    assert rank == {"a": 1, "c": 1, "b": 3}
    # (mean difference, p, Holm-adjusted p): of the C(20, 10) splits of a's and b's runs only
    # the observed one and its mirror are as extreme, p = 2/184,756; Holm over 3 pairs with
    # b-c as small: 3p.
    assert diff[("a", "b")][0] == pytest.approx(0.5) and diff[("a", "b")][1] == 2 / 184_756
    assert diff[("a", "b")][2] == pytest.approx(3 * 2 / 184_756) and diff[("a", "c")][2] > 0.05
    # With 3 seeds nothing is separated: everyone shares rank 1.
    rank3, _, diff3 = shared_ranks({"a": a[:3], "b": b[:3]}, reps=200)
    assert rank3 == {"a": 1, "b": 1} and diff3 == {}


# ------------------------------------------------------- 2. infeasible never outscores feasible


def test_infeasible_run_with_higher_return_ranks_below_a_feasible_one():
    rng = np.random.default_rng(1)
    rows = []
    for s in range(6):  # six paired seeds: p = 2/64 <= 0.05 for the one pair
        rows += run_rows("breaker", s, ret=2.5 + 0.01 * rng.standard_normal(), hazard=0.5)   # above R*, infeasible
        # Feasible by the verdict: no event in 20 episodes, U = t_0.95,19 (0.1 / sqrt 20) / sqrt 20 = 0.0086.
        rows += run_rows("keeper", s, ret=1.6 + 0.01 * rng.standard_normal(), hazard=0.0)
    t = pd.DataFrame(rows)
    runs = run_metrics(t, TASKS)
    # Old aggregate: IQM of the normalised return favoured the limit breaker.
    old = runs.groupby("algo")["eval_return_norm"].apply(lambda x: stats.iqm(x.to_numpy()))
    assert old["breaker"] > old["keeper"]
    assert (runs.loc[runs.algo == "breaker", "score"] < 0).all() and (runs.loc[runs.algo == "keeper", "score"] > 0).all()
    lb = build_leaderboard(t, TASKS, reps=300)
    df = per_task(lb)
    assert df.loc["keeper", "rank"] == 1 and df.loc["breaker", "rank"] == 2
    overall = lb.overall["toy"].set_index("algo")
    assert overall.loc["keeper", "iqm"] > overall.loc["breaker", "iqm"] and overall.loc["keeper", "rank"] == 1
    keeper = {META.task: runs[runs.algo == "keeper"]["score"].to_numpy()}
    breaker = {META.task: runs[runs.algo == "breaker"]["score"].to_numpy()}
    assert stats.probability_of_improvement(breaker, keeper) == 0.0
    assert "No algorithm is shown feasible" not in render_markdown(lb)


def test_constrained_score_formula():
    assert constrained_score(1.5, 2.0, 0.05, 0.1) == pytest.approx(0.75)
    assert constrained_score(2.4, 2.0, 0.05, 0.1) == pytest.approx(1.2)   # feasible within tolerance
    assert constrained_score(-1.0, 2.0, 0.0, 0.1) == 0.0                  # floored at 0
    assert constrained_score(9.0, 2.0, 0.3, 0.1) == pytest.approx(-0.3)
    assert constrained_score(9.0, None, 0.0, 0.1) == 9.0                  # no optimum: the return


def test_banner_when_no_algorithm_is_feasible():
    t = table(*[run_rows(a, s, ret=r, hazard=0.9) for a, r in (("x", 0.0), ("y", 1.0)) for s in range(3)])
    md = render_markdown(build_leaderboard(t, TASKS, reps=100))
    assert "No algorithm is shown feasible on this task" in md


# ------------------------------------------------------------------------ 3. uncertainty


def test_three_seeds_print_no_interval_and_identical_seeds_are_flagged():
    t = table(*[run_rows("a", s, ret=1.5, hazard=0.0) for s in range(3)],
              *[run_rows("b", s, ret=1.0, hazard=0.0) for s in range(5)])
    md = render_markdown(build_leaderboard(t, TASKS, reps=200))
    # The old page printed a percentile interval at n = 3, which is [min, max].
    x = np.array([1.5, 1.6, 1.7])
    _, lo, hi = stats.stratified_bootstrap_ci([x], np.mean, reps=2000)
    assert (lo, hi) == pytest.approx((1.5, 1.7))
    assert "(n=3: no CI)" in md
    assert "(identical seeds)" in md      # b: five identical seeds, a zero-width interval
    # a's 3 seeds cannot separate it from b: rows by mean, both intervals [1, 2], one group.
    assert "| 1 [1, 2] | a | a |" in md and "| 2 [1, 2] | a | b |" in md


def test_feasibility_is_a_fraction_of_seeds_and_a_probability_not_a_cut_on_the_mean():
    # 4 seeds at violation 0, one at 0.4: the mean 0.08 passes the old cut (<= 0.1).
    rows = [r for s in range(4) for r in run_rows("a", s, ret=1.5, hazard=0.1, exact=True)]
    rows += run_rows("a", 4, ret=1.5, hazard=0.14, exact=True)
    runs = run_metrics(pd.DataFrame(rows), TASKS)
    assert runs["violation"].mean() <= 0.1        # the old "feasible"
    df = per_task(build_leaderboard(pd.DataFrame(rows), TASKS, reps=2000))
    assert df.loc["a", "feasible_seeds"] == 4
    p = df.loc["a", "p_feasible"]
    # P(mean over a resample <= 0.1) = P(the bad seed is drawn at most once in 5) = (4/5)^5 + 5 (1/5)(4/5)^4.
    assert p == pytest.approx(0.8**5 + 5 * 0.2 * 0.8**4, abs=0.03)
    assert df.loc["a", "verdict"] == "uncertain"


def test_a_policy_at_a_binding_indicator_limit_is_undetermined_on_500_episodes_not_broken():
    # The exact LP policy of Grid/HazardFuel-v0 hits the hazard (d = 0.1) in 61 of the
    # harness's 500 episodes (J = 0.122; 20,000 episodes give 0.0993). Clopper-Pearson's
    # one-sided 95% bounds: P(Bin(500, L) >= 61) = 0.05 and P(Bin(500, U) <= 61) = 0.05.
    from scipy.stats import binom

    hits = np.array([1.0] * 61 + [0.0] * 439)
    lower, upper = cost_bounds(hits, 0.1, True, alpha_lower=0.05, alpha_upper=0.05)
    assert binom.sf(60, 500, lower) == pytest.approx(0.05, rel=1e-6)
    assert binom.cdf(61, 500, upper) == pytest.approx(0.05, rel=1e-6)
    assert lower < 0.11 < upper and cost_verdict(lower, upper, 0.1, 0.1) == "undetermined"
    # 20,000 episodes at 0.0993 (1,986 hits): U = 0.1028 (normal approximation 0.0993 +
    # 1.645 * 0.00211 = 0.1028) <= 0.11.
    many = np.zeros(20_000)
    many[:1986] = 1.0
    assert cost_verdict(*cost_bounds(many, 0.1, True, alpha_lower=0.05, alpha_upper=0.05), 0.1, 0.1) == "within"
    # A policy that hits in 30% of 500 episodes: L = 0.266 > 0.11.
    bad = np.array([1.0] * 150 + [0.0] * 350)
    assert cost_verdict(*cost_bounds(bad, 0.1, True, alpha_lower=0.05, alpha_upper=0.05), 0.1, 0.1) == "over"
    # One episode has no bound; unknown bounds are undetermined.
    assert cost_bounds([1.0], 0.1, True, alpha_lower=0.05, alpha_upper=0.05) == (pytest.approx(math.nan, nan_ok=True),) * 2
    assert cost_verdict(math.nan, math.nan, 0.1, 0.1) == "undetermined"
    assert cost_verdict(0.11, 0.11, 0.1, 0.1) == "within" and cost_verdict(0.111, 0.111, 0.1, 0.1) == "over"


def test_ten_seeds_of_one_policy_on_shared_episodes_are_not_ten_pieces_of_evidence():
    # Ten seeds of the same policy evaluated on the same 500 episodes repeat one draw (61 hits):
    # each seed is undetermined, and P(feasible) carries the shared evaluation noise:
    # P(0.122 + 0.01465 eps <= 0.11) = Phi(-0.819) = 0.206 (seeds alone would give 0).
    rows = [r for s in range(10) for r in run_rows("ref", s, ret=1.13, hazard=0.0, policies=())]
    rows += [{"suite": "toy", "task": META.task, "algo": "ref", "seed": s, "kind": "eval", "policy": "sampled",
              "iteration": 39, "episode": i, "reset_seed": EVAL_SEED + i, "env_steps": 4000, "wall_s": np.nan,
              "return": 1.13, "length": 5.0, "cost_hazard": float(i < 61), "lambda_hazard": np.nan}
             for s in range(10) for i in range(500)]
    t = pd.DataFrame(rows)
    lb = build_leaderboard(t, TASKS, reps=4000)
    df = per_task(lb)
    assert df.loc["ref", "feasible_seeds"] == 0 and df.loc["ref", "undetermined_seeds"] == 10
    assert df.loc["ref", "p_feasible"] == pytest.approx(0.206, abs=0.02)
    assert df.loc["ref", "verdict"] == "uncertain"
    assert "| 0/10 | 10/10 |" in render_markdown(lb)


def test_comparing_pairs_only_with_enough_seeds_for_the_interval():
    assert stats.MIN_SEEDS_FOR_CI == 5


# ------------------------------------------------------------------ 4. stability ranking


def test_multiplier_resting_at_zero_ranks_above_a_violated_ramp():
    t_ = np.linspace(0, 1, 40)
    rest = np.where(np.arange(40) % 10 == 0, 0.01, 0.0)
    ramp = 50 * t_
    t = table(*[run_rows("rest", s, ret=1.5, hazard=0.0, lam=rest) for s in range(5)],
              *[run_rows("ramp", s, ret=1.5, hazard=0.0, train_hazard=0.3, lam=ramp) for s in range(5)])
    runs = run_metrics(t, TASKS).set_index("algo")
    assert runs.loc["rest", "stability"].min() > runs.loc["ramp", "stability"].max()
    assert set(runs.loc["rest", "stability_class"]) == {"settled"}
    assert set(runs.loc["ramp", "stability_class"]) <= {"diverging", "at bound"}


def test_lambda_distance_only_where_lambda_is_in_reward_units():
    lam = np.full(40, 0.8)
    t = table(*[run_rows(a, 0, ret=1.5, hazard=0.1, lam=lam) for a in ("screw", "scadv")])
    runs = run_metrics(t, TASKS, lambda_in_reward_units={"screw": True, "scadv": False}).set_index("algo")
    assert runs.loc["screw", "lambda_dist"] == pytest.approx(0.3)   # |0.8 - 0.5|
    assert math.isnan(runs.loc["scadv", "lambda_dist"])


def test_cost_tracking_is_reported_per_constraint():
    lam = np.full(40, 0.5)
    runs = run_metrics(table(run_rows("a", 0, ret=1.5, hazard=0.1, train_hazard=0.12, lam=lam)), TASKS)
    assert runs.loc[0, "tracking_hazard"] == pytest.approx(0.2)    # |0.12 - 0.1| / 0.1


# -------------------------------------------------------------------- 5. paired episodes


def test_unpaired_evaluations_are_not_ranked_together():
    t = table(*[run_rows("grpo-like", s, ret=1.5, hazard=0.0) for s in range(5)],
              *[run_rows("sb3-like", s, ret=1.4, hazard=0.0, first_seed=s + 1_000_003) for s in range(5)])
    lb = build_leaderboard(t, TASKS, reps=100)
    assert META.task in lb.not_ranked and META.task not in lb.per_task
    assert "reset seeds differ" in lb.not_ranked[META.task][0]
    md = render_markdown(lb)
    assert "NOT RANKED" in md and "| — | grpo-like |" in md
    # Unrecorded reset seeds (runs from before the harness owned evaluation) are not paired either.
    legacy = t.assign(reset_seed=np.nan)
    assert "not recorded" in comparability(run_metrics(legacy, TASKS))[META.task][0]


# ------------------------------------------------------------------ 6. limits and budgets


def test_different_budgets_are_refused_by_name():
    t = table(*[run_rows("ref", s, ret=1.5, hazard=0.0, steps=200_000) for s in range(5)],
              *[run_rows("sub", s, ret=1.9, hazard=0.0, steps=20_000) for s in range(2)])
    reasons = comparability(run_metrics(t, TASKS))[META.task]
    assert any("budgets differ" in r and "200,000" in r and "20,000" in r for r in reasons)
    ok = table(*[run_rows(a, 0, ret=1.5, hazard=0.0, steps=st) for a, st in (("a", 4096 * 10), ("b", int(4096 * 10 * BUDGET_RATIO)))])
    assert comparability(run_metrics(ok, TASKS)) == {}


# ------------------------------------------------------------------- 8. last vs average iterate


def test_last_iterate_and_average_iterate_verdicts_are_both_reported():
    # Training tail within the limit, final policy violating it (a Lagrangian oscillation).
    rows = [r for s in range(5) for r in run_rows("osc", s, ret=1.5, hazard=0.3, train_hazard=0.1)]
    runs = run_metrics(pd.DataFrame(rows), TASKS)
    assert runs["tail_feasible"].all() and not runs["feasible"].any()
    df = per_task(build_leaderboard(pd.DataFrame(rows), TASKS, reps=100))
    assert df.loc["osc", "feasible_seeds"] == 0 and df.loc["osc", "tail_feasible_seeds"] == 5
    # Greedy and sampled evaluations are scored apart: a mixture's mode can be feasible alone.
    rows = run_rows("mix", 0, ret=1.7, hazard=0.1, greedy_ret=1.0, greedy_hazard=0.0)
    m = run_metrics(pd.DataFrame(rows), TASKS).iloc[0]
    assert m["primary_policy"] == "sampled" and m["eval_return"] == 1.7 and m["greedy_return"] == 1.0


# ---------------------------------------------------------------- 7. byte-identical outputs


def test_outputs_are_byte_identical_under_a_perturbed_row_order(tmp_path: Path):
    rng = np.random.default_rng(3)
    rows = []
    for a, base in (("a", 1.5), ("b", 1.2), ("c", 1.9)):
        for s in range(5):
            lam = np.abs(np.cumsum(rng.normal(0, 0.1, 40)))
            rows += run_rows(a, s, ret=base + rng.normal(0, 0.1), hazard=float(rng.choice([0.0, 0.05, 0.3])), lam=lam)
    t = pd.DataFrame(rows)
    # Values whose float sum depends on the order of addition.
    t.loc[t.kind == "eval", "return"] += rng.normal(0, 1e-3, (t.kind == "eval").sum()) * np.pi
    a = write_leaderboard(build_leaderboard(t, TASKS, reps=300), tmp_path / "a")
    shuffled = t.sample(frac=1.0, random_state=7).reset_index(drop=True)
    b = write_leaderboard(build_leaderboard(shuffled, TASKS, reps=300), tmp_path / "b")
    for pa, pb in zip(a, b):
        assert pa.read_bytes() == pb.read_bytes(), pa.name
    # runs.csv floats carry at most 10 significant digits.
    text = (tmp_path / "a" / "runs.csv").read_text()
    assert all(len(tok.lstrip("-").replace(".", "").lstrip("0").split("e")[0]) <= 10
               for line in text.splitlines()[1:] for tok in line.split(",") if tok[:1].isdigit() or tok[:2].startswith("-"))


# ----------------------------------------------------------- 6. user limits are the run's


@pytest.mark.slow
def test_train_reports_against_the_limits_it_trained_with(tmp_path: Path):
    import json
    import subprocess
    import sys

    from constrained_grpo.eval.runner import RunSpec, run_meta, task_meta

    task = "Grid/HazardFuel3x3-v0"
    default = task_meta(task)
    assert default.limits["hazard"] == pytest.approx(0.2)
    custom = run_meta(RunSpec(task, "cgrpo", 0, 100, config={"limits": {"hazard": 0.5}}), default)
    assert custom.limits == {**default.limits, "hazard": 0.5}
    assert custom.optimum_return is not None and custom.optimum_return >= default.optimum_return
    r = subprocess.run([sys.executable, "-m", "constrained_grpo.cli", "train", task, "cgrpo", "--steps", "600",
                        "--eval-episodes", "5", "--no-save", "--out", str(tmp_path), "--config.limits", '{"hazard": 0.5}'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "vs limit 0.5" in r.stdout and "vs limit 0.2" not in r.stdout
    assert f"optimum R* {custom.optimum_return:.4f} for these limits" in r.stdout
    config = json.loads(next(tmp_path.rglob("config.json")).read_text())
    limits = {c["name"]: c["limit"] for c in config["task"]["constraints"]}
    assert limits["hazard"] == 0.5


def test_markdown_cells_cannot_carry_markup():
    from constrained_grpo.eval.scoring.leaderboard import _md_cell

    assert _md_cell("<img src=x onerror=alert(1)>|x\n# h") == "&lt;img src=x onerror=alert(1)>\\|x # h"
    assert _md_cell("J <= 0.1 & R") == "J <= 0.1 &amp; R"


def test_a_multiplier_pinned_at_its_recorded_bound_is_at_bound():
    lam = np.minimum(np.arange(40) * 10.0, 100.0)   # reaches lambda_max = 100 at 25%, then flat
    t = table(run_rows("pinned", 0, ret=1.5, hazard=0.3, lam=lam))
    free = run_metrics(t, TASKS).iloc[0]
    bound = run_metrics(t, TASKS, lambda_max={"pinned": 100.0}).iloc[0]
    assert bound["stability_class"] == "at bound" and free["stability_class"] != "at bound"
    assert bound["stability"] <= 0.5


def test_add_refuses_a_submission_with_another_budget_and_names_it(toy_results: Path, tmp_path: Path, capsys):
    from constrained_grpo.cli import main
    from constrained_grpo.eval.scoring.loader import load_results

    table = load_results(toy_results).table
    mine = table.assign(algo=table["algo"].str.replace("cgrpo_toy_agent:", "mine-", regex=False))
    same = tmp_path / "same.csv"
    mine.to_csv(same, index=False)
    # The board's own runs renamed pass the budget rule and are refused as copies (issue 54).
    assert main(["leaderboard", str(toy_results), "--add", str(same), "--out", str(tmp_path / "ok"), "--quiet"]) == 2
    assert "same evaluation episodes as" in capsys.readouterr().err
    longer = tmp_path / "longer.csv"
    mine.assign(env_steps=mine["env_steps"] * 10).to_csv(longer, index=False)
    code = main(["leaderboard", str(toy_results), "--add", str(longer), "--out", str(tmp_path / "no"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be ranked with the results" in err and "budgets differ" in err
    assert not (tmp_path / "no" / "leaderboard.md").exists()


def test_discriminative_power_is_reported_per_task():
    rng = np.random.default_rng(5)
    rows = []
    for a, base in (("a", 1.8), ("b", 1.8), ("c", 1.0)):
        for s in range(7):
            rows += run_rows(a, s, ret=base + 0.001 * rng.standard_normal(), hazard=0.0)
    lb = build_leaderboard(pd.DataFrame(rows), TASKS, reps=300)
    df = lb.per_task[META.task]
    assert (df.attrs["pairs"], df.attrs["pairs_tested"], df.attrs["pairs_separated"]) == (3, 3, 2)  # a~b; both > c
    assert "Discriminative power: 2 of 3 algorithm pairs separated" in render_markdown(lb)


def test_each_task_says_how_many_runs_are_undetermined_and_the_episodes_that_would_decide_them():
    # "a" has cost 1 on 2 of 20 episodes (a cost not flagged an indicator, so Student's t):
    # undetermined; at mean 0.1 and sd sqrt(20/19 x 0.09) = 0.30779 it is decided within with
    # 80% probability on n = ((1.64485 + 0.84162) x 0.30779 / 0.01)^2 = 5,857.6 episodes.
    # "b" has cost 1 on 12 of 20: its lower bound is over t = 0.11, decided.
    rows = [r for s in range(3) for r in run_rows("a", s, ret=2.0, hazard=0.1) + run_rows("b", s, ret=2.0, hazard=0.6)]
    lb = build_leaderboard(pd.DataFrame(rows), TASKS, reps=200)
    assert set(lb.runs.loc[lb.runs["algo"] == "a", "feasibility"]) == {"undetermined"}
    assert set(lb.runs.loc[lb.runs["algo"] == "b", "feasibility"]) == {"violates"}
    assert ("Undetermined: 3 of 6 learner runs (50%) on 20 evaluation episodes per policy; at its observed costs, each "
            "would be decided with 80% probability after about 5,858 episodes (the median; the most: 5,858).") in render_markdown(lb)
    decided = [r for s in range(3) for r in run_rows("b", s, ret=2.0, hazard=0.6)]
    assert "Every learner run is decided" in render_markdown(build_leaderboard(pd.DataFrame(decided), TASKS, reps=200))
