"""The deployed policy after training: the best feasible iterate, or the tail mixture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from constrained_grpo.agents.agent import GRPOAgent, load_agent
from constrained_grpo.agents.final_policy import FinalPolicyKeeper
from constrained_grpo.eval.evaluation import evaluate_agent
from constrained_grpo.sampling import episode_choice

TASK = "Grid/HazardFuel3x3-v0"


def _p(v: float) -> list[torch.Tensor]:
    return [torch.tensor([v])]


def test_best_feasible_keeps_the_top_return_among_batches_within_every_limit():
    keeper = FinalPolicyKeeper("best-feasible", np.array([0.1, 5.0]))
    keeper.observe(_p(1.0), 0, 10, batch_return=0.5, batch_costs=np.array([0.05, 4.0]), iteration=1)
    keeper.observe(_p(2.0), 10, 20, batch_return=0.9, batch_costs=np.array([0.12, 4.0]), iteration=2)  # over: skipped
    keeper.observe(_p(3.0), 20, 30, batch_return=0.7, batch_costs=np.array([0.10, 5.0]), iteration=3)  # at the limits
    keeper.observe(_p(4.0), 30, 40, batch_return=0.6, batch_costs=np.array([0.0, 0.0]), iteration=4)  # lower return
    assert [float(p[0]) for p in keeper.deployed()] == [3.0] and keeper.best_iteration == 3


def test_tail_mixture_keeps_evenly_spaced_iterations_of_the_last_fifth():
    keeper = FinalPolicyKeeper("tail-mixture", np.array([1.0]), snapshots=4)
    keeper.begin(0, 1000)  # policies buffered from step 600 on
    steps = 0
    for it in range(40):  # 40 iterations, the later ones shorter: the tail is the last ceil(0.2 * 40) = 8
        width = 40 if it < 20 else 10
        keeper.observe(_p(it), steps, steps + width, 0.0, np.zeros(1), it + 1)
        steps += width
    keeper.finish()
    # The last 8 iterations are 32..39; members at positions floor((j + 1/2) 8 / 4) = 1, 3, 5, 7.
    assert [float(p[0]) for p in keeper.deployed()] == [33, 35, 37, 39]


def test_last_keeps_nothing():
    keeper = FinalPolicyKeeper("last", np.array([1.0]))
    assert not keeper.active and keeper.deployed() == []
    with pytest.raises(ValueError, match="final_policy='best'; choose one of"):
        FinalPolicyKeeper("best", np.array([1.0]))


@pytest.fixture(scope="module")
def mixture() -> GRPOAgent:
    agent = GRPOAgent(TASK, seed=3, preset="quick", final_policy="tail-mixture", final_snapshots=4)
    return agent.learn(20_000)


def test_a_mixture_episode_is_its_members_episode(mixture: GRPOAgent, tmp_path):
    members = mixture.deployed_policies()
    assert len(members) == 4 and not all(torch.equal(next(members[0].parameters()), next(m.parameters())) for m in members)
    mixed, protocol = evaluate_agent(mixture, TASK, episodes=400)
    seeds = np.arange(protocol.first_seed, protocol.first_seed + 400)
    choice = episode_choice(seeds, 4)
    for j in range(4):  # each member alone, on the same episodes
        mixture._deployed = [members[j]]
        alone, _ = evaluate_agent(mixture, TASK, episodes=400)
        rows = choice == j
        for policy in ("sampled", "deterministic"):
            assert np.array_equal(alone[policy].returns[rows], mixed[policy].returns[rows])
            assert np.array_equal(alone[policy].costs[rows], mixed[policy].costs[rows])
    mixture._deployed = None
    serial, _ = evaluate_agent(mixture, TASK, episodes=100, batched=False)
    assert np.array_equal(serial["sampled"].costs, mixed["sampled"].costs[:100])
    reloaded = load_agent(mixture.save(tmp_path / "agent"))
    again, _ = evaluate_agent(reloaded, TASK, episodes=400)
    assert np.array_equal(again["sampled"].returns, mixed["sampled"].returns)


def test_best_feasible_trains_as_the_last_iterate_does():
    last = GRPOAgent(TASK, seed=5, preset="quick")
    best = GRPOAgent(TASK, seed=5, preset="quick", final_policy="best-feasible")
    a, b = [], []
    last.learn(10_000, a.append)
    best.learn(10_000, b.append)
    assert [r["ep_cost"] for r in a] == [r["ep_cost"] for r in b]  # snapshots change nothing in training
    kept = best.trainer.final
    feasible = [r for r in b if all(c <= d for c, d in zip(r["ep_cost"], best.trainer.final.limits))]
    if feasible:
        assert kept.best_iteration == max(feasible, key=lambda r: r["ep_return"])["iteration"]
    else:
        assert best.deployed_policies() == [best.policy]


def test_text_agents_refuse_a_remedy():
    from constrained_grpo.agents.text_agent import text_config  # noqa: F401  (the refusal is in the agent)

    with pytest.raises(ValueError, match="deploys its last iterate only"):
        from constrained_grpo.agents.text_agent import TextGRPOAgent

        TextGRPOAgent("Math/ChainSum-v0", preset="quick", final_policy="tail-mixture")
