"""Issue 54: a leaderboard that checks what it is given.

Every crafted case is refused with one line naming the value and the fix, by
``check_submission_table`` (``--check`` and ``--add``) and by loading alike. The bounds come
from the tasks' definitions: a Highway/Highway-v1 step earns ``(0.1 lane + 0.4 speed) / 0.5``
times ``on_road``, in [0, 1], over at most 30 steps (highway-fast's 30 s at 1 Hz); a math
episode earns 1 for a correct answer, else 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.envs.registration import EpisodeReturns
from constrained_grpo.eval.scoring.loader import (
    ResultsError,
    check_submission_table,
    declared_returns,
    episode_ranges,
    validate_table,
)
from constrained_grpo.tasks import task_meta


def synthetic(task: str, *, algo: str = "mine", seeds: int = 2, episodes: int = 4, ret: float = 0.5,
              length: float = 30.0, first_seed: int = 1_000_000) -> pd.DataFrame:
    """A long table of ``seeds`` runs of ``task``: two train iterations and ``episodes``
    sampled evaluation episodes each (return ``ret``, costs 0), every seed's rows distinct."""
    meta = task_meta(task, with_optimum=False)
    suite = meta.suite
    names = meta.constraint_names
    rows = []
    for seed in range(seeds):
        for it in range(2):
            rows.append({"suite": suite, "task": task, "algo": algo, "seed": seed, "kind": "train", "iteration": it,
                         "env_steps": 100 * (it + 1), "wall_s": 1.0 + it, "return": 0.1 * (seed + 1) + 0.01 * it,
                         **{f"cost_{n}": 0.0 for n in names}})
        for ep in range(episodes):
            rows.append({"suite": suite, "task": task, "algo": algo, "seed": seed, "kind": "eval", "policy": "sampled",
                         "iteration": 1, "episode": ep, "reset_seed": first_seed + ep, "env_steps": 200,
                         "return": ret + 0.001 * seed * (ep % 2), "length": length, **{f"cost_{n}": 0.0 for n in names}})
    return pd.DataFrame(rows)


def _csv(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False)
    return path


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------- point 1: what one episode can be


def test_episode_returns_bounds_by_length():
    declared = EpisodeReturns((0.0, 1.0), horizon=30, rule="r")
    ok = declared.possible([0.0, 30.0, 30.5, 12.0, 5.0, 50.0], [30, 30, 30, 11, np.nan, np.nan])
    # 30.5 > 30 x 1; 12 in 11 steps > 11; 50 with no length > the horizon's 30.
    assert ok.tolist() == [True, True, False, False, True, False]
    assert declared.possible([1.0, 1.0], [31, 2.5]).tolist() == [False, False]  # beyond the horizon, not whole
    assert declared.return_range() == (0.0, 30.0)
    assert EpisodeReturns((-0.25, 1.0), horizon=11).return_range() == (-2.75, 11.0)
    free = EpisodeReturns.unbounded("why")
    assert free.possible([1e9], [1]).tolist() == [True] and free.return_range() is None
    text = EpisodeReturns(episode=(0.0, 1.0))  # lengths in tokens are not checked
    assert text.possible([1.0, 2.0, 0.0], [412, 3, 0]).tolist() == [True, False, True]


def test_every_family_declares_its_episodes():
    highway = declared_returns("Highway/Highway-v1")
    assert highway.bounded and highway.step == (0.0, 1.0) and highway.horizon == 30
    assert episode_ranges("Highway/Highway-v1").ret == (0.0, 30.0)
    assert declared_returns("Highway/Roundabout-v0").step == (-0.25, 1.0)
    assert not declared_returns("Highway/Merge-v0").bounded  # said so, with the reason
    assert "unclipped" in declared_returns("Highway/Merge-v0").rule
    assert declared_returns("Math/ChainSum-v0").return_range() == (0.0, 1.0)
    safety = declared_returns("Safety/PointGoal1-v0")
    assert not safety.bounded and "no bound" in safety.rule
    assert declared_returns("Grid/HazardFuel-v0") is None  # the gridworld env checks its own episodes


def test_honest_highway_episodes_are_possible():
    from constrained_grpo.tasks import make_env

    env = make_env("Highway/Highway-v1")
    rng = np.random.default_rng(0)
    returns, lengths = [], []
    try:
        for s in range(2):
            env.reset(seed=1_000_000 + s)
            total, steps, done = 0.0, 0, False
            while not done:
                _, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
                total, steps, done = total + r, steps + 1, term or trunc
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    assert max(lengths) <= 30 and declared_returns("Highway/Highway-v1").possible(returns, lengths).all()


@pytest.mark.parametrize("task,ret,length,value", [
    ("Highway/Highway-v1", 50.0, 30.0, "return 50 in 30 steps"),
    ("Highway/Highway-v1", 50.0, 60.0, "return 50 in 60 steps"),  # a longer episode than the horizon
    ("Math/ChainSum-v0", 2.0, 12.0, "return 2"),
])
def test_impossible_returns_are_refused_by_check_add_and_load(task, ret, length, value, tmp_path):
    bad = synthetic(task, ret=ret, length=length)
    with pytest.raises(ResultsError, match=r"which no episode of .* can have .*; give the episodes cgrpo evaluated") as err:
        check_submission_table(_csv(bad, tmp_path / "bad.csv"))
    assert value in _one_line(err)
    with pytest.raises(ResultsError, match="which no episode"):
        validate_table(bad)
    # The same table with possible returns passes.
    check_submission_table(_csv(synthetic(task, ret=0.5, length=length if length <= 30 else 30.0), tmp_path / "ok.csv"))


# ------------------------------------------------------------------ point 5: Markdown cells


def test_markdown_cells_escape_links_images_code_and_autolinks():
    from constrained_grpo.eval.scoring.leaderboard import _md_cell
    from constrained_grpo.eval.scoring.loader import escape_markdown

    assert _md_cell("![p](https://evil.example/x.png)") == "\\![p\\](https\\://evil.example/x.png)"
    assert _md_cell("[home][1] `code` www.evil.com WWW.X") == "[home\\][1] \\`code\\` www\\.evil.com WWW\\.X"
    assert _md_cell("ftp://a") == "ftp\\://a"
    # Intervals and plain parentheses stay as they are: the committed board's bytes do not change.
    assert _md_cell("0.5 [0.1, 0.9] (n=10)!") == "0.5 [0.1, 0.9] (n=10)!"
    assert escape_markdown("www.x http://y") == "www\\.x http\\://y"


def test_a_www_name_does_not_autolink_in_leaderboard_md(toy_results: Path):
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown
    from constrained_grpo.eval.scoring.loader import load_results

    results = load_results(toy_results)
    table = results.table.assign(algo=results.table["algo"].str.replace("cgrpo_toy_agent:", "www.evil.com-", regex=False))
    md = render_markdown(build_leaderboard(table, results.tasks))
    assert "www\\.evil.com-ToyAgent" in md and "www.evil.com" not in md
