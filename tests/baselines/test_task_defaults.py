"""One objective: on the gridworld (finite horizon, exact optimum R* of the undiscounted
return) every baseline optimises sum_t r_t: gamma = 1 and no bootstrap at the time limit."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from constrained_grpo.baselines.agent import BASELINES, make_baseline_vec_env, resolve_baseline_config
from constrained_grpo.baselines.config import PPOConfig, task_defaults
from constrained_grpo.constraints import get_constraints
from constrained_grpo.registry import make_agent
from constrained_grpo.tasks import make_env

from baseline_envs import EPISODE_LENGTH, TRUNCATED_ID


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_gridworld_baselines_use_the_scored_objective(name: str) -> None:
    cfg = resolve_baseline_config(name, "Grid/HazardFuel-v0")["config"]
    assert cfg["gamma"] == 1.0 and cfg["time_limit_bootstrap"] is False
    # The user's option wins over the family's row.
    assert resolve_baseline_config(name, "Grid/HazardFuel-v0", gamma=0.99)["config"]["gamma"] == 0.99


def test_other_families_keep_the_discount() -> None:
    assert task_defaults("Highway/Highway-v0") == {} and task_defaults("Safety/PointGoal1-v0") == {}
    assert task_defaults("Grid/HazardFuel3x3-v0") == {"gamma": 1.0, "time_limit_bootstrap": False}


@pytest.mark.parametrize("vec_env", ["batched", "dummy"])
@pytest.mark.parametrize("bootstrap", [True, False])
def test_time_limit_cut_reported_as_end_without_bootstrap(vec_env: str, bootstrap: bool) -> None:
    # Action 2 (left) from the 3x3 map's start keeps the agent in its corner until the
    # 12-step limit (4 x the side) cuts the episode.
    env_id = "Grid/HazardFuel3x3-v0"
    constraints = get_constraints(make_env(env_id))
    venv = make_baseline_vec_env(env_id, PPOConfig(n_envs=2, vec_env=vec_env, time_limit_bootstrap=bootstrap), constraints)
    venv.seed(0)
    venv.reset()
    for t in range(12):
        _, _, dones, infos = venv.step(np.full(2, 2))
        assert dones.all() == (t == 11)
    assert [i["TimeLimit.truncated"] for i in infos] == [bootstrap] * 2
    assert all("terminal_observation" in i for i in infos)
    venv.close()


def test_ppo_lag_adds_no_critic_value_at_the_time_limit() -> None:
    # As tests/baselines/test_truncation_bootstrap.py, with the bootstrap off: the critics
    # (V = 5, V_c = (2, 3)) never enter the rewards (all 0) or the costs (the env's own:
    # (1, 0), and (1, 1) on an episode's last step).
    agent = make_agent("ppo-lag", TRUNCATED_ID, seed=0, n_envs=2, n_steps=3 * EPISODE_LENGTH, batch_size=10,
                       n_epochs=1, gamma=1.0, learning_rate=0.0, time_limit_bootstrap=False)
    model = agent.model
    with th.no_grad():
        for net, bias in ((model.policy.value_net, [5.0]), (model.policy.cost_value_net[-1], [2.0, 3.0])):
            net.weight.zero_()
            net.bias.copy_(th.tensor(bias))
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Check(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            buf = self.model.rollout_buffer
            seen.append((buf.rewards.copy(), buf.costs.copy()))

    model.learn(2 * 3 * EPISODE_LENGTH, callback=Check())
    rewards, costs = seen[0]
    np.testing.assert_array_equal(rewards, 0.0)
    last = (np.arange(3 * EPISODE_LENGTH) % EPISODE_LENGTH == EPISODE_LENGTH - 1).astype(float)
    np.testing.assert_array_equal(costs[:, :, 0], 1.0)
    np.testing.assert_array_equal(costs[:, :, 1], np.repeat(last[:, None], 2, axis=1))
