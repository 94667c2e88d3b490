"""The SB3 VecEnv over a task's batched twin (issue 18): same episodes, rewards, costs and
infos as SB3's DummyVecEnv of RecordEpisodeCost copies, for the same seeds and actions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

import constrained_grpo
from constrained_grpo.baselines.agent import make_baseline_vec_env
from constrained_grpo.baselines.config import PPOConfig, PPOLagConfig
from constrained_grpo.baselines.vec_env import GymVectorVecEnv, split_vector_info
from constrained_grpo.constraints import CostContractError
from constrained_grpo.tasks import make_vec_env, task_constraints

from baseline_envs import FIXED_COST_ID, TRUNCATED_ID


def _episodes(env: Any, actions: np.ndarray, seed: int) -> tuple[list[list[tuple[float, int, list[float]]]], dict[str, list]]:
    """Per sub-env, the (return, length, costs) of every finished episode; and the step data."""
    env.seed(seed)
    obs = env.reset()
    episodes: list[list[tuple[float, int, list[float]]]] = [[] for _ in range(env.num_envs)]
    steps: dict[str, list] = {"obs": [obs], "rewards": [], "dones": [], "costs": [], "truncated": [], "terminal": []}
    for a in actions:
        obs, rewards, dones, infos = env.step(a)
        steps["obs"].append(obs)
        steps["rewards"].append(rewards)
        steps["dones"].append(dones)
        steps["costs"].append(np.stack([info["costs"] for info in infos]))
        steps["truncated"].append([info["TimeLimit.truncated"] for info in infos])
        for i in np.flatnonzero(dones):
            ep = infos[i]["episode"]
            episodes[i].append((float(ep["r"]), int(ep["l"]), np.asarray(ep["c"]).tolist()))
            steps["terminal"].append((i, infos[i]["terminal_observation"]))
    env.close()
    return episodes, steps


@pytest.mark.parametrize("env_id", ["Grid/HazardFuelSlip-v0", "Grid/HazardFuel3x3-v0"])
def test_batched_twin_gives_the_dummy_vec_env_episodes(env_id: str) -> None:
    n, seed = 5, 11
    constraints = task_constraints(env_id)
    dummy = make_baseline_vec_env(env_id, PPOConfig(n_envs=n, vec_env="dummy"), constraints)
    batched = make_baseline_vec_env(env_id, PPOConfig(n_envs=n, vec_env="batched"), constraints)
    assert isinstance(dummy, DummyVecEnv) and isinstance(batched, GymVectorVecEnv)
    # Random actions; episodes end by the goal (terminated) and by the time limit (truncated).
    actions = np.random.default_rng(3).integers(0, 4, size=(400, n))
    ep_dummy, st_dummy = _episodes(dummy, actions, seed)
    ep_batched, st_batched = _episodes(batched, actions, seed)
    assert all(len(e) >= 3 for e in ep_dummy)  # several episodes per sub-env
    assert ep_batched == ep_dummy  # returns, lengths and cost vectors, episode by episode
    for key in ("obs", "rewards", "dones", "costs"):
        for a, b in zip(st_dummy[key], st_batched[key]):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype
    assert st_batched["truncated"] == st_dummy["truncated"]
    assert any(any(t) for t in st_dummy["truncated"])  # the time-limit path is exercised
    assert len(st_batched["terminal"]) == len(st_dummy["terminal"])
    for (i, a), (j, b) in zip(st_dummy["terminal"], st_batched["terminal"]):
        assert i == j
        np.testing.assert_array_equal(a, b)


def test_lagrangian_training_is_identical_on_both_paths() -> None:
    """ppo-lag logs the same iterations (returns, costs, losses, multipliers) on either path."""
    runs = []
    for vec_env in ("dummy", "batched"):
        agent = constrained_grpo.make_agent(
            "ppo-lag", "Grid/HazardFuelSlip-v0", seed=4, n_envs=4, n_steps=64, batch_size=128, n_epochs=2,
            vec_env=vec_env,
        )
        records: list[dict[str, Any]] = []
        agent.learn(3 * 4 * 64, records.append)
        runs.append([{k: v for k, v in r.items() if k != "wall_s"} for r in records])
    assert len(runs[0]) == 3
    assert runs[0] == runs[1]


def test_auto_uses_the_batched_twin_only_where_there_is_one() -> None:
    grid = constrained_grpo.make_agent("ppo-lag", "Grid/HazardFuel3x3-v0", n_envs=2, n_steps=8, batch_size=16)
    assert isinstance(grid.env, GymVectorVecEnv) and grid.env.num_envs == 2
    custom = constrained_grpo.make_agent("ppo-lag", FIXED_COST_ID, n_envs=2, n_steps=8, batch_size=16)
    assert isinstance(custom.env, DummyVecEnv)
    with pytest.raises(ValueError, match="registers no batched twin"):
        constrained_grpo.make_agent("ppo-lag", FIXED_COST_ID, n_envs=2, n_steps=8, batch_size=16, vec_env="batched")
    with pytest.raises(ValueError, match=r"vec_env='fast'; choose one of \['auto', 'batched', 'dummy'\]"):
        PPOLagConfig(vec_env="fast")


def test_split_vector_info_rows_and_masks() -> None:
    info = {
        "costs": np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
        "final_obs": np.array([[0.0], [7.0], [0.0]]),
        "_final_obs": np.array([False, True, False]),
        "episode": {"r": np.array([0.0, 2.5, 0.0]), "_r": np.array([False, True, False])},
        "_episode": np.array([False, True, False]),
        "scalar": 3.0,
    }
    rows = split_vector_info(info, 3)
    assert [sorted(r) for r in rows] == [["costs"], ["costs", "episode", "final_obs"], ["costs"]]
    assert rows[1]["costs"].tolist() == [3.0, 4.0] and rows[1]["final_obs"].tolist() == [7.0]
    assert rows[1]["episode"] == {"r": 2.5}


def test_wrong_cost_shape_is_a_contract_error() -> None:
    env = GymVectorVecEnv(make_vec_env("Grid/HazardFuel3x3-v0", 2), task_constraints("Grid/HazardFuel3x3-v0")[:1])
    env.reset()
    with pytest.raises(CostContractError, match=r"must have shape \(2, 1\).*got \(2, 2\)"):
        env.step(np.array([0, 0]))


@pytest.mark.parametrize("env_id", [FIXED_COST_ID, TRUNCATED_ID])
def test_sync_vector_env_of_single_envs_gives_the_dummy_vec_env_episodes(env_id: str) -> None:
    """Over a SyncVectorEnv (no batched twin), whose finished rows carry the reset's info:
    the step's own info (from ``final_info``) and its costs reach the per-env dicts."""
    n = 3
    constraints = task_constraints(env_id)
    dummy = make_baseline_vec_env(env_id, PPOConfig(n_envs=n, vec_env="dummy"), constraints)
    sync = GymVectorVecEnv(make_vec_env(env_id, n), constraints)
    actions = np.zeros((12, n), dtype=np.int64)
    ep_dummy, st_dummy = _episodes(dummy, actions, 0)
    ep_sync, st_sync = _episodes(sync, actions, 0)
    # Episodes of EPISODE_LENGTH = 5 steps costing (1, 0) per step and (1, 1) on the last.
    assert ep_dummy == [[(0.0, 5, [5.0, 1.0])] * 2] * n
    assert ep_sync == ep_dummy
    for key in ("obs", "rewards", "dones", "costs"):
        for a, b in zip(st_dummy[key], st_sync[key]):
            np.testing.assert_array_equal(a, b)
    assert st_sync["truncated"] == st_dummy["truncated"]
    assert any(any(t) for t in st_sync["truncated"]) == (env_id == TRUNCATED_ID)


def test_sizes_resolve_by_env_path_and_the_resolver_agrees_with_the_agent() -> None:
    from constrained_grpo.registry import resolve_config

    grid = resolve_config("ppo-lag", "Grid/HazardFuel-v0")["config"]
    assert (grid["n_envs"], grid["n_steps"], grid["batch_size"], grid["vec_env"]) == (256, 16, 1024, "auto")
    single = resolve_config("ppo", FIXED_COST_ID)["config"]
    assert (single["n_envs"], single["n_steps"], single["batch_size"]) == (8, 512, 256)
    given = resolve_config("pid-lag", "Grid/HazardFuel3x3-v0", n_envs=4, batch_size=32)["config"]
    assert (given["n_envs"], given["n_steps"], given["batch_size"]) == (4, 16, 32)
    agent = constrained_grpo.make_agent("pid-lag", "Grid/HazardFuel3x3-v0", n_envs=4, batch_size=32)
    assert agent.config.to_dict() == given and agent.config.rollout_steps == 64
    with pytest.raises(ValueError, match="rollout_steps of an unresolved config"):
        _ = PPOConfig().rollout_steps
