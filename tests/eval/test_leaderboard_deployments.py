"""The board ranks each learner once, on its last iterate: a run that deploys another rule on
its trainings (an alias such as cgrpo-best) is in no rank, pair test or aggregate, only in the
deployment table under its task, paired by seed with the learner's last iterate."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring.deployment import SharedTrainingError, check_independent
from constrained_grpo.eval.scoring.explain import explain
from constrained_grpo.eval.scoring.focus import check_names, focus
from constrained_grpo.eval.scoring.leaderboard import (DEPLOYMENTS_COLUMNS, build_leaderboard, render_html,
                                                        render_markdown, write_leaderboard)
from constrained_grpo.schema import TaskMeta

T = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0)
U = TaskMeta("Toy/U-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0)
TASKS = {T.task: T, U.task: U}
#: Per task and algorithm, per seed (return, hazard). Every evaluation episode of a run has the
#: same return and cost, so nothing is uncertain: hazard 0.05 is within 0.1(1 + 0.1) and scores
#: the normalised return R / 2 (R* = 2); hazard 0.3 breaks it and scores -(0.3 - 0.1)/0.1 = -2.
RUNS = {
    T.task: {
        "a": [(1.0, 0.05), (1.2, 0.3), (1.4, 0.05), (1.6, 0.3), (1.8, 0.05), (1.9, 0.05)],  # 0.5 -2 0.7 -2 0.9 0.95
        "a-best": [(1.2, 0.05), (1.4, 0.05), (1.6, 0.05), (1.6, 0.05), (1.8, 0.05), (2.0, 0.05)],  # 0.6 0.7 0.8 0.8 0.9 1
        "b": [(1.5, 0.05)] * 6,
        "c": [(0.4 + 0.1 * s, 0.0) for s in range(6)],
    },
    U.task: {
        "a": [(1.0, 0.05)] * 6,  # 0.5 on every seed
        "a-best": [(1.2, 0.05), (1.3, 0.05)] * 3,  # 0.6, 0.65: gains 0.1, 0.15
        "b": [(1.5, 0.05)] * 6,
        "c": [(0.4 + 0.1 * s, 0.0) for s in range(6)],
    },
}
#: a-best's runs: cgrpo-best's relation to cgrpo, as their config.json records it.
DEPLOYED = {(task, "a-best", s): ("a", "best-feasible") for task in RUNS for s in range(6)}
T_975_5 = 2.570582  # t_{5, 0.975}, a t table


def _table() -> pd.DataFrame:
    rows = []
    for task, algos in RUNS.items():
        for algo, seeds in algos.items():
            for seed, (ret, hazard) in enumerate(seeds):
                for t in range(5):
                    rows.append({"suite": "toy", "task": task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                                 "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": ret, "length": np.nan,
                                 "cost_hazard": hazard, "lambda_hazard": np.nan})
                for e in range(10):
                    rows.append({"suite": "toy", "task": task, "algo": algo, "seed": seed, "kind": "eval", "policy": "sampled",
                                 "iteration": 4, "episode": e, "reset_seed": 1_000_000 + e, "env_steps": 500,
                                 "wall_s": np.nan, "return": ret, "length": 5.0, "cost_hazard": hazard,
                                 "lambda_hazard": np.nan})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def board():
    return build_leaderboard(_table(), TASKS, reps=200, deployments=DEPLOYED)


def test_each_learner_is_ranked_once_on_its_last_iterate(board) -> None:
    for task in TASKS:
        assert sorted(board.per_task[task]["algo"]) == ["a", "b", "c"]
    # a's row is its own last iterate: (0.5 - 2 + 0.7 - 2 + 0.9 + 0.95) / 6, not the alias's scores.
    a = board.per_task[T.task].set_index("algo").loc["a"]
    assert a["score"] == pytest.approx(-0.95 / 6) and a["feasible_seeds"] == 4
    assert sorted(board.overall["toy"]["algo"]) == ["a", "b", "c"]
    assert board.preamble[0].startswith("48 runs, 2 task(s), 3 ranked algorithm(s); 12 of the runs (a-best)")
    # The deployments are what keeps a-best out: without them it is an algorithm of its own.
    alone = build_leaderboard(_table(), TASKS, reps=200)
    assert sorted(alone.per_task[T.task]["algo"]) == ["a", "a-best", "b", "c"]
    assert {"a", "a-best"} <= set(alone.pairs["a"]) | set(alone.pairs["b"])


def test_no_pair_is_two_deployments_of_one_training(board) -> None:
    pairs = board.pairs
    assert len(pairs) == 9 and not ({"a-best"} & (set(pairs["a"]) | set(pairs["b"])))  # a-b, a-c, b-c on T, U and the suite
    for r in pairs.itertuples():
        check_independent(board.runs, r.a, r.b, None if r.scope.startswith("suite:") else r.scope)
    with pytest.raises(SharedTrainingError, match="a and a-best share 12 training"):
        check_independent(board.runs, "a", "a-best")


def test_the_deployment_table_pairs_the_rule_with_the_last_iterate(board, tmp_path: Path) -> None:
    dep = board.deployments.set_index("scope")
    assert list(board.deployments.columns) == list(DEPLOYMENTS_COLUMNS)
    assert sorted(dep.index) == ["Toy/T-v0", "Toy/U-v0", "suite:toy"]
    # T: gains 0.1, 2.7, 0.1, 2.8, 0, 0.05 (the two seeds over the limit move in).
    d = np.array([0.1, 2.7, 0.1, 2.8, 0.0, 0.05])
    half = T_975_5 * np.std(d, ddof=1) / math.sqrt(6)
    t = dep.loc[T.task]
    assert (t["learner"], t["deploy"], t["algo"], t["seeds"]) == ("a", "best-feasible", "a-best", 6)
    assert (t["gain_mean"], t["gain_lo"], t["gain_hi"]) == pytest.approx((5.75 / 6, 5.75 / 6 - half, 5.75 / 6 + half), abs=1e-5)
    assert t["gain"] == "not shown" and (t["feasible_last"], t["feasible_deploy"], t["moved_in"], t["moved_out"]) == (4, 6, 2, 0)
    assert t["limits_p"] == pytest.approx(0.5) and t["limits"] == "no change shown"  # 2 seeds one way: 2 * 2^-2
    # U: gains 0.1, 0.15 alternating: mean 0.125, sd sqrt(6 * 0.025^2 / 5).
    u = dep.loc[U.task]
    half_u = T_975_5 * math.sqrt(6 * 0.025**2 / 5) / math.sqrt(6)
    assert (u["gain_mean"], u["gain_lo"], u["gain_hi"]) == pytest.approx((0.125, 0.125 - half_u, 0.125 + half_u), abs=1e-5)
    assert u["gain"] == "gain" and (u["moved_in"], u["moved_out"]) == (0, 0)
    # The suite: the mean of the two tasks' mean gains; the seeds moved pooled.
    s = dep.loc["suite:toy"]
    assert s["gain_mean"] == pytest.approx((5.75 / 6 + 0.125) / 2, abs=1e-6) and s["seeds"] == 12
    assert (s["moved_in"], s["moved_out"], s["feasible_last"], s["feasible_deploy"]) == (2, 0, 10, 12)

    md = render_markdown(board)
    task_part = md.split("## Task Toy/T-v0")[1].split("\n## ")[0]
    assert "### Deployments on Toy/T-v0" in task_part and "Not ranked: deployments of a ranked learner's" in task_part
    assert ("| a | best-feasible (a-best) | 6 | not shown [-0.499, 2.416] | 4/6 → 6/6 | 2 in, 0 out | "
            "no change shown (p = 0.5) |") in task_part
    assert "| a | best-feasible (a-best) | 6 | 0.125 [0.096, 0.154] | 6/6 → 6/6 | 0 in, 0 out |" in md
    assert "### Deployments over suite toy" in md.split("## Suite toy: aggregate")[1]
    page = render_html(board)
    assert page.count('<table class="deploy sortable">') == 3
    assert "<td>not shown [-0.499,\u00a02.416]</td>" in page
    # Everything is written: the alias's runs stay in runs.csv under their learner and rule.
    write_leaderboard(board, tmp_path)
    runs = pd.read_csv(tmp_path / "runs.csv")
    alias = runs[runs["algo"] == "a-best"]
    assert len(alias) == 12 and set(alias["learner"]) == {"a"} and set(alias["deploy"]) == {"best-feasible"}
    written = pd.read_csv(tmp_path / "deployments.csv")
    assert list(written.columns) == list(DEPLOYMENTS_COLUMNS) and list(written["scope"]) == ["Toy/T-v0", "Toy/U-v0", "suite:toy"]
    assert "a-best" not in set(pd.read_csv(tmp_path / "pairs.csv")[["a", "b"]].to_numpy().ravel())


def test_focus_and_explain_speak_of_the_learner(board) -> None:
    kept = render_markdown(focus(board, algos=["a"]))
    assert "### Deployments on Toy/T-v0" in kept and "| a | best-feasible (a-best) |" in kept
    other = render_markdown(focus(board, algos=["b"]))
    assert "Deployments on" not in other  # a's deployments go with a
    with pytest.raises(ValueError, match=r"--algos a-best: deploys a's trainings by 'best-feasible', not ranked .*name a$"):
        check_names("--algos", ["a-best"], {"a", "b", "c"}, {"a-best": ("a", "best-feasible")})
    words = explain(board, TASKS)
    assert "\n  a-best:" not in words
    assert ("a: deployed by best-feasible (the runs a-best, not ranked), against its last iterate paired over 6 seeds: "
            "gains 0.125 [0.0963, 0.154] in score") in words


def _alias_of_toy(results: Path, name: str = "toy-best") -> None:
    """A second deployment of the toy agent's trainings under ``results``: its run folders
    copied under ``name``, their config.json naming the learner (``alias_of``) and the rule, as
    an alias's runs record them (the policy deployed is the same here: a gain of exactly 0)."""
    from cgrpo_toy_agent import TOY

    src = next(p for p in results.rglob("seed_0") if json.loads((p / "config.json").read_text())["run"]["algo"] == TOY).parent
    dst = src.parent / name
    shutil.copytree(src, dst)
    for path in dst.rglob("config.json"):
        cfg = json.loads(path.read_text())
        cfg["run"]["algo"] = cfg["algo"]["name"] = name
        cfg["algo"]["alias_of"] = TOY
        cfg["algo"]["resolved"]["config"]["deploy"] = "best-feasible"
        path.write_text(json.dumps(cfg))


