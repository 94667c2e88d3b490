"""``make_vec_env``'s sync fallback reports the costs of the step that ended an episode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from constrained_grpo.tasks import FinalStepCosts, ensure_tasks_registered, make_vec_env


def test_sync_fallback_costs_equal_the_batched_twin_on_finishing_steps() -> None:
    ensure_tasks_registered()
    task, n = "Grid/HazardFuel3x3-v0", 4
    sync = FinalStepCosts(gym.make_vec(task, num_envs=n, vectorization_mode="sync",
                                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}))
    batched = make_vec_env(task, n)
    sync.reset(seed=5)
    batched.reset(seed=5)
    actions = np.random.default_rng(0).integers(0, 4, size=(60, n))
    finished = 0
    for a in actions:
        _, r1, te1, tr1, i1 = sync.step(a)
        _, r2, te2, tr2, i2 = batched.step(a)
        np.testing.assert_array_equal(te1 | tr1, te2 | tr2)
        np.testing.assert_allclose(r1, r2)
        np.testing.assert_allclose(i1["costs"], i2["costs"])
        np.testing.assert_allclose(i1["cost"], i2["costs"].sum(axis=1))
        finished += int((te1 | tr1).sum())
    # Every step onto the goal costs fuel, so a row that read 0 there would fail above.
    assert finished >= 10


def test_math_vector_env_keeps_every_rows_costs() -> None:
    vec = make_vec_env("Math/ChainSum-v0", 2)
    vec.reset(seed=0)
    # Both episodes end at once (single-step task): the costs must not read 0.
    _, _, terminated, _, info = vec.step(np.array(["no final answer here", "x " * 2000], dtype=object))
    assert terminated.all()
    assert info["costs"].shape == (2, len(info["final_info"]["costs"][0]))
    assert info["costs"][0].sum() >= 1 and info["costs"][1].sum() >= 1
    np.testing.assert_array_equal(info["costs"], info["final_info"]["costs"])
