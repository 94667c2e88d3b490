"""ppo-lag-al takes its weights as the augmented Lagrangian defines them: from the multiplier
before the rollout's dual step, so that the penalty on the rollout's violation is rho, not
rho + eta."""

from __future__ import annotations

import numpy as np
import pytest

from constrained_grpo.baselines import ppo_lagrangian
from constrained_grpo.registry import make_agent

TINY = {"n_envs": 2, "n_steps": 32, "batch_size": 32, "n_epochs": 1}


def test_weights_come_before_the_multiplier_step(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent("ppo-lag-al", "Grid/HazardFuel3x3-v0", seed=0, multiplier={"init": 0.5}, **TINY).learn(64)
    model = agent.model
    model.multiplier.values[:] = 0.5
    seen: list[np.ndarray] = []
    real = ppo_lagrangian.lagrangian_advantage
    monkeypatch.setattr(ppo_lagrangian, "lagrangian_advantage",
                        lambda *a, **k: seen.append(np.array(a[2])) or real(*a, **k))
    # Limits 0.2 (hazard) and 4.4 (fuel), relative violations e = (0.4 - 0.2) / 0.2 = 1 and
    # (6.6 - 4.4) / 4.4 = 0.5; rho = 0.05, eta = 0.01.
    model._update_multipliers([np.array([0.4, 6.6]), np.array([0.4, 6.6])])
    model._mix_advantages()
    assert model.multiplier.values == pytest.approx([0.5 + 0.01 * 1.0, 0.5 + 0.01 * 0.5])  # lambda_{t+1}
    assert seen[-1] == pytest.approx([0.5 + 0.05 * 1.0, 0.5 + 0.05 * 0.5])  # max(0, lambda_t + rho e_t)
    # (After the step it would be 0.51 + 0.05 = 0.56: the penalty rho + eta.)


def test_the_lagrangian_rules_keep_ppo_lagrangians_order(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent("ppo-lag", "Grid/HazardFuel3x3-v0", seed=0, **TINY).learn(64)
    model = agent.model
    model.multiplier.values[:] = 0.5
    seen: list[np.ndarray] = []
    real = ppo_lagrangian.lagrangian_advantage
    monkeypatch.setattr(ppo_lagrangian, "lagrangian_advantage",
                        lambda *a, **k: seen.append(np.array(a[2])) or real(*a, **k))
    model._update_multipliers([np.array([0.4, 6.6])])
    model._mix_advantages()
    assert seen[-1] == pytest.approx(model.multiplier.values) and model.multiplier.values[0] > 0.5


def test_after_step_reproduces_the_runs_made_before_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent("ppo-lag-al", "Grid/HazardFuel3x3-v0", seed=0, augmented_weights="after-step", **TINY).learn(64)
    model = agent.model
    model.multiplier.values[:] = 0.5
    seen: list[np.ndarray] = []
    real = ppo_lagrangian.lagrangian_advantage
    monkeypatch.setattr(ppo_lagrangian, "lagrangian_advantage",
                        lambda *a, **k: seen.append(np.array(a[2])) or real(*a, **k))
    model._update_multipliers([np.array([0.4, 6.6])])
    model._mix_advantages()
    assert seen[-1] == pytest.approx([0.51 + 0.05 * 1.0, 0.505 + 0.05 * 0.5])  # lambda_t + (rho + eta) e_t
    with pytest.raises(ValueError, match="augmented_weights='later'; choose 'before-step' or 'after-step'"):
        make_agent("ppo-lag-al", "Grid/HazardFuel3x3-v0", augmented_weights="later", **TINY)
