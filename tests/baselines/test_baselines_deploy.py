"""Deployment rules on the SB3-based learners: the same candidates and memory bounds as the
GRPO agents (one snapshot per rollout), training untouched, the mixture played per episode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from constrained_grpo.baselines.agent import load_agent
from constrained_grpo.deploy import VALIDATION_SEED, validation_size
from constrained_grpo.eval.evaluation import evaluate_agent
from constrained_grpo.registry import make_agent
from constrained_grpo.sampling import episode_choice
from constrained_grpo.tasks import make_env

TASK = "Grid/HazardFuel3x3-v0"
TINY = {"n_envs": 4, "n_steps": 32, "batch_size": 64, "n_epochs": 2}
STEPS = 20 * 128  # 20 rollouts


@pytest.fixture(scope="module")
def trained() -> dict[str, object]:
    return {rule: make_agent("ppo-lag", TASK, seed=2, deploy=rule, deploy_snapshots=4, **TINY).learn(STEPS)
            for rule in ("last", "best-feasible", "tail-mixture")}


@pytest.mark.slow
def test_snapshots_do_not_change_training(trained: dict[str, object]) -> None:
    last = trained["last"].model.policy.state_dict()
    for rule in ("best-feasible", "tail-mixture"):
        other = trained[rule].model.policy.state_dict()
        assert other.keys() == last.keys()
        for name, value in last.items():
            assert torch.equal(value, other[name]), (rule, name)
        assert np.array_equal(trained[rule].multipliers, trained["last"].multipliers)


@pytest.mark.parametrize("name", ["cpo", "saute-ppo"])
def test_snapshots_do_not_change_training_of_other_learners(name: str) -> None:
    a = make_agent(name, TASK, seed=1, **TINY).learn(4 * 128)
    b = make_agent(name, TASK, seed=1, deploy="tail-mixture", **TINY).learn(4 * 128)
    for p, q in zip(a.model.policy.parameters(), b.model.policy.parameters(), strict=True):
        assert torch.equal(p, q)
    assert len(b.deployed_policies()) >= 1 and b.final.kept


def test_tail_mixture_keeps_evenly_spaced_rollouts_of_the_last_fifth(trained: dict[str, object]) -> None:
    """20 rollouts: the tail is the last ceil(0.2 * 20) = 4, and 4 members keep all of them;
    the last member is the policy that collected the last rollout, not the last iterate."""
    agent = trained["tail-mixture"]
    members = agent.deployed_policies()
    assert len(members) == 4 and agent.final.state()["kept"] == 4
    first = [next(m.parameters()) for m in members]
    assert not any(torch.equal(first[0], f) for f in first[1:])
    assert not torch.equal(first[-1], next(agent.model.policy.parameters()))


def test_best_feasible_selection_is_recorded(trained: dict[str, object]) -> None:
    agent = trained["best-feasible"]
    state = agent.final.state()
    if state["best_iteration"] is None:
        assert agent.deployed_policies() == [agent.model.policy]
    else:
        assert state["groups"] >= 2 and state["alpha"] == 0.05
    # The held-out validation (constrained_grpo.deploy): the deployed policy's validation bound
    # is within the limits unless the last iterate is deployed, and its episodes are the
    # harness's sampled evaluation on the validation seeds.
    v = state["validation"]
    assert v["episodes"] == validation_size(state["episodes_seen"]) == 200 and v["first_seed"] == VALIDATION_SEED
    assert (v["deployed"] == "last") == (state["best_iteration"] is None)
    if v["deployed"] != "last":
        assert all(u <= d for u, d in zip(v["cost_bound"], agent.final.limits))
    harness, _ = evaluate_agent(agent, TASK, episodes=200, first_seed=VALIDATION_SEED)
    assert v["cost_mean"] == pytest.approx(harness["sampled"].costs.mean(axis=0).tolist(), abs=1e-6)
    assert v["return_mean"] == pytest.approx(float(harness["sampled"].returns.mean()), abs=1e-6)


def test_a_saute_validation_plays_its_augmented_observation() -> None:
    """Saute acts on the remaining budget too: its validation plays the wrapped vector env,
    the episodes the harness evaluates."""
    agent = make_agent("saute-ppo", TASK, seed=1, deploy="best-feasible", deploy_validation_episodes=50, **TINY)
    agent.learn(4 * 128)
    v = agent.final.state()["validation"]
    harness, _ = evaluate_agent(agent, TASK, episodes=50, first_seed=VALIDATION_SEED)
    assert v["episodes"] == 50 and v["cost_mean"] == pytest.approx(harness["sampled"].costs.mean(axis=0).tolist(), abs=1e-6)


def test_the_mixture_is_what_act_act_batch_and_evaluate_play(trained: dict[str, object], tmp_path: Path) -> None:
    agent = trained["tail-mixture"]
    members = agent.deployed_policies()
    seeds = np.arange(500, 900)
    choice = episode_choice(seeds, 4)
    assert set(choice.tolist()) == {0, 1, 2, 3}
    env, rng = make_env(TASK), np.random.default_rng(0)
    env.action_space.seed(0)
    obs = []
    for s in seeds:  # the observation after a few random steps of episode s
        o, _ = env.reset(seed=int(s))
        for _ in range(int(s) % 3):
            o, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                o, _ = env.reset(seed=int(s))
        obs.append(o)
    obs = np.stack(obs)
    u = rng.random((len(seeds), 1))
    agent.begin_episodes(seeds)
    got = agent.act_batch(obs, False, u)  # sampled by each row's draw: the members differ there
    alone = [agent._act_batch(m, obs, False, u) for m in members]
    assert np.array_equal(got, np.choose(choice, alone))
    assert (np.choose(choice, alone) != alone[0]).any()  # one snapshot would have played otherwise
    agent.begin_episodes(seeds[:1])
    assert agent.act(obs[0]) == members[choice[0]].predict(obs[0], deterministic=True)[0]
    agent._choices = None
    with pytest.raises(ValueError, match=r"mixture of 4 policies.*begin_episodes"):
        agent.act(obs[0])
    # evaluate() and the harness play the same episodes from the same reset seeds.
    own = agent.evaluate(30, deterministic=True, seed=700)
    harness, _ = evaluate_agent(agent, TASK, episodes=30, first_seed=700, batched=False)
    assert np.array_equal(own.returns, harness["deterministic"].returns)
    # The snapshots survive save and load (safetensors beside SB3's zip).
    again = load_agent(agent.save(tmp_path / "agent"))
    assert (tmp_path / "agent" / "deploy.safetensors").is_file()
    for m, n in zip(members, again.deployed_policies(), strict=True):
        for p, q in zip(m.parameters(), n.parameters(), strict=True):
            assert torch.equal(p, q)
    mixed, _ = evaluate_agent(again, TASK, episodes=60, first_seed=900)
    before, _ = evaluate_agent(agent, TASK, episodes=60, first_seed=900)
    assert np.array_equal(mixed["sampled"].returns, before["sampled"].returns)


def test_a_bad_rule_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"deploy='best'; choose one of \['last', 'best-feasible', 'tail-mixture'\]"):
        make_agent("ppo-lag", TASK, deploy="best", **TINY)


def test_every_learner_takes_the_option_and_records_it() -> None:
    """Every learning algorithm (not the references, whose policy is fixed) resolves
    ``deploy`` into the configuration config.json records; an alias is no algorithm."""
    from constrained_grpo.registry import agent_spec, list_agents, resolve_config

    learners = [n for n in list_agents(aliases=False) if not agent_spec(n).reference]
    assert "ppo-lag" in learners and "cgrpo" in learners and "cgrpo-best" not in learners
    for name in learners:
        for rule in ("best-feasible", "tail-mixture"):
            assert resolve_config(name, TASK, deploy=rule)["config"]["deploy"] == rule, name
    assert agent_spec("cgrpo-best").alias_of == "cgrpo" and resolve_config("cgrpo-mix", TASK)["config"]["deploy"] == "tail-mixture"
    # Every SB3-based learner has both aliases, each the learner's own preset with the rule.
    for name in (n for n in learners if agent_spec(n).entry_point.__class__.__name__ == "BaselineFactory"):
        for suffix, rule in (("best", "best-feasible"), ("mix", "tail-mixture")):
            alias = agent_spec(f"{name}-{suffix}")
            assert alias.alias_of == name and alias.entry_point == agent_spec(name).entry_point, alias
            resolved = resolve_config(alias.name, TASK)["config"]
            assert resolved == {**resolve_config(name, TASK, deploy=rule)["config"]}, alias.name
