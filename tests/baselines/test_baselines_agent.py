"""The baselines as Contract-2 agents: registry, config, log records, save/load, bad input."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env

import constrained_grpo.envs
from constrained_grpo.baselines import BaselineAgent, PPOLagConfig, load_agent
from constrained_grpo.baselines.ppo_lagrangian import PPOLagrangian
from constrained_grpo.constraints import ConstraintError, CostContractError
from constrained_grpo.multipliers import DualAscentMultiplier, PIDMultiplier
from constrained_grpo.registry import EvalResult, agent_spec, list_agents, make_agent, validate_log_record
from constrained_grpo.tasks import make_env

from baseline_envs import NO_COSTS_ID

TASK = "Grid/HazardFuel3x3-v0"
#: A small, fast configuration: 2 envs x 32 steps per rollout.
TINY = {"n_envs": 2, "n_steps": 32, "batch_size": 32, "n_epochs": 2}
ALGOS = ("ppo", "ppo-lag", "pid-lag")


@pytest.mark.parametrize("env_id", constrained_grpo.envs.list_tasks("gridworld"))
def test_sb3_check_env_on_every_gridworld_task(env_id: str) -> None:
    env = make_env(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SB3's checker reports problems as warnings
        check_env(env.unwrapped)
        check_env(env)


def test_registry_names_and_kinds() -> None:
    assert set(ALGOS) <= set(list_agents())
    assert not agent_spec("ppo").constrained
    assert agent_spec("ppo-lag").constrained and agent_spec("pid-lag").constrained
    ppo, lag, pid = (make_agent(name, TASK, seed=0, **TINY) for name in ALGOS)
    assert type(ppo.model) is PPO and ppo.multipliers.size == 0
    assert isinstance(lag.model, PPOLagrangian) and isinstance(lag.model.multiplier, DualAscentMultiplier)
    assert isinstance(pid.model, PPOLagrangian) and isinstance(pid.model.multiplier, PIDMultiplier)
    assert lag.model.policy.cost_value_net[-1].out_features == 2


def test_config_options() -> None:
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['n_step'\].*valid options.*'n_steps'"):
        make_agent("ppo-lag", TASK, n_step=64)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['multiplier_lr'\]"):
        make_agent("ppo", TASK, multiplier_lr=0.1)  # no multipliers in plain PPO
    # A multiplier option composes with the variant's preset instead of replacing it.
    pid = make_agent("pid-lag", TASK, multiplier={"kp": 0.3}, **TINY)
    assert pid.config.multiplier.rule == "pid" and pid.config.multiplier.kp == 0.3
    config = PPOLagConfig.from_dict({"multiplier": {"lr": 0.2}, "net_arch": [32], "limits": [0.3, 5]})
    assert config.multiplier.lr == 0.2 and config.multiplier.rule == PPOLagConfig().multiplier.rule
    assert PPOLagConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="cost_advantage_norm"):
        PPOLagConfig(cost_advantage_norm="zscore")


@pytest.mark.parametrize("name", ALGOS)
def test_log_records_follow_contract_2(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where SB3's default logger would write
    agent = make_agent(name, TASK, seed=0, **TINY)
    records: list[dict] = []
    agent.learn(4 * 64, records.append)
    assert len(records) == 4
    for i, record in enumerate(records):
        validate_log_record(record, 2)
        assert record["env_steps"] == 64 * (i + 1)
        assert len(record["multipliers"]) == (0 if name == "ppo" else 2)
        for loss in ("policy_loss", "value_loss", "entropy_loss", "approx_kl"):
            assert np.isfinite(record[loss])
        if name != "ppo":
            assert np.isfinite(record["value_loss_cost"]) and len(record["estimated_cost"]) == 2
    assert all(b["wall_s"] >= a["wall_s"] for a, b in zip(records, records[1:]))
    # A second learn() continues the counters.
    agent.learn(64, records.append)
    assert records[-1]["env_steps"] == 5 * 64 and records[-1]["iteration"] == 5
    assert list(tmp_path.glob("SB3-*")) == []  # training leaves no SB3-<time> log folder behind


def _state_tensors(agent: BaselineAgent) -> dict[str, th.Tensor]:
    params = agent.model.get_parameters()
    out = {f"policy.{k}": v for k, v in params["policy"].items()}
    for i, (pid, st) in enumerate(params["policy.optimizer"]["state"].items()):
        out.update({f"adam.{pid}.{k}": th.as_tensor(v) for k, v in st.items()})
    return out


@pytest.mark.parametrize("name", ALGOS)
def test_save_load_restores_exactly(name: str, tmp_path: Path) -> None:
    agent = make_agent(name, TASK, seed=3, **TINY)
    agent.learn(3 * 64)
    agent.save(tmp_path / "agent")
    assert {p.name for p in (tmp_path / "agent").iterdir()} == {"model.zip", "agent.json"}
    loaded = load_agent(tmp_path / "agent")
    assert loaded.config == agent.config and loaded.env_steps == agent.env_steps == 192
    before, after = _state_tensors(agent), _state_tensors(loaded)
    assert before.keys() == after.keys()
    for key in before:
        assert th.equal(before[key], after[key]), key
    obs = np.random.default_rng(0).random((50, 13)).astype(np.float32)
    np.testing.assert_array_equal(agent.predict(obs), loaded.predict(obs))
    for deterministic in (True, False):
        a, b = agent.evaluate(8, deterministic), loaded.evaluate(8, deterministic)
        np.testing.assert_array_equal(a.returns, b.returns)
        np.testing.assert_array_equal(a.costs, b.costs)
    if name != "ppo":
        assert agent.multipliers.any(), "the test should restore moved multipliers"
        assert json.dumps(loaded.model.multiplier.state_dict()) == json.dumps(agent.model.multiplier.state_dict())
        np.testing.assert_array_equal(loaded.multipliers, agent.multipliers)
        np.testing.assert_array_equal(loaded.model.cost_estimate, agent.model.cost_estimate)


def test_load_into_other_config_is_an_error(tmp_path: Path) -> None:
    make_agent("ppo-lag", TASK, seed=0, **TINY).save(tmp_path / "a")
    other = make_agent("ppo-lag", TASK, seed=0, **{**TINY, "n_steps": 16})
    with pytest.raises(ValueError, match="load_agent"):
        other.load(tmp_path / "a")


def test_evaluate_shapes_and_reproducibility() -> None:
    agent = make_agent("ppo-lag", TASK, seed=0, **TINY)
    result = agent.evaluate(6, deterministic=False)
    assert isinstance(result, EvalResult)
    assert result.returns.shape == (6,) and result.costs.shape == (6, 2) and result.lengths.shape == (6,)
    again = agent.evaluate(6, deterministic=False)
    np.testing.assert_array_equal(result.costs, again.costs)


def test_task_without_constraints_points_to_the_cost_contract() -> None:
    with pytest.raises(CostContractError, match="Contract 1"):
        make_agent("ppo-lag", "CartPole-v1")
    with pytest.raises(CostContractError, match="Contract 1"):
        make_agent("ppo", "CartPole-v1")


def test_task_without_cost_vector_points_to_the_cost_contract() -> None:
    with pytest.raises(CostContractError, match=r"info\['costs'\].*Contract 1"):
        make_agent("ppo-lag", NO_COSTS_ID)


def test_limits_must_match_constraints() -> None:
    with pytest.raises(ConstraintError, match="3 limit.*2 constraint"):
        make_agent("ppo-lag", TASK, limits=[0.1, 4.0, 1.0])
    with pytest.raises(ConstraintError, match="unknown constraint"):
        make_agent("pid-lag", TASK, limits={"speed": 1.0})
    agent = make_agent("ppo-lag", TASK, limits={"fuel": 6.0}, **TINY)
    assert [c.limit for c in agent.constraints] == [0.2, 6.0]
    np.testing.assert_array_equal(agent.model.multiplier.limits, [0.2, 6.0])
