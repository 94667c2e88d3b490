"""A task without an exact optimum is scored in one unit: its return normalised between the
mean returns of the two references it declares, (R - R_low)/(R_high - R_low), in every score
of the board; and the task's header says what the board's own runs show of whether its limits
bind (its declared unconstrained stand-ins' breaking seeds, its keepers' seeds within)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.scoring.leaderboard import CONTROL_REASON, build_leaderboard, render_markdown
from constrained_grpo.tasks import task_info, task_meta

TASK = "Highway/Highway-v1"
EPISODES = 40  # 0 collisions in 40 episodes: Clopper-Pearson's 95% upper bound 0.072, within 0.1(1 + 0.1)
SEEDS = 6


def _table(runs: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    """Per algorithm, per seed (return, collision share); every episode of a run alike, the
    other costs 0; the training rows hold the same return and costs as the evaluation."""
    names = [c.name for c in task_meta(TASK, False).constraints]
    rows = []
    for algo, seeds in runs.items():
        for seed, (ret, collision) in enumerate(seeds):
            costs = {f"cost_{n}": (collision if n == "collision" else 0.0) for n in names}
            lams = {f"lambda_{n}": np.nan for n in names}
            for t in range(5):
                rows.append({"suite": "highway", "task": TASK, "algo": algo, "seed": seed, "kind": "train",
                             "iteration": t, "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": ret,
                             "length": 30.0, **costs, **lams})
            for e in range(EPISODES):
                ep = {k: (float(e < round(v * EPISODES)) if k == "cost_collision" else v) for k, v in costs.items()}
                rows.append({"suite": "highway", "task": TASK, "algo": algo, "seed": seed, "kind": "eval",
                             "policy": "sampled", "iteration": 4, "episode": e, "reset_seed": 1_000_000 + e,
                             "env_steps": 500, "wall_s": np.nan, "return": ret, "length": 30.0, **ep, **lams})
    return pd.DataFrame(rows)


RUNS = {
    "ref-random": [(4.0, 0.0)] * SEEDS,
    "ref-safe-driver": [(6.0, 0.0)] * SEEDS,
    "a": [(5.0, 0.0)] * SEEDS,  # halfway between the anchors: 0.5
    "b": [(7.0, 0.0)] * SEEDS,  # above ref-safe-driver: 1.5
    "ppo": [(8.0, 1.0)] * SEEDS,  # collides in every episode
}


def _board(runs: dict[str, list[tuple[float, float]]]):
    assert task_info(TASK).return_anchors == ("ref-random", "ref-safe-driver")
    return build_leaderboard(_table(runs), {TASK: task_meta(TASK, False)}, reps=200,
                             references=("ref-random", "ref-safe-driver"))


def test_an_anchored_task_scores_its_return_between_its_two_references() -> None:
    board = _board(RUNS)
    runs = board.runs.set_index("algo")
    assert runs.loc["a", "eval_return_norm"].tolist() == [0.5] * SEEDS
    assert runs.loc["b", "eval_return_norm"].tolist() == [1.5] * SEEDS
    assert runs.loc["ref-safe-driver", "eval_return_norm"].tolist() == [1.0] * SEEDS
    table = board.per_task[TASK].set_index("algo")
    # The expected score averages over what 40 episodes leave unknown of the collision rate
    # (Jeffreys' Beta(0.5, 40.5): P(J > 0.11) = 0.003), so it is a hair below the point score.
    assert table.loc["a", "score"] == pytest.approx(0.5, abs=0.01)
    assert table.loc["b", "score"] == pytest.approx(1.5, abs=0.01)
    # 40 collisions in 40 episodes: Jeffreys' mean 40.5/41, always over the tolerance (to quadrature).
    assert table.loc["ppo", "score"] == pytest.approx(-(40.5 / 41 - 0.1) / 0.1, abs=1e-3)
    # Like with like: the average iterate and the final policy are the same policy here, both
    # scored on the anchored return, so the final - average-iterate gap is exactly 0.
    assert table.loc["a", "iterate_gap"] == 0.0 and table.loc["b", "iterate_gap"] == 0.0
    md = render_markdown(board)
    assert ("No exact optimum: normalised return = (R - R_low)/(R_high - R_low), 0 at ref-random "
            "(R_low = 4.0000) and 1 at ref-safe-driver (R_high = 6.0000), their mean returns on this board") in md


def test_the_header_says_whether_the_limits_bind_on_the_boards_runs() -> None:
    md = render_markdown(_board(RUNS))
    assert ("Binding, from this board's runs: unconstrained ppo breaks a limit on 6/6 seeds; ref-safe-driver "
            "keeps every limit on 6/6: the limits bind.") in md
    # ppo within the limits on 2 of 6 seeds: breaking on 4/6 is under 9/10.
    loose = dict(RUNS, ppo=[(8.0, 1.0)] * 4 + [(8.0, 0.0)] * 2)
    md = render_markdown(_board(loose))
    assert ("GAP, binding from this board's runs: unconstrained ppo breaks a limit on 4/6 seeds; ref-safe-driver "
            "keeps every limit on 6/6: the limits do not bind for ppo (they need breaking on 9/10 seeds).") in md

    # Then the task is a control: shown without ranks, in no aggregate; the binding board ranks it.
    assert TASK not in _board(RUNS).not_ranked and TASK in _board(RUNS).per_task
    board = _board(loose)
    assert board.not_ranked[TASK] == (f"{CONTROL_REASON} (unconstrained ppo breaks a limit on only 4/6 seeds)",)
    assert TASK not in board.per_task
    assert ("NOT RANKED, a control: its limits do not bind on this board's runs (unconstrained ppo breaks a limit on "
            "only 4/6 seeds): its rows are shown for comparison and it enters no aggregate.") in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and "| a |" in line]
    assert rows and all(line.startswith("| — |") for line in rows), rows
    assert "No task of this suite is ranked" in md


def test_without_its_references_the_return_stays_raw() -> None:
    board = _board({k: v for k, v in RUNS.items() if k != "ref-random"})
    assert board.runs.set_index("algo").loc["a", "eval_return_norm"].isna().all()
    assert board.per_task[TASK].set_index("algo").loc["a", "score"] == pytest.approx(5.0, abs=0.05)
    assert "No exact optimum" not in render_markdown(board)
