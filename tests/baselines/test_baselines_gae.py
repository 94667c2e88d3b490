"""Cost GAE against hand-worked trajectories (the way SB3's tests/test_gae.py checks reward GAE)."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback

from constrained_grpo.baselines.buffers import CostRolloutBuffer, gae
from constrained_grpo.baselines.ppo_lagrangian import (
    PPOLagrangian,
    clip_grad_norms_,
    lagrangian_advantage,
    normalize_advantage,
)
from constrained_grpo.registry import make_agent

from baseline_envs import EPISODE_LENGTH, FIXED_COST_ID, TRUNCATED_ID

# One env, T=4, K=2: steps 0-1 are one episode, steps 2-3 the start of the next.
COSTS = np.array([[1.0, 0.5], [0.0, 0.5], [1.0, 0.5], [1.0, 0.5]])
VALUES = np.array([[0.5, 1.0], [0.5, 1.0], [1.0, 1.0], [0.5, 1.0]])
STARTS = np.array([1.0, 0.0, 1.0, 0.0])
LAST_VALUES = np.array([2.0, 3.0])


def test_cost_gae_hand_worked() -> None:
    # gamma = lambda = 0.5; by hand, per constraint, backwards from t = 3:
    #   k=0: d3 = 1 + .5*2 - .5 = 1.5 -> A3 = 1.5
    #        d2 = 1 + .5*.5 - 1 = .25 -> A2 = .25 + .25*1.5 = .625
    #        d1 = 0 - .5 (episode ends) -> A1 = -.5
    #        d0 = 1 + .5*.5 - .5 = .75 -> A0 = .75 + .25*(-.5) = .625
    #   k=1: d3 = .5 + 1.5 - 1 = 1 -> A3 = 1;  d2 = 0 -> A2 = .25;  A1 = -.5;  d0 = 0 -> A0 = -.125
    adv, ret = gae(COSTS[:, None], VALUES[:, None], STARTS[:, None], LAST_VALUES[None], np.array([0.0]), 0.5, 0.5)
    np.testing.assert_allclose(adv[:, 0], [[0.625, -0.125], [-0.5, -0.5], [0.625, 0.25], [1.5, 1.0]])
    np.testing.assert_allclose(ret[:, 0], [[1.125, 0.875], [0.0, 0.5], [1.625, 1.25], [2.0, 2.0]])


def test_cost_gae_lambda_one_zero_values_is_discounted_cost_to_go() -> None:
    # The last step ends an episode (last_dones=1): no bootstrap from last_values.
    adv, ret = gae(COSTS[:, None], np.zeros((4, 1, 2)), STARTS[:, None], LAST_VALUES[None], np.array([1.0]), 0.5, 1.0)
    np.testing.assert_allclose(ret[:, 0, 0], [1.0, 0.0, 1.5, 1.0])
    np.testing.assert_allclose(ret[:, 0, 1], [0.75, 0.5, 0.75, 0.5])
    np.testing.assert_allclose(adv, ret)


def _filled_buffers(n_envs: int = 3, n_steps: int = 6, seed: int = 0) -> tuple[RolloutBuffer, CostRolloutBuffer, dict]:
    rng = np.random.default_rng(seed)
    obs_space, act_space = spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2)
    sb3 = RolloutBuffer(n_steps, obs_space, act_space, gamma=0.9, gae_lambda=0.8, n_envs=n_envs)
    ours = CostRolloutBuffer(n_steps, obs_space, act_space, gamma=0.9, gae_lambda=0.8, n_envs=n_envs, n_costs=2,
                             cost_gamma=0.7, cost_gae_lambda=0.6)
    data = {"costs": rng.random((n_steps, n_envs, 2)), "cost_values": rng.random((n_steps, n_envs, 2)),
            "starts": (rng.random((n_steps, n_envs)) < 0.3).astype(np.float32)}
    for t in range(n_steps):
        step = (rng.random((n_envs, 2)).astype(np.float32), rng.integers(0, 2, (n_envs, 1)),
                rng.random(n_envs).astype(np.float32), data["starts"][t],
                th.as_tensor(rng.random((n_envs, 1)), dtype=th.float32), th.as_tensor(rng.random(n_envs)))
        sb3.add(*step)
        ours.add(*step, costs=data["costs"][t], cost_values=th.as_tensor(data["cost_values"][t], dtype=th.float32))
    return sb3, ours, data


def test_buffer_reward_part_is_sb3_and_cost_part_is_gae() -> None:
    sb3, ours, data = _filled_buffers()
    last_values, dones = th.rand(3, 1), np.array([0.0, 1.0, 0.0])
    last_cost_values = th.rand(3, 2)
    sb3.compute_returns_and_advantage(last_values, dones)
    ours.compute_returns_and_advantage(last_values, dones, last_cost_values=last_cost_values)
    np.testing.assert_array_equal(ours.advantages, sb3.advantages)
    np.testing.assert_array_equal(ours.returns, sb3.returns)
    adv, ret = gae(data["costs"], data["cost_values"], data["starts"], last_cost_values.numpy(), dones, 0.7, 0.6)
    np.testing.assert_allclose(ours.cost_advantages, adv, rtol=1e-6)
    np.testing.assert_allclose(ours.cost_returns, ret, rtol=1e-6)
    # Samples carry the cost fields, flattened like SB3's.
    batch = next(ours.get(batch_size=18))
    assert batch.cost_returns.shape == (18, 2) and batch.cost_advantages.shape == (18, 2)
    np.testing.assert_allclose(np.sort(batch.cost_returns.numpy(), axis=0), np.sort(ret.reshape(-1, 2), axis=0), rtol=1e-6)


def test_buffer_needs_costs() -> None:
    _, ours, _ = _filled_buffers()
    with pytest.raises(TypeError, match="last_cost_values"):
        ours.compute_returns_and_advantage(th.zeros(3, 1), np.zeros(3))


def test_buffer_cost_values_after_the_rollout_equal_per_step() -> None:
    """set_cost_values((T, N, K)) once == cost_values= at every add; none at all is an error."""
    _, per_step, data = _filled_buffers(seed=1)
    _, later, _ = _filled_buffers(seed=1)
    later.cost_values[...] = 0.0
    last_values, dones, last_cost_values = th.rand(3, 1), np.array([1.0, 0.0, 0.0]), th.rand(3, 2)
    with pytest.raises(TypeError, match="set_cost_values"):
        fresh = CostRolloutBuffer(2, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), n_envs=1, n_costs=1)
        for _ in range(2):
            fresh.add(np.zeros((1, 2)), np.zeros((1, 1)), np.zeros(1), np.zeros(1), th.zeros(1, 1), th.zeros(1),
                      costs=np.ones((1, 1)))
        fresh.compute_returns_and_advantage(th.zeros(1, 1), np.zeros(1), last_cost_values=th.zeros(1, 1))
    later.set_cost_values(data["cost_values"])
    for buf in (per_step, later):
        buf.compute_returns_and_advantage(last_values, dones, last_cost_values=last_cost_values)
    np.testing.assert_array_equal(later.cost_advantages, per_step.cost_advantages)
    np.testing.assert_array_equal(later.cost_returns, per_step.cost_returns)


def test_clip_grad_norms_equals_torch_per_group() -> None:
    th.manual_seed(0)
    nets = [th.nn.Linear(3, 4), th.nn.Linear(4, 2)]
    for scale, net in zip((10.0, 0.01), nets):  # first group clipped, second left alone
        for p in net.parameters():
            p.grad = scale * th.randn_like(p)
    expected = []
    for net in nets:
        grads = [p.grad.clone() for p in net.parameters()]
        norm = th.linalg.vector_norm(th.stack([g.norm() for g in grads]))
        expected.append([g * min(1.0, 0.5 / (norm.item() + 1e-6)) for g in grads])
    clip_grad_norms_([list(net.parameters()) for net in nets], 0.5)
    for net, want in zip(nets, expected):
        for p, w in zip(net.parameters(), want):
            th.testing.assert_close(p.grad, w)
    assert th.linalg.vector_norm(th.stack([p.grad.norm() for p in nets[0].parameters()])) == pytest.approx(0.5, rel=1e-5)


def test_time_limit_truncation_bootstraps_the_costs() -> None:
    """A truncated episode's last cost gets gamma_c * V_c(terminal obs) added, like SB3's reward.

    The cost critic is the constant (2, 3) (zero last layer weights, learning rate 0), so
    the last step of each episode stores c + 0.9 * (2, 3) = (1 + 1.8, 1 + 2.7), every other
    step its own cost (1, 0), and V_c(s_t) = (2, 3) everywhere.
    """
    agent = make_agent("ppo-lag", TRUNCATED_ID, seed=0, n_envs=2, n_steps=2 * EPISODE_LENGTH, batch_size=10,
                       n_epochs=1, cost_gamma=0.9, learning_rate=0.0)
    model = agent.model
    with th.no_grad():
        last = model.policy.cost_value_net[-1]
        last.weight.zero_()
        last.bias.copy_(th.tensor([2.0, 3.0]))
    seen: list[np.ndarray] = []

    class Check(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            buf = self.model.rollout_buffer
            np.testing.assert_allclose(buf.cost_values, np.broadcast_to([2.0, 3.0], buf.cost_values.shape))
            seen.append(buf.costs.copy())

    model.learn(2 * 2 * EPISODE_LENGTH * 2, callback=Check())
    assert len(seen) == 2
    expected = np.tile([[1.0, 0.0]] * (EPISODE_LENGTH - 1) + [[1.0 + 1.8, 1.0 + 2.7]], (2, 1))
    for costs in seen:
        for env in range(2):
            np.testing.assert_allclose(costs[:, env], expected, rtol=1e-6)


class _CheckCostReturns(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.checked = 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        gamma = 0.9
        # Episodes of EPISODE_LENGTH steps, aligned with the rollout: the cost-to-go of
        # step t of an episode is sum_{i>=t} gamma^(i-t) c_i with c = [1, 1{last step}].
        t = np.arange(EPISODE_LENGTH)
        steps_to_go = EPISODE_LENGTH - t
        expected = np.stack([(1 - gamma**steps_to_go) / (1 - gamma), gamma ** (steps_to_go - 1)], axis=1)
        expected = np.tile(expected, (buf.buffer_size // EPISODE_LENGTH, 1))
        for env in range(buf.n_envs):
            np.testing.assert_allclose(buf.cost_returns[:, env], expected, rtol=1e-5)
            np.testing.assert_allclose(buf.cost_advantages[:, env], expected, rtol=1e-5)
        self.checked += 1


def test_cost_gae_end_to_end_matches_discounted_costs() -> None:
    """Like SB3's test_gae: a zero cost critic and gae_lambda=1 give the discounted costs."""
    agent = make_agent("ppo-lag", FIXED_COST_ID, seed=0, n_envs=2, n_steps=2 * EPISODE_LENGTH, batch_size=10,
                       n_epochs=1, cost_gamma=0.9, cost_gae_lambda=1.0, learning_rate=0.0)
    model = agent.model
    assert isinstance(model, PPOLagrangian)
    with th.no_grad():  # V_c = 0 everywhere; learning_rate=0 keeps it there
        last = model.policy.cost_value_net[-1]
        last.weight.zero_()
        last.bias.zero_()
    callback = _CheckCostReturns()
    model.learn(4 * EPISODE_LENGTH * 2, callback=callback)
    assert callback.checked == 2


def test_lagrangian_advantage_hand_worked() -> None:
    adv_r = np.array([2.0, 0.0])  # standardized: [1, -1]
    adv_c = np.array([[3.0, 5.0], [1.0, 5.0]])  # standardized: [1, -1] and a constant column -> 0
    np.testing.assert_allclose(lagrangian_advantage(adv_r, adv_c, np.array([1.0, 4.0])), [0.0, 0.0])
    np.testing.assert_allclose(lagrangian_advantage(adv_r, adv_c, np.array([0.5, 0.0])), [1 / 3, -1 / 3])
    # Without normalisation: (A_r - sum_k lambda_k A_ck) / (1 + sum_k lambda_k).
    raw = lagrangian_advantage(adv_r, adv_c, np.array([1.0, 1.0]), reward_norm="none", cost_norm="none")
    np.testing.assert_allclose(raw, [(2 - 3 - 5) / 3, (0 - 1 - 5) / 3])
    # OmniSafe's centring: mean removed, scale kept.
    np.testing.assert_allclose(normalize_advantage(adv_c, "center"), [[1.0, 0.0], [-1.0, 0.0]])
    with pytest.raises(ValueError, match="shapes disagree"):
        lagrangian_advantage(adv_r, adv_c, np.array([1.0]))
