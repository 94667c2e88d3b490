"""Test-only tasks for the baselines: a fixed-length episode with known costs, and a task
that declares constraints but reports no cost vector, and a time-limited variant
(registered under ``TestBaselines/``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from constrained_grpo.constraints import Constraint

FIXED_COST_ID = "TestBaselines/FixedCost-v0"
NO_COSTS_ID = "TestBaselines/NoCosts-v0"
TRUNCATED_ID = "TestBaselines/FixedCostTruncated-v0"
EPISODE_LENGTH = 5


class FixedCostEnv(gym.Env[np.ndarray, np.int64]):
    """Every episode terminates after ``EPISODE_LENGTH`` steps, whatever the actions.

    Step t (0-based) costs ``[1, 1 if t == EPISODE_LENGTH - 1 else 0]`` and rewards 0, so
    the cost-to-go is known by hand. The observation is the elapsed-time fraction.
    """

    constraints = (
        Constraint("steps", 3.0, "one per step"),
        Constraint("last", 0.5, "one on the last step", indicator=True),
    )

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._t / EPISODE_LENGTH], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any):
        costs = np.array([1.0, float(self._t == EPISODE_LENGTH - 1)])
        self._t += 1
        terminated = self._t >= EPISODE_LENGTH
        return self._obs(), 0.0, terminated, False, {"costs": costs, "cost": float(costs.sum())}


class NoCostsEnv(FixedCostEnv):
    """Declares constraints, but its step info has no cost vector (breaks Contract 1)."""

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {}


class TruncatedCostEnv(FixedCostEnv):
    """FixedCostEnv whose episodes are truncated (time limit), not terminated, after
    ``EPISODE_LENGTH`` steps: the learner must bootstrap the last step with its critics."""

    def step(self, action: Any):
        obs, reward, terminated, _, info = super().step(action)
        return obs, reward, False, terminated, info


for _id, _cls in ((FIXED_COST_ID, FixedCostEnv), (NO_COSTS_ID, NoCostsEnv), (TRUNCATED_ID, TruncatedCostEnv)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_cls)
