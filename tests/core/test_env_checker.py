"""check_constrained_env accepts every registered task and rejects malformed envs."""

import gymnasium as gym
import numpy as np
import pytest

import constrained_grpo.envs
from constrained_grpo import Constraint, CostContractError, check_constrained_env, make_env


# Each family's own tests run the checker on its ids (tests/envs/test_<family>*.py);
# here, every gridworld id, which needs nothing beyond the base install.
@pytest.mark.parametrize("env_id", constrained_grpo.envs.list_tasks("gridworld"))
def test_every_gridworld_task_passes(env_id):
    report = check_constrained_env(make_env(env_id))
    assert report["constraints"] and report["steps"] == 300


class ToyCostEnv(gym.Env):
    """A 1-D walk with one declared constraint; `mode` injects one defect."""

    constraints = (Constraint("cost", 1.0),)

    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._x = 0.0
        self._t = 0
        self._calls = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._calls += 1
        self._x = float(self.np_random.uniform(-1, 1))
        if self.mode == "nondeterministic":
            self._x = float(np.random.default_rng(self._calls).uniform(-1, 1))
        self._t = 0
        return np.array([self._x], np.float32), {}

    def step(self, action):
        self._x += 0.1 if action else -0.1
        self._t += 1
        costs = np.array([abs(self._x) > 0.5], dtype=np.float64)
        if self.mode == "shape":
            costs = np.zeros(2)
        elif self.mode == "nan" and self._t == 3:
            costs = np.array([np.nan])
        elif self.mode == "sum":
            return np.array([self._x], np.float32), 0.0, False, self._t >= 20, {"costs": costs, "cost": 5.0}
        elif self.mode == "dtype":
            costs = costs.astype(np.float32)
        elif self.mode == "missing":
            return np.array([self._x], np.float32), 0.0, False, self._t >= 20, {}
        return np.array([self._x], np.float32), 0.0, False, self._t >= 20, {"costs": costs, "cost": float(costs.sum())}


def test_toy_env_passes():
    check_constrained_env(ToyCostEnv())


@pytest.mark.parametrize(
    "mode, message",
    [
        ("shape", r"shape \(2,\).*declares 1 constraint"),
        ("nan", "not finite"),
        ("sum", "must be a float equal to sum"),
        ("dtype", "float64"),
        ("missing", "no 'costs'"),
    ],
)
def test_rejects_malformed_costs(mode, message):
    with pytest.raises(CostContractError, match=message):
        check_constrained_env(ToyCostEnv(mode), skip_gym_check=True)


def test_rejects_nondeterministic_reset():
    with pytest.raises((CostContractError, AssertionError), match="reset|not equivalent"):
        check_constrained_env(ToyCostEnv("nondeterministic"))
    # Our own check catches it even without gymnasium's.
    with pytest.raises(CostContractError, match=r"reset\(seed=1\) twice"):
        check_constrained_env(ToyCostEnv("nondeterministic"), skip_gym_check=True)


def test_rejects_env_without_constraints():
    env = ToyCostEnv()
    env.constraints = None
    with pytest.raises(CostContractError, match="declares no `constraints`"):
        check_constrained_env(env)


def test_rejects_constraints_that_do_not_match_costs():
    env = ToyCostEnv()
    env.constraints = (Constraint("a", 1.0), Constraint("b", 1.0))
    with pytest.raises(CostContractError, match=r"declares 2 constraint"):
        check_constrained_env(env, skip_gym_check=True)
