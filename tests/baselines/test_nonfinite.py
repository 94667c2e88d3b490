"""Issue 17, point 1: a task whose observations turn NaN after some steps must stop training
with a named error, for the GRPO agents and the SB3 baselines, instead of training on NaN
(every weight NaN, argmax always action 0, evaluation scoring a "feasible" run)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import constrained_grpo
from constrained_grpo.agents.trainer import (
    GRPOTrainer,
    NonFiniteObservationError,
    NonFiniteRolloutError,
    NonFiniteUpdateError,
    RolloutBatch,
    check_finite_observations,
)
from constrained_grpo.agents.config import make_config
from constrained_grpo.envs.gridworld.batched import BatchedGridWorld
from constrained_grpo.envs.gridworld.env import GridWorldEnv

NAN_AFTER = 40  # steps of one env copy (or of the batched twin) before its observations turn NaN
GRID_3X3 = {"size": 3, "constraints": ("hazard", "fuel"), "default_limits": {"hazard": 0.2, "fuel": 4.4}}
NAN_ID = "TestNonFinite/NaNObs-v0"
NAN_BATCHED_ID = "TestNonFinite/NaNObsBatched-v0"


class NaNObsGrid(GridWorldEnv):
    """The 3x3 gridworld whose observations are NaN from its ``NAN_AFTER``-th step on."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.steps = 0

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps >= NAN_AFTER:
            obs, info = self.spoil(obs, info)
        return obs, reward, terminated, truncated, info

    def spoil(self, obs: np.ndarray, info: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        """What turns non-finite: here the observation."""
        return np.full_like(obs, np.nan), info


class NaNObsBatchedGrid(BatchedGridWorld):
    """The batched twin, whose observations are NaN from its ``NAN_AFTER``-th step on."""

    def __init__(self, num_envs: int = 1, **kwargs: Any):
        super().__init__(num_envs, **kwargs)
        self.steps = 0

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = super().step(actions)
        self.steps += 1
        if self.steps >= NAN_AFTER:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


for _id, _vec in ((NAN_ID, None), (NAN_BATCHED_ID, NaNObsBatchedGrid)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=NaNObsGrid, vector_entry_point=_vec, kwargs=dict(GRID_3X3))


def _assert_finite_weights(module: torch.nn.Module) -> None:
    for name, p in module.named_parameters():
        assert torch.isfinite(p).all(), f"parameter {name} is not finite"


@pytest.mark.parametrize("algo", ["cgrpo", "grpo-screw"])
def test_grpo_agent_stops_on_nan_observations(algo: str) -> None:
    agent = constrained_grpo.make_agent(algo, NAN_ID, seed=0, preset="quick")
    logged: list[dict[str, Any]] = []
    with pytest.raises(NonFiniteObservationError, match=r"iteration \d+: rollout step \d+: non-finite observation") as info:
        agent.learn(1_000_000, logged.append)
    # Every env copy steps once per rollout step, so the NaN arrives within NAN_AFTER steps of a copy.
    assert 1 <= len(logged) < NAN_AFTER
    # The message says what was kept: exactly the iterations logged.
    assert f"(the {len(logged)} iteration{'s' if len(logged) > 1 else ''} before it" in str(info.value)
    assert all(np.isfinite(r["ep_return"]) for r in logged)
    _assert_finite_weights(agent.policy)


@pytest.mark.parametrize(("algo", "env_id"), [("ppo-lag", NAN_ID), ("ppo-lag", NAN_BATCHED_ID), ("pid-lag", NAN_ID), ("ppo", NAN_BATCHED_ID)])
def test_baseline_stops_on_nan_observations(algo: str, env_id: str) -> None:
    agent = constrained_grpo.make_agent(algo, env_id, seed=0, n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    logged: list[dict[str, Any]] = []
    with pytest.raises(NonFiniteObservationError, match=r"env step \d+: non-finite observation from env\(s\) \[0, 1\] "
                                                        r".*training stopped \(the 2 iterations before it were logged\)"):
        agent.learn(100_000, logged.append)
    # NAN_AFTER = 40 steps per copy: two rollouts of 16 steps end before the NaN, the third
    # meets it at the 40th step of each copy, before SB3 stores it.
    assert [r["iteration"] for r in logged] == [1, 2]
    assert agent.env_steps == 2 * NAN_AFTER
    _assert_finite_weights(agent.model.policy)


def test_a_run_stopped_before_its_first_record_says_none_was_logged() -> None:
    from constrained_grpo.nonfinite import logged_note

    assert logged_note(0) == " (no iteration had been logged)" and logged_note(1).endswith("iteration before it was logged)")
    agent = constrained_grpo.make_agent("ppo-lag", NAN_ID, seed=0, n_envs=2, n_steps=64, batch_size=64, n_epochs=1)
    with pytest.raises(NonFiniteObservationError, match=r"training stopped \(no iteration had been logged\)"):
        agent.learn(100_000, lambda record: None)


def test_check_finite_observations_names_the_rows() -> None:
    obs = np.zeros((4, 3), dtype=np.float32)
    check_finite_observations(obs, "here")
    obs[2, 1] = np.inf
    obs[3, 0] = np.nan
    with pytest.raises(NonFiniteObservationError, match=r"here: non-finite observation from env\(s\) \[2, 3\] \(2 NaN"):
        check_finite_observations(obs, "here")
    assert issubclass(NonFiniteObservationError, NonFiniteRolloutError)


class _InfLossAdapter:
    """Finite rollouts whose stored old log-probabilities are -inf at ``bad_iteration``:
    the ratio, and so the loss, is infinite there (the trainer must not step on it)."""

    constraint_names = ("c",)
    limits = np.array([1.0])

    def __init__(self, bad_iteration: int):
        self.calls = 0
        self.bad_iteration = bad_iteration

    def collect(self, policy: torch.nn.Module, num_groups: int, group_size: int) -> RolloutBatch:
        self.calls += 1
        n = num_groups * group_size
        x = np.random.default_rng(self.calls).random((num_groups, group_size, 2))
        obs = torch.randn(n, 3, 2, generator=torch.Generator().manual_seed(self.calls))
        with torch.no_grad():
            logp = torch.log_softmax(policy(obs), -1)[..., 0]
        if self.calls == self.bad_iteration:
            logp = torch.full_like(logp, -torch.inf)
        return RolloutBatch(x, logp, torch.ones(n, 3, dtype=torch.bool), 3 * n, np.full(n, 3), obs)

    def log_probs(self, policy: torch.nn.Module, batch: RolloutBatch, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp_all = torch.log_softmax(policy(batch.data[index]), -1)
        return logp_all[..., 0], -(logp_all.exp() * logp_all).sum(-1)


def test_trainer_stops_on_a_non_finite_loss_before_stepping() -> None:
    cfg = make_config("quick", num_groups=2, group_size=3, minibatches=1, kl_coef=0.0)
    policy = torch.nn.Linear(2, 2)
    trainer = GRPOTrainer(cfg, _InfLossAdapter(3), policy)
    logged: list[dict[str, Any]] = []
    before: dict[str, torch.Tensor] = {}

    def log(record: dict[str, Any]) -> None:
        logged.append(record)
        before.update({k: v.clone() for k, v in policy.state_dict().items()})

    with pytest.raises(NonFiniteUpdateError, match="iteration 3: non-finite loss"):
        trainer.train(10_000, log)
    assert [r["iteration"] for r in logged] == [1, 2]
    for k, v in policy.state_dict().items():  # the bad iteration changed no weight
        assert torch.equal(v, before[k])


class NaNCostGrid(NaNObsGrid):
    """The 3x3 gridworld whose fuel cost (not its observation) is NaN from its ``NAN_AFTER``-th step on."""

    def spoil(self, obs: np.ndarray, info: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        return obs, {**info, "costs": np.array([info["costs"][0], np.nan])}


NAN_COST_ID = "TestNonFinite/NaNCost-v0"
if NAN_COST_ID not in gym.registry:
    gym.register(id=NAN_COST_ID, entry_point=NaNCostGrid, kwargs=dict(GRID_3X3))


def test_saute_names_a_nan_cost_as_a_cost() -> None:
    # It used to reach the budget, then the observation, and be reported as a NaN observation.
    agent = constrained_grpo.make_agent("saute-ppo", NAN_COST_ID, seed=0, n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    with pytest.raises(NonFiniteRolloutError, match=r"non-finite cost from env\(s\) \[0, 1\]"):
        agent.learn(100_000, lambda record: None)
