"""Continuous batching of the highway evaluation: a finished row starts the plan's next
episode, and every episode equals the one the wave evaluation plays from its reset seed."""

from __future__ import annotations

import numpy as np
import pytest

from constrained_grpo.registry import EvalResult
from constrained_grpo.sampling import categorical_from_uniform

pytest.importorskip("highway_env")

from constrained_grpo.eval.evaluation import EVAL_SEED, play_batched, play_refilled  # noqa: E402
from constrained_grpo.envs.highway.policies import SafeDriver  # noqa: E402
from constrained_grpo.tasks import make_vec_env  # noqa: E402

TASK = "Highway/Highway-v1"


def _linear_policy(seed: int):
    """A fixed sampled policy: softmax of a random linear map of the observation, each row
    computed alone (no batched matrix product, whose rounding could depend on the batch)."""
    w = np.random.default_rng(seed).normal(0.0, 3.0, size=(25, 5))

    def act_batch(obs: np.ndarray, deterministic: bool, u: np.ndarray) -> np.ndarray:
        logits = (np.asarray(obs, dtype=np.float64)[:, :, None] * w[None]).sum(axis=1)
        if deterministic:
            return logits.argmax(axis=1)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return categorical_from_uniform(p / p.sum(axis=1, keepdims=True), u[:, 0])

    return act_batch


def _safe_driver(obs: np.ndarray, deterministic: bool, u: np.ndarray) -> np.ndarray:
    return SafeDriver().actions(obs)


class _Counting:
    """``make_vec`` that counts the batched steps and the row-steps of every env it makes."""

    def __init__(self) -> None:
        self.steps = self.row_steps = 0

    def __call__(self, b: int):
        vec = make_vec_env(TASK, b)
        step, counter = vec.step, self

        def counted(actions):
            counter.steps += 1
            counter.row_steps += b
            return step(actions)

        vec.step = counted
        return vec


def _same(a: EvalResult, b: EvalResult) -> bool:
    return (np.array_equal(a.returns, b.returns) and np.array_equal(a.costs, b.costs)
            and np.array_equal(a.lengths, b.lengths))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["linear", "safe-driver"])
def test_refilled_rows_play_the_waves_episodes(policy):
    act = _linear_policy(0) if policy == "linear" else _safe_driver
    seeds = list(range(EVAL_SEED, EVAL_SEED + 40))
    for det in (False, True):
        waves, refilled = _Counting(), _Counting()
        old = play_batched(waves, act, det, seeds, 4, wave=16, refill=False)
        new = play_batched(refilled, act, det, seeds, 4, wave=16)
        assert _same(old, new), (policy, det)
        # Episode by episode, whatever the number of rows.
        assert _same(new, play_batched(lambda b: make_vec_env(TASK, b), act, det, seeds, 4, wave=7))
        # Rows idle only at the tail: 40 episodes on 16 rows (3 each at most), every row
        # stepped until the last episode ends, at most 3 x 30 steps.
        assert refilled.row_steps <= 16 * 3 * 30 and refilled.steps <= 3 * 30
        if policy == "linear":  # episodes of unequal length (crashes), where the waves idle
            assert len(np.unique(old.lengths)) > 1 and refilled.row_steps < 0.8 * waves.row_steps


def test_partial_reset_restarts_only_the_masked_rows():
    vec = make_vec_env(TASK, 3)
    try:
        first, _ = vec.reset(seed=[5, 6, 7])
        vec.step(np.array([1, 1, 1]))
        obs, _ = vec.reset(seed=[None, 6, None], options={"reset_mask": np.array([False, True, False])})
        assert np.array_equal(obs[1], first[1]) and not np.array_equal(obs[0], first[0])
        with pytest.raises(ValueError, match="reset_mask"):
            vec.reset(seed=[1, 2, 3], options={"reset_mask": np.array([1, 0, 1])})
    finally:
        vec.close()


def test_refill_needs_no_more_rows_than_episodes():
    vec = make_vec_env(TASK, 4)
    try:
        with pytest.raises(ValueError, match="4 rows for 2 episodes"):
            play_refilled(vec, _safe_driver, True, [1, 2], 4)
    finally:
        vec.close()



def test_partial_reset_restarts_sautes_budgets_of_the_masked_rows_only():
    """Saute's policy reads each row's remaining budgets: a refilled row starts with full
    budgets, the other rows keep theirs (and the episodes equal the waves')."""
    from constrained_grpo.registry import make_agent

    saute = make_agent("saute-ppo", TASK, seed=0)
    vec = saute.wrap_eval_vec_env(make_vec_env(TASK, 3))
    try:
        vec.reset(seed=[5, 6, 7])
        vec.z[:] = 0.5  # budgets half spent
        obs, _ = vec.reset(seed=[None, 6, None], options={"reset_mask": np.array([False, True, False])})
        assert vec.z.tolist() == [[0.5] * 4, [1.0] * 4, [0.5] * 4] and obs[0, -1] == 0.5
    finally:
        vec.close()
    seeds = list(range(EVAL_SEED, EVAL_SEED + 24))
    make = lambda b: saute.wrap_eval_vec_env(make_vec_env(TASK, b))  # noqa: E731
    old = play_batched(make, saute.act_batch, False, seeds, 4, wave=8, refill=False)
    assert _same(old, play_batched(make, saute.act_batch, False, seeds, 4, wave=8))


@pytest.mark.slow
def test_highway_eval_bench_measures_both_ways(tmp_path):
    """The bench row (tiny budget): training time, both evaluations, and the same episodes."""
    from constrained_grpo.eval.bench import highway_eval

    (path,) = highway_eval.run(tmp_path, algos=("cgrpo",), steps=100, episodes=40)
    import pandas as pd

    row = pd.read_csv(path).iloc[0]
    assert row["algo"] == "cgrpo" and row["episodes"] == 40 and bool(row["same_episodes"])
    assert row["train_s"] > 0 and row["eval_s_waves"] > 0 and row["eval_s_refilled"] > 0
    assert 0 < row["row_use_waves"] <= row["row_use_refilled"] <= 1
    assert 0 < row["eval_share_refilled"] < 1 and row["target_eval_share"] == 0.25
    assert row["task"] == "Highway/Highway-v2"  # the standard preset's highway task by default
    # Another straight-highway task, into a CSV of its own name.
    (v1,) = highway_eval.run(tmp_path, algos=("cgrpo",), steps=100, episodes=40, task="Highway/Highway-v1", name="v1.csv")
    assert v1.name == "v1.csv" and pd.read_csv(v1).iloc[0]["task"] == "Highway/Highway-v1"
    # The harness's plan for the indicator limits: the recorded runs' 10,175 (v1) and the cap (v2).
    assert highway_eval.planned_episodes("Highway/Highway-v1") == 10_175
    assert highway_eval.planned_episodes("Highway/Highway-v2") == 20_000
    with pytest.raises(ValueError, match="'Highway/Merge-v0' has no batched twin"):
        highway_eval.measure("cgrpo", "Highway/Merge-v0", steps=100)