def test_the_cli_reads_the_deployments_from_the_runs_configs(results_copy: Path, tmp_path: Path) -> None:
    from cgrpo_toy_agent import TOY
    from inprocess import run_cgrpo

    _alias_of_toy(results_copy)
    here = Path(__file__).resolve().parent
    r = run_cgrpo("leaderboard", str(results_copy), "--out", str(tmp_path / "board"), "--quiet", "--table",
                  pythonpath=[here])
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    task_table = md.split("## Task Grid/HazardFuel3x3-v0")[1].split("### Deployments on")[0]
    assert "toy-best" not in task_table and "| cgrpo_toy_agent:ToyAgent | best-feasible (toy-best) | 2 |" in md
    runs = pd.read_csv(tmp_path / "board" / "runs.csv")
    alias = runs[runs["algo"] == "toy-best"]
    assert len(alias) == 2 and set(alias["learner"]) == {TOY} and set(alias["deploy"]) == {"best-feasible"}
    dep = pd.read_csv(tmp_path / "board" / "deployments.csv")
    assert dep[["learner", "algo", "seeds", "gain_mean", "moved_in", "moved_out"]].values.tolist() == [[TOY, "toy-best", 2, 0, 0, 0]]
    refused = run_cgrpo("leaderboard", str(results_copy), "--out", str(tmp_path / "focus"), "--highlight", "toy-best",
                        pythonpath=[here])
    assert refused.returncode == 2 and f"--highlight toy-best: deploys {TOY}'s trainings by 'best-feasible'" in refused.stderr
    # A CSV long table records no configs: each algorithm is its own learner, on its last iterate.
    plain = run_cgrpo("leaderboard", str(tmp_path / "board" / "results.csv"), "--out", str(tmp_path / "csv"), "--quiet",
                      pythonpath=[here])
    assert plain.returncode == 0, plain.stderr
    assert "| toy-best |" in (tmp_path / "csv" / "leaderboard.md").read_text().split("## Suite")[0]
    assert pd.read_csv(tmp_path / "csv" / "deployments.csv").empty


