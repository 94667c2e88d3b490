"""The baselines' fidelity to their papers and to OmniSafe 0.5.0 where a default follows it
(docs/parity.md, "The other baselines"): each against a case worked out by hand."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces

import constrained_grpo.baselines.first_order as first_order
from constrained_grpo.baselines.constrained_base import kl_per_state
from constrained_grpo.baselines.first_order import p3o_loss
from constrained_grpo.baselines.omnisafe import OmniSafeTRPOLag
from constrained_grpo.baselines.trust_region import TRPOLagrangian, block_conjugate_gradient, conjugate_gradient
from constrained_grpo.constraints import Constraint
from constrained_grpo.registry import make_agent, resolve_config

from baseline_envs import FIXED_COST_ID

BOX3_ID = "TestBaselines/Box3Reward-v0"


class Box3RewardEnv(gym.Env[np.ndarray, np.ndarray]):
    """A 3-d action, reward ``-|a - 0.5|^2`` per step, 8 steps, one cost that is always 0."""

    constraints = (Constraint("never", 1.0, "never paid"),)

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        return np.array([0.5], dtype=np.float32), {}

    def step(self, action: Any):
        self._t += 1
        reward = -float(np.sum((np.clip(action, -1, 1) - 0.5) ** 2))
        return np.array([0.5], dtype=np.float32), reward, self._t >= 8, False, {"costs": np.zeros(1), "cost": 0.0}


if BOX3_ID not in gym.registry:
    gym.register(id=BOX3_ID, entry_point=Box3RewardEnv)


def _normal(mean: list[float], std: list[float]) -> SimpleNamespace:
    return SimpleNamespace(distribution=th.distributions.Normal(th.tensor([mean]), th.tensor([std])))


def test_the_kl_of_a_3d_gaussian_is_summed_or_averaged_over_its_dimensions() -> None:
    # KL(N(m1, s1) || N(m2, s2)) = log(s2 / s1) + (s1^2 + (m1 - m2)^2) / (2 s2^2) - 1/2, per dimension:
    # (0 vs 1, std 1 vs 1): 1/2; (0 vs 0): 0; (std 1 vs 2): log 2 + 1/8 - 1/2.
    p, q = _normal([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]), _normal([1.0, 0.0, 0.0], [1.0, 1.0, 2.0])
    per_dim = [0.5, 0.0, math.log(2) + 0.125 - 0.5]
    assert kl_per_state(p, q).item() == pytest.approx(sum(per_dim), rel=1e-6)
    assert kl_per_state(p, q, "mean").item() == pytest.approx(sum(per_dim) / 3, rel=1e-6)
    with pytest.raises(ValueError, match="over_actions='max'"):
        kl_per_state(p, q, "max")
    assert TRPOLagrangian.kl_over_actions == "sum" and OmniSafeTRPOLag.kl_over_actions == "mean"


@pytest.mark.parametrize(("name", "bound_on"), [("trpo-lag", "sum"), ("trpo-lag-omnisafe", "mean")])
def test_the_trust_region_bounds_the_kl_its_variant_names(name: str, bound_on: str) -> None:
    """On a 3-d Gaussian policy, ``trpo-lag`` keeps the joint KL within delta = 0.01 and
    ``trpo-lag-omnisafe`` the per-dimension mean (OmniSafe's), so its step goes further:
    the quadratic model puts the first line-search candidate at the bound."""
    agent = make_agent(name, BOX3_ID, seed=0, n_envs=1, n_steps=256, batch_size=64, n_epochs=1,
                       fisher_subsample=1, normalize_advantage=True)
    model = agent.model
    before = copy.deepcopy(model.policy)
    agent.learn(256)  # one rollout with theta_0, one update to theta_1
    obs = th.as_tensor(model.rollout_buffer.observations.reshape(-1, 1))
    with th.no_grad():
        old = copy.copy(before.get_distribution(obs))
        new = model.policy.get_distribution(obs)
        joint, mean = kl_per_state(old, new).mean().item(), kl_per_state(old, new, "mean").mean().item()
    assert joint == pytest.approx(3 * mean, rel=1e-5)
    if bound_on == "sum":
        assert 0.002 < joint <= 0.01 + 1e-6
    else:
        assert 0.002 < mean <= 0.01 + 1e-6 and joint > 0.01


def test_block_conjugate_gradient_runs_independent_solves_in_lock_step() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(6, 6))
    a = th.as_tensor(m @ m.T + 6 * np.eye(6))
    b = th.as_tensor(rng.normal(size=(6, 3)))
    b[:, 2] = 0.0  # a zero right-hand side stays at x = 0 (its residual starts below tol)
    x = block_conjugate_gradient(lambda v: a @ v, b, iters=6)
    assert th.allclose(a @ x, b, atol=1e-8)
    for j in range(2):  # the same iterates as a solve on its own, after any number of steps
        for iters in (1, 3):
            alone = conjugate_gradient(lambda v: a @ v, b[:, j], iters=iters)
            assert th.allclose(block_conjugate_gradient(lambda v: a @ v, b, iters=iters)[:, j], alone, atol=1e-12)


def test_p3o_penalty_switches_off_when_the_predicted_improvement_covers_the_per_step_violation() -> None:
    ratio, adv = th.ones(2), th.zeros(2)
    # Lc = mean of the cost advantages at ratio 1: -0.05. The episodic violation J - d = 2 over
    # episodes of L = 50 steps is 0.04 per step: Lc + 0.04 < 0, the penalty is off.
    cost_adv = th.tensor([[-0.04], [-0.06]])
    loss, active = p3o_loss(ratio, adv, cost_adv, th.tensor([2.0 / 50]), clip=0.2, kappa=20.0)
    assert active.tolist() == [0.0] and loss.item() == pytest.approx(0.0)
    # The whole-episode violation would have kept it on, at 20 * (2 - 0.05).
    loss, active = p3o_loss(ratio, adv, cost_adv, th.tensor([2.0]), clip=0.2, kappa=20.0)
    assert active.tolist() == [1.0] and loss.item() == pytest.approx(20 * 1.95)


def test_p3o_divides_the_episodic_violation_by_the_mean_episode_length(monkeypatch: pytest.MonkeyPatch) -> None:
    # FixedCost: 5-step episodes costing (5, 1) against limits (3, 0.5): J - d = (2, 0.5). A rollout
    # of 15 steps on 2 envs starts 3 episodes on each: L = 30 / 6 = 5, so c = (0.4, 0.1).
    seen: list[np.ndarray] = []

    def spy(ratio, adv, cost_adv, violation, clip, kappa):  # noqa: ANN001, ANN202
        seen.append(violation.numpy().copy())
        return p3o_loss(ratio, adv, cost_adv, violation, clip, kappa)

    monkeypatch.setattr(first_order, "p3o_loss", spy)
    agent = make_agent("p3o", FIXED_COST_ID, seed=0, n_envs=2, n_steps=15, batch_size=30, n_epochs=1)
    agent.learn(30)
    assert agent.model.mean_episode_length() == pytest.approx(5.0)
    assert np.allclose(seen[-1], [0.4, 0.1], atol=1e-6)


@pytest.mark.parametrize(("name", "target"), [("focops", 0.02), ("cup", 0.01)])
def test_focops_and_cup_stop_an_iteration_at_their_kl_targets(name: str, target: float) -> None:
    assert resolve_config(name, "Grid/HazardFuel3x3-v0")["config"]["target_kl"] == target

    def passes(**options: Any) -> tuple[float, float]:
        agent = make_agent(name, "Grid/HazardFuel3x3-v0", seed=0, n_envs=4, n_steps=64, batch_size=64,
                           n_epochs=10, **options)
        model = agent.model
        before = copy.deepcopy(model.policy)
        agent.learn(256)
        obs = th.as_tensor(model.rollout_buffer.observations).reshape(256, -1)
        with th.no_grad():
            kl = kl_per_state(copy.copy(before.get_distribution(obs)), model.policy.get_distribution(obs))
        return model.logger.name_to_value["train/update_passes"], kl.mean().item()

    # A large step: the first pass overshoots the target, and the iteration stops there.
    n, kl = passes(learning_rate=0.05)
    assert n == 1 and kl > target
    # Without the target all ten passes run; with small steps the target is never reached.
    assert passes(learning_rate=0.05, target_kl=None)[0] == 10
    n, kl = passes(learning_rate=1e-5)
    assert n == 10 and kl < target
