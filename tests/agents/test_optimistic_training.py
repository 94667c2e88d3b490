"""The optimistic policy step inside the trainers: the first update is the plain one, every
later one is extrapolated by Delta_t - Delta_{t-1}, and a saved agent keeps Delta_{t-1} (and
the optimistic multiplier its last direction), so that its next step is optimistic too."""

from __future__ import annotations

import torch

from constrained_grpo.agents.agent import GRPOAgent, load_agent
from constrained_grpo.registry import make_agent

TASK = "Grid/HazardFuel3x3-v0"


def _params(agent: GRPOAgent) -> list[torch.Tensor]:
    return [p.detach().clone() for p in agent.policy.parameters()]


def test_grpo_optimism_extrapolates_each_update_after_the_first():
    plain = GRPOAgent(TASK, seed=2, preset="quick")
    opt = GRPOAgent(TASK, seed=2, preset="quick", policy_optimism=1.0)
    start = _params(opt)
    plain.trainer.step()
    opt.trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(_params(plain), _params(opt)))  # no Delta_{t-1} yet
    delta1 = [a - b for a, b in zip(_params(opt), start)]
    before = _params(opt)
    opt.trainer.step()
    # Delta_2, the plain update of iteration 2, is what the trainer remembers: theta_3 = theta_2 + 2 Delta_2 - Delta_1.
    delta2 = opt.trainer.optimism.last_update
    expected = [b + 2 * d2 - d1 for b, d2, d1 in zip(before, delta2, delta1)]
    assert all(torch.allclose(p, e, atol=1e-6) for p, e in zip(_params(opt), expected))


def test_a_saved_optimistic_agent_keeps_its_last_update(tmp_path):
    half = GRPOAgent(TASK, seed=4, preset="quick", policy_optimism=1.0, multiplier={"rule": "dual_ascent", "optimistic": True})
    for _ in range(2):
        half.trainer.step()
    resumed = load_agent(half.save(tmp_path / "a"))
    assert resumed.trainer.optimism.last_update is not None
    assert all(torch.equal(a, b) for a, b in zip(resumed.trainer.optimism.last_update, half.trainer.optimism.last_update))
    assert resumed.trainer.multiplier.state_dict() == half.trainer.multiplier.state_dict()


def test_ppo_lagrangian_optimism_is_saved_and_refused_where_it_does_not_apply(tmp_path):
    import pytest

    agent = make_agent("ppo-lag-ogda", TASK, seed=0, n_envs=4, n_steps=32, batch_size=64)
    agent.learn(3 * 128)
    assert agent.model.optimism.last_update is not None
    again = make_agent("ppo-lag-ogda", TASK, seed=0, n_envs=4, n_steps=32, batch_size=64)
    again.load(agent.save(tmp_path / "b"))
    assert all(torch.equal(a, b) for a, b in zip(again.model.optimism.last_update, agent.model.optimism.last_update))
    with pytest.raises(ValueError, match="has its own update; the optimistic policy step is available on PPO-Lagrangian"):
        make_agent("cpo", TASK, seed=0, policy_optimism=1.0, n_envs=4, n_steps=32, batch_size=64)
    with pytest.raises(ValueError, match="mixes its advantage its own way and would ignore the rule's weights"):
        make_agent("rcpo", TASK, seed=0, multiplier={"rule": "crpo"}, n_envs=4, n_steps=32, batch_size=64)
