"""The deployed policy after training: the best feasible iterate, or the tail mixture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from constrained_grpo.agents.agent import GRPOAgent, load_agent
from constrained_grpo.agents.final_policy import FinalPolicyKeeper, cost_upper_bound
from constrained_grpo.eval.evaluation import evaluate_agent
from constrained_grpo.sampling import episode_choice
from constrained_grpo.tasks import make_env

TASK = "Grid/HazardFuel3x3-v0"


def _p(v: float) -> list[torch.Tensor]:
    return [torch.tensor([v])]


def _groups(*means: float, g: int = 16) -> np.ndarray:
    """``g`` identical per-start group means per cost (no spread: the bound is the mean)."""
    return np.tile(np.array(means, dtype=np.float64), (g, 1))


def test_best_feasible_keeps_the_top_return_among_batches_within_every_limit():
    keeper = FinalPolicyKeeper("best-feasible", np.array([0.1, 5.0]))
    keeper.observe(_p(1.0), 0, 10, batch_return=0.5, group_costs=_groups(0.05, 4.0), iteration=1)
    keeper.observe(_p(2.0), 10, 20, batch_return=0.9, group_costs=_groups(0.12, 4.0), iteration=2)  # over: skipped
    keeper.observe(_p(3.0), 20, 30, batch_return=0.7, group_costs=_groups(0.10, 5.0), iteration=3)  # at the limits
    keeper.observe(_p(4.0), 30, 40, batch_return=0.6, group_costs=_groups(0.0, 0.0), iteration=4)  # lower return
    assert [float(p[0]) for p in keeper.deployed()] == [3.0] and keeper.best_iteration == 3
    assert keeper.state()["cost_bound"] == [0.1, 5.0] and keeper.state()["groups"] == 16


def test_the_bound_treats_each_start_as_one_sample():
    # Four starts with group means 0, 0, 0, 0.4: mean 0.1, sd 0.2, t_{3, 0.95} = 2.353363
    # (a t table), so U = 0.1 + 2.353363 * 0.2 / 2 = 0.3353363, whatever the copies per start.
    assert cost_upper_bound(np.array([[0.0], [0.0], [0.0], [0.4]]))[0] == pytest.approx(0.3353363, abs=1e-6)
    assert cost_upper_bound(np.array([[0.0]]))[0] == np.inf  # one start says nothing about the spread


def test_a_lucky_batch_is_not_selected():
    """Batch 2 has the lowest mean cost and the highest return, but its 16 starts disagree
    (half at 0, half at 0.4: mean 0.2, sd 0.2066, U = 0.2 + 1.75305 * 0.2066 / 4 = 0.2905 over
    the limit 0.25); batch 1's starts agree at 0.22 (U = 0.22). The rule keeps batch 1; a rule
    on the mean alone would keep batch 2."""
    keeper = FinalPolicyKeeper("best-feasible", np.array([0.25]))
    steady = np.full((16, 1), 0.22)
    lucky = np.array([[0.0], [0.4]] * 8)
    keeper.observe(_p(1.0), 0, 10, batch_return=0.5, group_costs=steady, iteration=1)
    keeper.observe(_p(2.0), 10, 20, batch_return=0.9, group_costs=lucky, iteration=2)
    assert lucky.mean() < steady.mean() and keeper.best_iteration == 1
    assert keeper.state()["cost_bound"][0] == pytest.approx(0.22)
    assert cost_upper_bound(lucky)[0] == pytest.approx(0.2 + 1.7530503 * np.std(lucky, ddof=1) / 4, abs=1e-6)
    # At level 1/2 the t quantile is 0 and the bound is the batch mean: the lucky batch wins.
    by_mean = FinalPolicyKeeper("best-feasible", np.array([0.25]), alpha=0.5)
    by_mean.observe(_p(1.0), 0, 10, batch_return=0.5, group_costs=steady, iteration=1)
    by_mean.observe(_p(2.0), 10, 20, batch_return=0.9, group_costs=lucky, iteration=2)
    assert by_mean.best_iteration == 2
    with pytest.raises(ValueError, match=r"deploy_alpha=1.5 must lie in \(0, 1\)"):
        GRPOAgent(TASK, preset="quick", deploy_alpha=1.5)


def test_tail_mixture_keeps_evenly_spaced_iterations_of_the_last_fifth():
    keeper = FinalPolicyKeeper("tail-mixture", np.array([1.0]), snapshots=4)
    keeper.begin(0, 1000)  # policies buffered from step 600 on
    steps = 0
    for it in range(40):  # 40 iterations, the later ones shorter: the tail is the last ceil(0.2 * 40) = 8
        width = 40 if it < 20 else 10
        keeper.observe(_p(it), steps, steps + width, 0.0, np.zeros((4, 1)), it + 1)
        steps += width
    keeper.finish()
    # The last 8 iterations are 32..39; members at positions floor((j + 1/2) 8 / 4) = 1, 3, 5, 7.
    assert [float(p[0]) for p in keeper.deployed()] == [33, 35, 37, 39]


def test_last_keeps_nothing():
    keeper = FinalPolicyKeeper("last", np.array([1.0]))
    assert not keeper.active and keeper.deployed() == []
    with pytest.raises(ValueError, match="deploy='best'; choose one of"):
        FinalPolicyKeeper("best", np.array([1.0]))


@pytest.fixture(scope="module")
def mixture() -> GRPOAgent:
    agent = GRPOAgent(TASK, seed=3, preset="quick", deploy="tail-mixture", deploy_snapshots=4)
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
    best = GRPOAgent(TASK, seed=5, preset="quick", deploy="best-feasible")
    a, b = [], []
    last.learn(10_000, a.append)
    best.learn(10_000, b.append)
    assert [r["ep_cost"] for r in a] == [r["ep_cost"] for r in b]  # snapshots change nothing in training
    mix = GRPOAgent(TASK, seed=5, preset="quick", deploy="tail-mixture").learn(10_000)
    for other in (best, mix):  # the last iterate, parameter for parameter, and the multipliers
        for p, q in zip(last.policy.parameters(), other.policy.parameters(), strict=True):
            assert torch.equal(p, q)
        assert np.array_equal(last.multipliers, other.multipliers)
    kept = best.trainer.final
    # The selection's bound never admits a batch whose mean is over a limit.
    feasible = [r for r in b if all(c <= d for c, d in zip(r["ep_cost"], kept.limits))]
    if kept.best_iteration is not None:
        chosen = next(r for r in b if r["iteration"] == kept.best_iteration)
        assert chosen in feasible and chosen["ep_return"] == kept.best_return
        assert all(u >= c for u, c in zip(kept.best_cost_bound, chosen["ep_cost"]))
    else:
        assert best.deployed_policies() == [best.policy]


def test_text_agents_refuse_a_remedy():
    from constrained_grpo.agents.text_agent import text_config  # noqa: F401  (the refusal is in the agent)

    with pytest.raises(ValueError, match="deploys its last iterate only"):
        from constrained_grpo.agents.text_agent import TextGRPOAgent

        TextGRPOAgent("Math/ChainSum-v0", preset="quick", deploy="tail-mixture")


def test_act_plays_the_member_each_reset_seed_chooses(mixture: GRPOAgent):
    """Over 40 episodes, ``act`` after ``begin_episodes([seed])`` plays member
    ``episode_choice(seed, 4)``: each sampled action is that member's with the same draw, and
    on some steps member 0 would have drawn another action (the members' greedy actions agree
    here, so sampling is what tells them apart); without the episode's seed it refuses."""
    members = mixture.deployed_policies()
    env = make_env(TASK)
    used, other = set(), 0
    for seed in range(100, 140):
        obs, _ = env.reset(seed=seed)
        mixture.begin_episodes(np.array([seed]))
        j = int(episode_choice(seed, 4)[0])
        used.add(j)
        done, t = False, 0
        while not done:
            draw = seed * 1000 + t
            mixture.seed_evaluation(draw)
            action = mixture.act(obs, deterministic=False)
            o = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(1, -1))
            mine, first = (mixture.adapter.env_action(members[i].sample(o, torch.Generator().manual_seed(draw))[0])[0]
                           for i in (j, 0))
            assert action == mine
            other += int(mine != first)
            obs, _, terminated, truncated, _ = env.step(action)
            done, t = terminated or truncated, t + 1
    assert used == {0, 1, 2, 3} and other > 0
    mixture._choices = None
    with pytest.raises(ValueError, match=r"mixture of 4 policies.*begin_episodes"):
        mixture.act(obs)


def test_evaluate_plays_the_mixture(mixture: GRPOAgent, monkeypatch: pytest.MonkeyPatch):
    """``evaluate`` picks each episode's member from its reset seed (``begin_episodes`` after
    each reset, seeds ``eval_seed + i``): its episodes are the harness's serial ones."""
    n, first = 40, mixture.config.eval_seed
    begun: list[int] = []
    real = mixture.begin_episodes
    monkeypatch.setattr(mixture, "begin_episodes", lambda seeds: begun.extend(np.asarray(seeds).tolist()) or real(seeds))
    own = mixture.evaluate(n, deterministic=True)
    assert begun == list(range(first, first + n))
    monkeypatch.undo()
    harness, _ = evaluate_agent(mixture, TASK, episodes=n, first_seed=first, batched=False)
    assert np.array_equal(own.returns, harness["deterministic"].returns)
    assert np.array_equal(own.costs, harness["deterministic"].costs)
