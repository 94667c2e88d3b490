"""Leaderboard: ranking rule, determinism, submissions; and the plots."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED
from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, check_submission, render_html, render_markdown, write_leaderboard
from constrained_grpo.eval.scoring.loader import ResultsError, load_results
from constrained_grpo.eval.scoring.plots import make_plots
from constrained_grpo.eval.runner import EVAL_SEED, TaskMeta

META = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0, unconstrained_return=3.0,
                optimal_multipliers=(0.5,))


def table_of(runs: dict[str, tuple[float, float, np.ndarray | None]], seeds: int = 5) -> pd.DataFrame:
    """Runs of algorithms given (eval return, eval hazard rate, multiplier series or None),
    evaluated on the same reset seeds (the harness's protocol)."""
    rows = []
    for algo, (ret, hazard, lam) in runs.items():
        for seed in range(seeds):
            n = 40
            for t in range(n):
                rows.append({"suite": "toy", "task": META.task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                             "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": ret, "length": np.nan,
                             "cost_hazard": hazard, "lambda_hazard": np.nan if lam is None else lam[t]})
            for i in range(10):
                rows.append({"suite": "toy", "task": META.task, "algo": algo, "seed": seed, "kind": "eval",
                             "policy": "sampled", "iteration": n - 1, "episode": i, "reset_seed": EVAL_SEED + i,
                             "env_steps": 100 * n, "wall_s": np.nan, "return": ret + 0.01 * seed, "length": 5.0,
                             "cost_hazard": float(i < round(hazard * 10)), "lambda_hazard": np.nan if lam is None else lam[-1]})
    return pd.DataFrame(rows)


def test_ranking_is_return_subject_to_satisfaction():
    steps = np.arange(40)
    table = table_of({
        "greedy": (1.9, 0.5, None),                      # best return, violates hazard
        "safe": (1.5, 0.1, 0.5 + 0.0 * steps),           # at its limit: 10 episodes cannot tell
        "safer": (1.2, 0.0, 0.3 + 0.0 * steps),          # clearly within, lower return
        "almost": (1.8, 0.2, 0.01 * steps),              # over on its point estimate; diverging multiplier
    }, seeds=8)
    lb = build_leaderboard(table, {META.task: META}, reps=200)
    ranked = lb.per_task[META.task]
    # The score is the constrained score averaged over the evaluation's uncertainty: "safer"
    # keeps the limit for certain (0 events, U = 0.018 <= 0.11) and scores its normalised
    # return 0.6175; "safe" (J = 0.1, se 0.1) keeps d(1 + tol) = 0.11 with probability about
    # 0.54, so its 0.7675 is blended with its violations; "almost" and "greedy" lower still.
    assert list(ranked["algo"]) == ["safer", "safe", "almost", "greedy"]
    # Eight seeds each, every seed of one algorithm above every seed of the other: of the
    # C(16, 8) = 12,870 splits only the observed one and its mirror are as extreme, p =
    # 2/12,870 for each of the 6 pairs, times Holm's 6 at most. Every pair is separated but
    # those with "safe", whose 10 episodes (J = 0.1, se 0.1 against d = 0.1) resolve its score
    # only to about 1: safer (0.60 above it) and almost (0.96 below) are not called different.
    assert list(ranked["rank"]) == [1, 2, 3, 4]
    pairs = lb.pairs[lb.pairs["scope"] == META.task]
    assert set(pairs["p"]) == {2 / 12_870}
    assert sorted(pairs.loc[~pairs["separated"], "b"]) == ["safe", "safer"]
    assert list(ranked["rank_lo"]) == [1, 1, 2, 4] and list(ranked["rank_hi"]) == [2, 3, 3, 4]
    # The pair records ride in the table's attrs: a derived frame shares them, and the table pickles.
    assert ranked[["algo"]].attrs["pair_tests"] is ranked.attrs["pair_tests"]
    again = pickle.loads(pickle.dumps(ranked))
    assert [dict(r) for r in again.attrs["pair_tests"]] == [dict(r) for r in ranked.attrs["pair_tests"]]
    assert list(ranked["verdict"]) == ["yes", "uncertain", "uncertain", "no"]
    assert list(ranked["feasible_seeds"]) == [8, 0, 0, 0]
    assert list(ranked["undetermined_seeds"]) == [0, 8, 8, 0]
    assert ranked.set_index("algo").loc["safer", "score"] == pytest.approx(1 - (2.0 - 1.235) / 2.0)
    assert ranked.set_index("algo").loc["safe", "norm"] == pytest.approx(1 - (2.0 - 1.535) / 2.0)
    stab = ranked.set_index("algo")["stability"]
    assert stab["safe"] > 0.9 and stab["almost"] < stab["safer"] and np.isnan(stab["greedy"])
    overall = lb.overall["toy"]
    assert list(overall["algo"]) == ["safer", "safe", "almost", "greedy"]
    md = render_markdown(lb)
    # Position, interval, group; seeds within d(1 + tol) with the exact interval 8/8: [0.025^(1/8), 1].
    assert "| 1 [1, 2] | a | safer | 8 | 8/8 [0.63, 1.00] | 8/8 | 0/8 | 1.00 | yes |" in md
    assert "probability of improvement" in md
    assert list(ranked["letters"]) == ["a", "ab", "b", "c"]
    assert "<td>safer</td>" in render_html(lb)
    # With 5 seeds each the smallest p is 2/C(10, 5) = 2/252, times Holm's 6 = 0.048: still
    # every pair of these four is separated ...
    five_lb = build_leaderboard(table[table["seed"] < 5], {META.task: META}, reps=200)
    assert list(five_lb.per_task[META.task]["rank"]) == [1, 2, 3, 4]
    # ... but not among five algorithms: 10 pairs need 2/C(2n, n) <= 0.005, n >= 6. Rows keep
    # the order of the mean, every interval is [1, 5], one letter, and the page says so.
    five = table_of({"greedy": (1.9, 0.5, None), "safe": (1.5, 0.1, None), "safer": (1.2, 0.0, None),
                     "almost": (1.8, 0.2, None), "other": (1.0, 0.0, None)}, seeds=5)
    five_lb = build_leaderboard(five, {META.task: META}, reps=200)
    five_ranked = five_lb.per_task[META.task]
    assert list(five_ranked["rank"]) == [1, 2, 3, 4, 5] and set(five_ranked["letters"]) == {"a"}
    assert set(five_ranked["rank_lo"]) == {1} and set(five_ranked["rank_hi"]) == {5}
    assert "With 5 seeds no pair of the 10 can be separated" in render_markdown(five_lb)
    assert "needs at least 6 seeds per algorithm" in render_markdown(five_lb)
    assert "can be separated" not in md  # eight seeds separate every pair


def test_leaderboard_is_byte_for_byte_deterministic(toy_results: Path, tmp_path: Path):
    res = load_results(toy_results)
    a = write_leaderboard(build_leaderboard(res.table, res.tasks), tmp_path / "a", table=res.table)
    b = write_leaderboard(build_leaderboard(res.table, res.tasks), tmp_path / "b", table=res.table)
    for pa, pb in zip(a, b):
        assert pa.read_bytes() == pb.read_bytes(), pa.name
    # The exported long table is a valid submission and gives the same page.
    table, tasks = check_submission(tmp_path / "a" / "results.csv")
    c = write_leaderboard(build_leaderboard(table, tasks), tmp_path / "c")
    assert c[0].read_bytes() == a[0].read_bytes()
    md = a[0].read_text()
    assert f"## Task {TASK}" in md and TOY in md and TOY_UNCONSTRAINED in md
    assert "R* = 1.2000" in md and "[" in md


@pytest.fixture(scope="module")
def submission(toy_results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("submission") / "good.csv"
    load_results(toy_results).table.to_csv(path, index=False)
    return path


def test_check_accepts_a_good_submission(submission: Path):
    table, tasks = check_submission(submission)
    assert TASK in tasks and len(table) > 0


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda df: df.drop(columns=["return"]), r"missing column\(s\) \['return'\]"),
        (lambda df: df.assign(env_steps=df["env_steps"].astype(str).where(df.index > 0, "ten")), r"'env_steps' must hold numbers"),
        (lambda df: df.assign(cost_hazard=df["cost_hazard"].where(df["kind"] == "train", np.nan)), r"'cost_hazard' has empty or NaN cells in eval"),
        (lambda df: df.assign(algo="bad name!"), r"'bad name!' \(it must match"),
        (lambda df: df.assign(task="Grid/NoSuchTask-v0"), r"unknown task 'Grid/NoSuchTask-v0'"),
        (lambda df: df.assign(notes="x"), r"unknown column\(s\) \['notes'\]"),
    ],
)
def test_check_rejects_malformed_submissions(submission: Path, tmp_path: Path, edit, reason):
    bad = tmp_path / "bad.csv"
    edit(pd.read_csv(submission)).to_csv(bad, index=False)
    with pytest.raises(ResultsError, match=reason):
        check_submission(bad)


def test_check_rejects_unreadable_files(tmp_path: Path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ResultsError, match="not a readable CSV"):
        check_submission(empty)
    with pytest.raises(ResultsError, match="does not exist"):
        check_submission(tmp_path / "missing.csv")


@pytest.mark.slow
def test_plots_are_written(toy_results: Path, tmp_path: Path):
    res = load_results(toy_results)
    paths = make_plots(res.table, res.tasks, tmp_path)
    names = sorted(p.name for p in paths)
    stem = "Grid_HazardFuel3x3-v0"
    assert names == sorted(f"{stem}_{k}.png" for k in ("curves", "multipliers", "return_vs_violation", "effective_weights"))
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