def test_plot_draws_each_training_once(results_copy: Path, tmp_path: Path) -> None:
    """A second deployment's training curves are its learner's: ``cgrpo plot`` leaves them out
    unless asked for them by name (``--algos``)."""
    from cgrpo_toy_agent import TOY
    from inprocess import run_cgrpo

    from constrained_grpo.cli import _deployments, plotted_algos

    _alias_of_toy(results_copy)
    deployments = _deployments(results_copy)
    assert {v for v in deployments.values() if v[1] != "last"} == {(TOY, "best-feasible")}
    algos = {a for _, a, _ in deployments}
    assert plotted_algos(algos, deployments, None, None) == algos - {"toy-best"}
    assert plotted_algos(algos, deployments, ["toy-best"], None) == {"toy-best"}
    here = Path(__file__).resolve().parent
    r = run_cgrpo("plot", str(results_copy), "--out", str(tmp_path / "plots"), pythonpath=[here])
    assert r.returncode == 0, r.stderr
    assert any(p.suffix == ".png" for p in (tmp_path / "plots").iterdir())


def test_the_preamble_counts_many_deployment_names_by_rule() -> None:
    """Up to 12 names are listed; past that (every learner under two rules) the preamble counts
    them per rule over their learners, which the deployment tables then list."""
    from constrained_grpo.eval.scoring.leaderboard import _deployment_names

    few = pd.DataFrame({"algo": ["a-best", "a-mix", "a-best"], "learner": ["a", "a", "a"],
                        "deploy": ["best-feasible", "tail-mixture", "best-feasible"]})
    assert _deployment_names(few) == "a-best, a-mix"
    learners = [f"l{i}" for i in range(7)]
    many = pd.DataFrame({"algo": [f"{x}-{s}" for x in learners for s in ("best", "mix")],
                         "learner": [x for x in learners for _ in (0, 1)],
                         "deploy": ["best-feasible", "tail-mixture"] * 7})
    assert _deployment_names(many) == "14 names: best-feasible of 7 learner(s), tail-mixture of 7 learner(s)"
