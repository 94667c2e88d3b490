import gymnasium as gym
import numpy as np
import pytest

import constrained_grpo.envs  # noqa: F401  (registers the tasks)
from constrained_grpo import Constraint, CostContractError, check_constrained_env, make_env, make_vec_env
from constrained_grpo.wrappers import (
    RecordEpisodeCost,
    RecordEpisodeCostVector,
    SafetyGymnasiumToContract,
    to_safety_gymnasium_step,
)


def test_record_episode_cost_hazard_route():
    env = RecordEpisodeCost(make_env("Grid/HazardFuel3x3-v0"))
    env.reset(seed=0)
    _, _, term, _, info = env.step(3)
    assert not term and "episode" not in info
    _, r, term, _, info = env.step(3)
    assert term and r == 1.0
    ep = info["episode"]
    assert ep["r"] == 1.0 and ep["l"] == 2
    np.testing.assert_array_equal(ep["c"], [1.0, 2.0])  # one hazard event, two steps of fuel
    env.reset(seed=1)  # the counters restart
    for a in (0, 3, 3, 1):  # up, right, right, down: the mud route
        *_, info = env.step(a)
    np.testing.assert_array_equal(info["episode"]["c"], [0.0, 4.0])


def test_vector_twin_matches_single():
    vec = RecordEpisodeCostVector(make_vec_env("Grid/HazardFuel3x3-v0", 3))
    vec.reset(seed=[0, 0, 0])
    plans = [[3, 3, 0, 0], [0, 3, 3, 1], [0, 0, 3, 1]]
    finished = {}
    for t in range(4):
        _, _, _, _, info = vec.step(np.array([p[t] for p in plans]))
        if "episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                finished.setdefault(int(i), (info["episode"]["r"][i], info["episode"]["c"][i].tolist(), info["episode"]["l"][i]))
    assert finished[0] == (1.0, [1.0, 2.0], 2)
    assert finished[1] == (1.0, [0.0, 4.0], 4)
    # up, up, right (the gem), down (onto mud): still on the way after 4 steps
    assert 2 not in finished


def test_vector_twin_requires_same_step_autoreset():
    env = gym.make_vec("Grid/HazardFuel3x3-v0", 2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="SAME_STEP"):
        RecordEpisodeCostVector(env)


class LegacySixTuple(gym.Env):
    """An env with Safety-Gymnasium's step signature."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._t += 1
        return np.full(2, 0.1 * action, np.float32), 1.0, float(action), False, self._t >= 5, {"hit": bool(action)}


def test_safety_gymnasium_adapters_round_trip():
    env = SafetyGymnasiumToContract(LegacySixTuple(), constraints=(Constraint("cost", 25.0),))
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(1)
    assert r == 1.0 and info["cost"] == 1.0 and info["hit"] is True
    np.testing.assert_array_equal(info["costs"], [1.0])
    six = to_safety_gymnasium_step((obs, r, term, trunc, info))
    assert len(six) == 6 and six[2] == 1.0 and six[1] == 1.0
    check_constrained_env(env, skip_gym_check=True)


def test_adapter_rejects_five_tuple_and_wrong_k():
    with pytest.raises(CostContractError, match="6-tuple"):
        env = SafetyGymnasiumToContract(make_env("Grid/HazardFuel3x3-v0").unwrapped)
        env.reset(seed=0)
        env.step(0)
    env = SafetyGymnasiumToContract(LegacySixTuple(), constraints=(Constraint("a", 1.0), Constraint("b", 1.0)))
    env.reset(seed=0)
    with pytest.raises(CostContractError, match="2 constraint"):
        env.step(1)
