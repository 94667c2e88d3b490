"""PPO-Lagrangian bootstraps time-limit truncations with both critics after the rollout, in
blocks of n_envs terminal observations: the reward gets gamma V(s_T) as SB3 adds it per step,
and the cost gamma_c V_c(s_T)."""

from __future__ import annotations

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from constrained_grpo.registry import make_agent

from baseline_envs import EPISODE_LENGTH, TRUNCATED_ID


def test_truncated_rewards_and_costs_get_both_critics_values() -> None:
    # 2 envs x 3 episodes of 5 steps per rollout: 6 truncations, three blocks of n_envs = 2.
    agent = make_agent("ppo-lag", TRUNCATED_ID, seed=0, n_envs=2, n_steps=3 * EPISODE_LENGTH, batch_size=10,
                       n_epochs=1, gamma=0.99, cost_gamma=0.9, learning_rate=0.0)
    model = agent.model
    with th.no_grad():  # constant critics: V = 5, V_c = (2, 3); learning rate 0 keeps them
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

    model.learn(2 * 2 * 3 * EPISODE_LENGTH, callback=Check())
    assert len(seen) == 2
    last = np.arange(3 * EPISODE_LENGTH) % EPISODE_LENGTH == EPISODE_LENGTH - 1
    for rewards, costs in seen:
        for env in range(2):
            # The env's reward is 0: only the last step of each episode holds 0.99 * 5.
            np.testing.assert_allclose(rewards[:, env], np.where(last, 0.99 * 5.0, 0.0), rtol=1e-6)
            np.testing.assert_allclose(costs[last, env], [[1.0 + 0.9 * 2.0, 1.0 + 0.9 * 3.0]] * 3, rtol=1e-6)
            np.testing.assert_allclose(costs[~last, env], [[1.0, 0.0]] * 12)
